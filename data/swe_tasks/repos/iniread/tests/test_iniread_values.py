from urllib.parse import parse_qs, urlsplit

from iniread import parse


def test_value_with_equals():
    c = parse("[db]\nurl = postgres://h/db?opt=1\n")
    assert c["db"]["url"] == "postgres://h/db?opt=1"
    # the whole query reaches its reader (a value cut at its first "=" keeps none of it)
    url = parse("[db]\nurl = postgres://h/db?opt=1&ssl=on\n")["db"]["url"]
    assert parse_qs(urlsplit(url).query) == {"opt": ["1"], "ssl": ["on"]}


def test_keys_case_insensitive():
    c = parse("[a]\nName = x\n")
    assert c["a"]["name"] == "x"


def test_typed():
    c = parse("[s]\nport = 8080\ndebug = yes\n")
    assert c.get_int("s", "port") == 8080
    assert c.get_bool("s", "debug") is True
    assert c.get_int("s", "missing", 7) == 7
