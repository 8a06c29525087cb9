"""Tasks whose hidden tests had no canary twin in round 1: class methods, parametrized tests, fixtures,
pytest.raises, approx, unittest. Each is a task of one small repository (`shapes`, one bug) whose only
FAIL_TO_PASS test is written in that form; FORMS says whether the grader must grade it (a check the
bug fails is held on the host, beyond a guess) or refuse it (and why).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

CORE = '''
"""Rectangles from "WxH" specs; empty ones are rejected."""


def _valid(n: int) -> bool:
    return n > 0


class Rect:
    def __init__(self, w: int, h: int):
        if not (_valid(w) and _valid(h)):
            raise ValueError(f"bad size {w}x{h}")
        self.w, self.h = w, h

    def area(self) -> int:
        return self.w * self.h


def sizes(specs):
    out = []
    for spec in specs:
        w, h = (int(x) for x in spec.split("x"))
        try:
            out.append(Rect(w, h))
        except ValueError:
            pass
    return out


def mean_area(specs) -> float:
    rects = sizes(specs)
    return sum(r.area() for r in rects) / len(rects)


def valid(w: int, h: int) -> bool:
    return _valid(w) and _valid(h)
'''
BUG = ("diff --git a/shapes/core.py b/shapes/core.py\n--- a/shapes/core.py\n+++ b/shapes/core.py\n"
       "@@ -2,7 +2,7 @@\n \n \n def _valid(n: int) -> bool:\n-    return n > 0\n+    return n >= 0\n \n \n class Rect:\n")

FORMS = {  # name: (test file text, F2P ids relative to the file, "graded" or the words the refusal gives)
    "class_method": ('''
        from shapes.core import sizes


        class TestSizes:
            def test_areas(self):
                assert [r.area() for r in sizes(["2x3", "0x5", "4x4"])] == [6, 16]
        ''', ["TestSizes::test_areas"], "graded"),
    "parametrized_literal": ('''
        import pytest

        from shapes.core import sizes


        @pytest.mark.parametrize("spec", ["0x5", "5x0"])
        def test_skips_empty(spec):
            assert [r.area() for r in sizes([spec, "3x3"])] == [9]
        ''', ["test_skips_empty[0x5]", "test_skips_empty[5x0]"], "graded"),
    "approx": ('''
        import pytest

        from shapes.core import mean_area


        def test_mean():
            assert mean_area(["2x2", "0x9", "4x4"]) == pytest.approx(10.0)
        ''', ["test_mean"], "graded"),
    "unittest_method": ('''
        import unittest

        from shapes.core import sizes


        class TestUnit(unittest.TestCase):
            def test_areas(self):
                self.assertEqual([r.area() for r in sizes(["1x1", "0x2", "5x2"])], [1, 10])
        ''', ["TestUnit::test_areas"], "graded"),
    "fixture_expectation": ('''
        import pytest

        from shapes.core import sizes


        @pytest.fixture
        def expected():
            return [6, 16]


        def test_with_fixture(expected):
            assert [r.area() for r in sizes(["2x3", "0x5", "4x4"])] == expected
        ''', ["test_with_fixture"], "stays in the sandbox"),
    "parametrized_expectation": ('''
        import pytest

        from shapes.core import sizes


        @pytest.mark.parametrize("spec, want", [("2x3 0x5", [6]), ("0x1 1x1", [1])])
        def test_table(spec, want):
            assert [r.area() for r in sizes(spec.split())] == want
        ''', ["test_table[2x3 0x5-want0]", "test_table[0x1 1x1-want1]"], "stays in the sandbox"),
    "raises_only": ('''
        import pytest

        from shapes.core import Rect


        def test_rejects_zero():
            with pytest.raises(ValueError, match="bad size"):
                Rect(0, 5)
        ''', ["test_rejects_zero"], "a forger can guess"),
    "yes_no_only": ('''
        from shapes.core import valid


        def test_valid():
            assert not valid(0, 3)
            assert valid(2, 3)
        ''', ["test_valid"], "a forger can guess"),
}


def write_repo(root: Path) -> Path:
    """The clean `shapes` repository with one test file per form; returns its path."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # a graded copy keeps the repository's modes, and the tests run as another uid
    (root / "shapes").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "shapes" / "__init__.py").write_text("")
    (root / "shapes" / "core.py").write_text(CORE.lstrip("\n"))
    for name, (text, _, _) in FORMS.items():
        (root / "tests" / f"test_{name}.py").write_text(textwrap.dedent(text).lstrip("\n"))
    return root


def form_row(repo: Path, name: str) -> dict:
    """A task row whose only FAIL_TO_PASS tests are the form's."""
    rel = f"tests/test_{name}.py"
    return {"instance_id": f"local__shapes.0.{name}", "repo": "local/shapes", "patch": BUG, "repo_path": str(repo),
            "FAIL_TO_PASS": [f"{rel}::{t}" for t in FORMS[name][1]], "PASS_TO_PASS": [],
            "problem_statement": "Empty rectangles are accepted."}
