"""Fresh rows the bug fails beyond the visible rows, per task and seed (issue 46): GradingPlan.fresh_failed and
fresh_kept without the probe rows (guards only, never counted), on the tree PYTHONPATH points at. `fresh_kept`
here counts the fresh rows the first reference run answered (the plan's required rows; the confirming run
drops a row only where the reference's value moved between runs).

    PYTHONPATH=$PWD python bench/fresh_failed.py --match triangle needs_reorder --seeds 1 2 --out OUT.json

Each plan runs the reference three times in the sandbox; no grading. Seeds make a before/after comparison
of two trees draw-for-draw comparable only as far as their generators consume the rng alike.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=Path, default=ROOT / "data" / "swe_realistic" / "tasks.jsonl")
    p.add_argument("--match", nargs="*", default=[], help="only tasks whose id holds one of these")
    p.add_argument("--seeds", nargs="+", type=int, default=[1])
    p.add_argument("--backend", default="unshare")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    from tandem.envs.coding.confined import is_probe
    from tandem.envs.coding.fresh_rows import FRESH_ID, owner
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tandem.envs.coding.grading_plan import build_plan
    from tandem.envs.coding.swe_data import load_bundled
    from tests._swe import make_cfg

    tasks = [t for t in load_bundled(args.tasks) if not args.match or any(m in t.instance_id for m in args.match)]
    reset_runtime()
    runtime = get_runtime(make_cfg(Path(tempfile.mkdtemp(prefix="fresh-failed-")),
                                   sandbox={"backend": args.backend, "pool_size": 2}))
    out: dict = {"tree": str(ROOT), "backend": args.backend, "seeds": args.seeds, "per_task": {}}
    start = time.monotonic()
    try:
        for task in tasks:
            testbed = runtime.grader.graded_template(task) / "testbed"
            rows = []
            for seed in args.seeds:
                plan = build_plan(task, testbed, lambda clean, files, sites, references=False, task=task:
                                  runtime.grader._reference_run(task, clean, files, sites, references), seed=seed)
                kept = sum(owner(f) != f and f.rsplit("[", 1)[1].startswith(FRESH_ID) for f in plan.required)
                failed = [f for f in plan.fresh_failed if not is_probe(f)]
                rows.append({"seed": seed, "fresh_failed": len(failed), "fresh_kept": kept,
                             "refused": bool(plan.refused), "reason": plan.refused[:200]})
                print(f"{task.instance_id} seed {seed}: failed {len(failed)}/{kept}, "
                      f"{'REFUSED' if plan.refused else 'graded'}", flush=True)
            out["per_task"][task.instance_id] = rows
    finally:
        reset_runtime()
    out["wall_s"] = round(time.monotonic() - start, 1)
    out["total_failed"] = sum(r["fresh_failed"] for rows in out["per_task"].values() for r in rows)
    out["total_kept"] = sum(r["fresh_kept"] for rows in out["per_task"].values() for r in rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"total failed {out['total_failed']} of {out['total_kept']} kept; wrote {args.out}")


if __name__ == "__main__":
    main()
