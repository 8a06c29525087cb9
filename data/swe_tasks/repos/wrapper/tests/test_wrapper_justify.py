from wrapper import justify


def test_justify():
    assert justify("a bb ccc dd", 7) == ["a    bb", "ccc dd "]


def test_single_word_lines():
    assert justify("hello", 7) == ["hello  "]
