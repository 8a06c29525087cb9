from globmatch import filter_names, match


def test_question_mark():
    assert match("cat", "c?t")
    assert not match("cart", "c?t")


def test_classes():
    assert match("b1", "[abc][0-9]")
    assert not match("b1", "[abc][xyz]")
    assert match("b", "[abc]")
    assert match("d", "[!abc]")


def test_filter():
    assert filter_names(["a.py", "b.txt", "c.py"], "*.py") == ["a.py", "c.py"]
