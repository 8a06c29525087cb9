"""A bank account with an overdraft limit, amounts in cents."""


class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner: str, overdraft: int = 0):
        self.owner = owner
        self.overdraft = overdraft
        self.balance = 0
        self.history = []

    def deposit(self, cents: int) -> None:
        if cents <= 0:
            raise ValueError("deposit must be positive")
        self.balance += cents
        self.history.append(("deposit", cents))

    def withdraw(self, cents: int) -> None:
        if cents <= 0:
            raise ValueError("withdrawal must be positive")
        if self.balance - cents < -self.overdraft:
            raise InsufficientFunds(f"{self.owner} cannot withdraw {cents}")
        self.balance -= cents
        self.history.append(("withdraw", cents))

    def transfer(self, other: "Account", cents: int) -> None:
        self.withdraw(cents)
        other.deposit(cents)
