from qstring import build, parse


def test_build():
    assert build({"a": "1 2", "b": ["x", "y"]}) == "a=1%202&b=x&b=y"


def test_roundtrip():
    params = {"name": ["Zoë & co"], "n": ["5"]}
    assert parse(build(params)) == params
