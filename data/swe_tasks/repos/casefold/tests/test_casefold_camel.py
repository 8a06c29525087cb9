from casefold import to_camel, to_kebab


def test_camel():
    assert to_camel("user_id") == "userId"
    assert to_camel("user_id", upper_first=True) == "UserId"


def test_kebab():
    assert to_kebab("some_name") == "some-name"


def test_empty():
    assert to_camel("") == ""
