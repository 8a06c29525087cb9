from slugger import slugify


def test_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_accents():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_max_length_no_trailing_dash():
    assert slugify("abc def ghi", max_length=4) == "abc"
