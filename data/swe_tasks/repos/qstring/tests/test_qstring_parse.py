from qstring import parse


def test_repeated_keys():
    assert parse("a=1&b=2&a=3") == {"a": ["1", "3"], "b": ["2"]}


def test_decoding():
    assert parse("q=caf%C3%A9+au+lait") == {"q": ["café au lait"]}


def test_leading_question_mark_and_empty():
    assert parse("?x=&&y=1") == {"x": [""], "y": ["1"]}
