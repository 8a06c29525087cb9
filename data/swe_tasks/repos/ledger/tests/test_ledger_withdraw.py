import pytest

from ledger import Account, InsufficientFunds


def test_withdraw_to_zero():
    a = Account("ann")
    a.deposit(500)
    a.withdraw(500)
    assert a.balance == 0
    assert a.history == [("deposit", 500), ("withdraw", 500)]


def test_overdraft_limit():
    a = Account("bob", overdraft=100)
    a.withdraw(100)
    assert a.balance == -100
    with pytest.raises(InsufficientFunds):
        a.withdraw(1)
    a.deposit(35)
    assert a.balance == -65


def test_transfer():
    a, b = Account("a"), Account("b")
    a.deposit(300)
    a.transfer(b, 300)
    assert (a.balance, b.balance) == (0, 300)
