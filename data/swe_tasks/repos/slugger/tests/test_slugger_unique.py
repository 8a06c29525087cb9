from slugger import unique_slug


def test_unique():
    assert unique_slug("Post", set()) == "post"
    assert unique_slug("Post", {"post", "post-2"}) == "post-3"


def test_empty_falls_back():
    assert unique_slug("!!!", set()) == "item"
