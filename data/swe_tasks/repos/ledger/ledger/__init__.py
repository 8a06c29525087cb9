from ledger.account import Account, InsufficientFunds

__all__ = ["Account", "InsufficientFunds"]
