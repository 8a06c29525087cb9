"""Build a realistic task set in SWE-smith's shape, to measure how many tasks the grader refuses.

    python scripts/make_realistic_tasks.py [--out data/swe_realistic]

SWE-smith makes its tasks by procedural modifications of one function of a real repository
(flip or swap an operator, change a constant by one, drop a condition, an assignment or part
of a boolean chain, invert an if) and keeps the repository's tests as the hidden tests. Here:
six small repositories (scripts/realistic_specs_a.py, _b.py), each with its own
pytest.mark.parametrize-heavy suite of functions returning bools, small ints, enums, strings
and lists, and 33 bugs drawn that way, several per repository. scripts/make_swe_tasks.py's
machinery writes them (each task validated: the clean repository passes its tests under plain
pytest, the bug fails at least one; FAIL_TO_PASS / PASS_TO_PASS derived by running them), so
the rows are SWE-smith's fields exactly as the bundled set's. Deterministic.
bench/refusal_rate.py grades them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import make_swe_tasks  # a sibling script: run as a script, its folder is on the import path
import realistic_specs_a
import realistic_specs_b  # noqa: F401  (registers part B's repositories and bugs)

ROOT = Path(__file__).resolve().parent.parent
REALISTIC_TASKS = ROOT / "data" / "swe_realistic"


def specs() -> list[dict]:
    """One make_swe_tasks spec per bug (its repository's files shared with the repository's other bugs)."""
    return [{"name": b["name"], "files": realistic_specs_a.REPOS[b["name"]],
             "bug": {k: b[k] for k in ("file", "old", "new", "id")}, "problem_statement": b["problem_statement"]}
            for b in realistic_specs_a.BUGS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REALISTIC_TASKS))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    rows = make_swe_tasks.build(out, specs())
    print(f"wrote {len(rows)} tasks from {len({r['repo'] for r in rows})} repositories to {out / 'tasks.jsonl'} "
          f"({sum(len(r['FAIL_TO_PASS']) for r in rows)} FAIL_TO_PASS, "
          f"{sum(len(r['PASS_TO_PASS']) for r in rows)} PASS_TO_PASS tests)")


if __name__ == "__main__":
    main()
