from jpointer import resolve, split


DOC = {"a/b": 1, "m~n": 2, "~1": 3}


def test_slash_escape():
    assert resolve(DOC, "/a~1b") == 1


def test_tilde_escape():
    assert resolve(DOC, "/m~0n") == 2


def test_order_of_unescaping():
    assert split("/~01") == ["~1"]
    assert resolve(DOC, "/~01") == 3
