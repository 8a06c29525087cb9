import pytest

from depgraph import CycleError, toposort


def test_cycle():
    with pytest.raises(CycleError):
        toposort({"a": ["b"], "b": ["a"]})


def test_empty():
    assert toposort({}) == []


def test_cycle_next_to_independent_nodes():
    with pytest.raises(CycleError) as err:
        toposort({"a": ["b"], "b": ["a"], "c": []})
    assert str(err.value) == "dependency cycle among: a, b"
