import pytest

from stockkit import OutOfStock, Stock


@pytest.fixture
def stock():
    s = Stock()
    s.add("apple", 3)
    s.add("pear", 2)
    return s


def test_count(stock):
    assert stock.count("apple") == 3
    assert stock.count("plum") == 0


@pytest.mark.parametrize("qty, left", [(1, 2), (2, 1), (3, 0)])
def test_remove(stock, qty, left):
    stock.remove("apple", qty)
    assert stock.count("apple") == left


def test_remove_too_many(stock):
    with pytest.raises(OutOfStock):
        stock.remove("pear", 3)


def test_total(stock):
    stock.add("plum", 4)
    assert stock.total() == 9
