"""The metrics rows of seeded virtual-clock runs, recorded before the composition root (issue 52)
was built: a refactor of the wiring keeps them, key for key and number for number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def assert_golden_rows(run_dir: Path, fixture: str) -> None:
    """run_dir's metrics.jsonl holds the fixture's rows: the same keys in the same order, the same
    values (floats to 1e-9: a virtual clock repeats exactly, other CPUs may round the last bit)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    golden = [json.loads(line) for line in (FIXTURES / fixture).read_text().splitlines()]
    assert [list(r) for r in rows] == [list(g) for g in golden]
    assert rows == [pytest.approx(g, rel=1e-9, abs=1e-12) for g in golden]
