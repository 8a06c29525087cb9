from iniread import parse


def test_value_with_equals():
    c = parse("[db]\nurl = postgres://h/db?opt=1\n")
    assert c["db"]["url"] == "postgres://h/db?opt=1"


def test_keys_case_insensitive():
    c = parse("[a]\nName = x\n")
    assert c["a"]["name"] == "x"


def test_typed():
    c = parse("[s]\nport = 8080\ndebug = yes\n")
    assert c.get_int("s", "port") == 8080
    assert c.get_bool("s", "debug") is True
    assert c.get_int("s", "missing", 7) == 7
