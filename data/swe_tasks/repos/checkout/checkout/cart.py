"""A shopping cart with quantity discounts and a percentage coupon, in cents."""


class Cart:
    def __init__(self, prices: dict):
        self.prices = prices
        self.items = {}
        self.coupon_pct = 0

    def add(self, sku: str, qty: int = 1) -> None:
        if sku not in self.prices:
            raise KeyError(sku)
        if qty <= 0:
            raise ValueError("quantity must be positive")
        self.items[sku] = self.items.get(sku, 0) + qty

    def remove(self, sku: str, qty: int = 1) -> None:
        left = self.items.get(sku, 0) - qty
        if left > 0:
            self.items[sku] = left
        else:
            self.items.pop(sku, None)

    def apply_coupon(self, pct: int) -> None:
        if not 0 < pct <= 50:
            raise ValueError("coupon must be 1..50 percent")
        self.coupon_pct = pct

    def subtotal(self) -> int:
        total = 0
        for sku, qty in self.items.items():
            line = self.prices[sku] * qty
            if qty >= 10:
                line = line * 90 // 100  # 10% off for 10 or more of one item
            total += line
        return total

    def total(self) -> int:
        return self.subtotal() * (100 - self.coupon_pct) // 100
