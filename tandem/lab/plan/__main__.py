"""`python -m tandem.lab.plan`: will this config fit its GPUs? (see tandem.lab.plan)"""

from __future__ import annotations

import json
import sys
from typing import Any

from tandem.config import ConfigError, load_config
from tandem.lab.plan import memory as mem
from tandem.lab.plan import report
from tandem.lab.plan.planner import plan_node
from tandem.lab.plan.shape import PlanError, load_shape

USAGE = """usage: python -m tandem.lab.plan [--config FILE] [--section.key VALUE ...] [--gpu-memory-gb 80] [--seq-len N] [--json]

Estimates, per GPU rank, the trainer's weights, grads, optimizer state and activations and each
engine's weights and KV cache for the config (the same files and overrides as train.py), then
says whether they fit and, if not, the smallest change that does (the loss head in chunks, TP,
recompute, the micro-batch, the optimizer offloaded to the CPU).

  --gpu-memory-gb G   memory of one GPU as sold, e.g. 80 for an H100 80GB (read as GiB; default 80)
  --seq-len N         sequence length of a training micro-batch (default: the longest the config allows)
  --json              print the plan as JSON (sizes in bytes)

exit status: 0 it fits, 1 it does not fit, 2 bad input (the message names the cause)"""

PLANNER_OPTIONS = {"--gpu-memory-gb": float, "--seq-len": int}


def split_args(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(the planner's own options, the rest for tandem.config.load_config)."""
    opts: dict[str, Any] = {"--gpu-memory-gb": 80.0, "--seq-len": None, "--json": False}
    rest, i = [], 0
    while i < len(argv):
        name, eq, inline = argv[i].partition("=")
        if name in PLANNER_OPTIONS:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            if value is None:
                raise PlanError(f"option {name} needs a value")
            try:
                opts[name] = PLANNER_OPTIONS[name](value)
            except ValueError:
                raise PlanError(f"option {name}: {value!r} is not a number") from None
            i += 1 if eq else 2
            continue
        if name == "--json":
            opts["--json"] = True
        else:
            rest.append(argv[i])
        i += 1
    if float(opts["--gpu-memory-gb"]) <= 0 or (opts["--seq-len"] is not None and int(opts["--seq-len"]) < 1):
        raise PlanError("--gpu-memory-gb and --seq-len must be positive")
    return opts, rest


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    try:
        opts, rest = split_args(argv)
        cfg = load_config(rest)
        gpu_bytes = int(float(opts["--gpu-memory-gb"]) * mem.GIB)
        plan = plan_node(cfg, load_shape(cfg.model), gpu_bytes, opts["--seq-len"])
    except (ConfigError, PlanError) as err:
        print(f"tandem.lab.plan: {err}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_json(plan), indent=2) if opts["--json"] else report.text(plan))
    return 0 if plan.fits else 1


if __name__ == "__main__":
    sys.exit(main())
