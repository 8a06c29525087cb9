"""`tandem inspect RUN_DIR` (= python -m tandem.inspect RUN_DIR): write one HTML file that shows the run
and opens from disk with no server and no network: the metric curves (grouped as rollout/, train/,
sync/, engine/, env/), each engine's queue depth, the staleness and token-lag histograms, the
step-time breakdown, and a browser of the kept trajectories (rollouts/step_N.json), token by token.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tandem.inspect.page import write_page
from tandem.inspect.run_data import NotARunDir, read_run

OUTPUT_NAME = "inspect.html"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tandem inspect", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/<run>)")
    parser.add_argument("--out", help=f"the page to write (default: RUN_DIR/{OUTPUT_NAME})")
    parser.add_argument("--samples-per-step", type=int, default=128, metavar="N",
                        help="trajectories shown of each kept step: the first N of its batch (default 128)")
    parser.add_argument("--tokens-per-step", type=int, default=250_000, metavar="T",
                        help="... and no more than T tokens of it, at least one trajectory (default 250000)")
    args = parser.parse_args(argv)
    for flag in ("samples_per_step", "tokens_per_step"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 written, 2 not a run directory."""
    args = parse_args(argv)
    run_dir = Path(args.run_dir).expanduser().resolve()
    try:
        data = read_run(run_dir, args.samples_per_step, args.tokens_per_step)
    except NotARunDir as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = write_page(data.payload(), Path(args.out).expanduser() if args.out else run_dir / OUTPUT_NAME)
    print(f"tandem inspect: {len(data.rows)} steps of metrics, {len(data.samples)} trajectories -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
