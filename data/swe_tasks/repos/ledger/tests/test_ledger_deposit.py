import pytest

from ledger import Account


def test_deposit():
    a = Account("x")
    a.deposit(10)
    assert a.balance == 10
    assert a.history == [("deposit", 10)]


def test_negative_deposit():
    with pytest.raises(ValueError):
        Account("x").deposit(-5)
