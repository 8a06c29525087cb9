import pytest

from calcparse import evaluate, tokenize


def test_tokens():
    assert tokenize("1+2.5*(3)") == ["1", "+", "2.5", "*", "(", "3", ")"]


def test_parens_unary():
    assert evaluate("-(1 + 2) * 3") == -9


def test_errors():
    with pytest.raises(SyntaxError):
        evaluate("1 +")
    with pytest.raises(SyntaxError):
        evaluate("(1")
