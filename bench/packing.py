"""Packed against padded micro-batches in the Megatron trainer, on a batch whose lengths vary 10x.

    python bench/packing.py                  # 2 runs, each in a fresh process: padded, packed, packed + chunked head
    python bench/packing.py --runs 1 --rounds 2

Agent trajectories vary about 10x in length, so right-padding a micro-batch to its longest sample
computes mostly padding. One batch (32 samples, lengths drawn log-uniformly from 96 to 960 tokens,
multi-turn masks) is trained by the Megatron backend on CPU (the shim, TP 1, fp32) three ways:
- padded: trainer.micro_batch_size = 8, each micro-batch right-padded to its longest sample;
- packed: trainer.max_tokens_per_micro_batch = 8 x 960 (the padded layout's largest possible
  micro-batch, so both are bounded by the same activation memory);
- packed + chunked head: the same, with trainer.logprob_chunk_tokens = 256.
Modes alternate round by round in one process (warm-up first), so each round's ratios compare
steps taken a minute apart at most; tokens/s counts the batch's real tokens (padding excluded), per
second of wall time and per CPU-second of the process (one torch thread: on shared cores the CPU
time moves less with the neighbours' load than the wall time). Results: bench/results/packing.json
and packing.md (per run: median tokens/s per mode, the speed-up over padded per round with its
spread, and the padding the padded layout computes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
MODEL = {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2, "head_dim": 64,
         "intermediate_size": 768, "max_position_embeddings": 2048}
SAMPLES, SHORTEST, LONGEST, PROMPT = 32, 96, 960, 32
MICRO_BATCH = 8
MODES = {"padded": {"micro_batch_size": MICRO_BATCH},
         "packed": {"max_tokens_per_micro_batch": MICRO_BATCH * LONGEST},
         "packed + chunked head": {"max_tokens_per_micro_batch": MICRO_BATCH * LONGEST, "logprob_chunk_tokens": 256}}


def make_batch(seed: int = 0):
    """32 samples, lengths log-uniform in [96, 960], two model turns with an observation between them."""
    from tandem.advantages import assign_advantages
    from tandem.sample import Sample

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(SAMPLES):
        n = int(math.exp(math.log(SHORTEST) + torch.rand((), generator=g).item() * math.log(LONGEST / SHORTEST)))
        r = n - PROMPT
        mask = [0 if r // 3 <= j < 2 * r // 3 else 1 for j in range(r)]  # the middle third: a tool's output
        out.append(Sample(prompt_ids=torch.randint(0, 256, (PROMPT,), generator=g).tolist(),
                          response_ids=torch.randint(0, 256, (r,), generator=g).tolist(), loss_mask=mask,
                          rollout_logprobs=[-5.5 * m for m in mask], reward=float(i % 2), group_id=i // 4))
    assign_advantages(out)
    return out


def padded_tokens(batch) -> int:
    """Tokens the padded layout computes: each micro-batch of MICRO_BATCH samples at its longest."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in batch]
    return sum(len(group) * max(group) for group in (lengths[i:i + MICRO_BATCH] for i in range(0, len(lengths), MICRO_BATCH)))


def child(rounds: int) -> dict:
    """One run: every mode, `rounds` measured rounds after a warm-up round, alternating."""
    import warnings

    warnings.filterwarnings("ignore")
    from tandem.config import build_config
    from tandem.trainer.megatron_backend import MegatronTrainer

    cfg = build_config({"run": {"cache_dir": tempfile.mkdtemp(), "seed": 0}, "model": {"tiny": MODEL},
                        "trainer": {"backend": "megatron", "device": "cpu", "lr": 1e-6, "minibatches": 1,
                                    "megatron": {"tensor_parallel": 1}}})
    trainer = MegatronTrainer(cfg)
    batch = make_batch()
    real = sum(len(s.prompt_ids) + len(s.response_ids) for s in batch)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    tc = trainer.cfg.trainer
    for round_ in range(rounds + 1):
        for mode, settings in MODES.items():
            tc.micro_batch_size, tc.max_tokens_per_micro_batch, tc.logprob_chunk_tokens = MICRO_BATCH, 0, 0
            for key, value in settings.items():
                setattr(tc, key, value)
            t0, c0 = time.perf_counter(), time.process_time()
            trainer.train_step(batch)
            if round_:  # round 0 warms up
                times[mode].append(time.perf_counter() - t0)
                cpu[mode].append(time.process_time() - c0)
    trainer.close()
    return {"real_tokens": real, "padded_tokens": padded_tokens(batch), "threads": torch.get_num_threads(),
            "seconds": times, "cpu_seconds": cpu}


def summarize(run: dict) -> dict:
    real = run["real_tokens"]
    out = {"real_tokens": real, "padded_tokens": run["padded_tokens"],
           "padding_fraction": 1 - real / run["padded_tokens"], "modes": {}}
    for mode in run["seconds"]:
        row = {}
        for clock in ("seconds", "cpu_seconds"):
            seconds, base = run[clock][mode], run[clock]["padded"]
            ratios = [b / s for b, s in zip(base, seconds)]  # speed-up over padded, round by round
            row[clock] = {"tokens_per_s": real / statistics.median(seconds), "speedup_median": statistics.median(ratios),
                          "speedup_min": min(ratios), "speedup_max": max(ratios)}
        out["modes"][mode] = row
    return out


def markdown(runs: list[dict]) -> str:
    lines = ["# Packed against padded micro-batches (Megatron trainer, CPU)", "",
             "Written by `python bench/packing.py`. One batch of 32 samples, 96-960 tokens (log-uniform: 10x "
             "spread), TP 1, fp32, one torch thread, hidden 256 x 4 layers, byte vocabulary. tokens/s counts real "
             "tokens, per wall second and per CPU-second; speed-up is padded step time / this mode's, per round "
             "(median, min-max).", ""]
    for i, run in enumerate(runs, 1):
        lines += [f"## Run {i}: {run['real_tokens']:,} real tokens; the padded layout computes "
                  f"{run['padded_tokens']:,} ({run['padding_fraction']:.0%} padding)", "",
                  "| mode | tokens/CPU-s | speed-up, CPU time | tokens/s (wall) | speed-up, wall time |",
                  "|---|---|---|---|---|"]
        for mode, m in run["modes"].items():
            c, w = m["cpu_seconds"], m["seconds"]
            lines.append(f"| {mode} | {c['tokens_per_s']:,.0f} | {c['speedup_median']:.2f}x ({c['speedup_min']:.2f}-"
                         f"{c['speedup_max']:.2f}) | {w['tokens_per_s']:,.0f} | {w['speedup_median']:.2f}x "
                         f"({w['speedup_min']:.2f}-{w['speedup_max']:.2f}) |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="independent runs, each in a fresh process")
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds per run (after one warm-up round)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.rounds)))
        return
    runs = []
    for _ in range(args.runs):
        env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_TORCH_THREADS=os.environ.get("TANDEM_TORCH_THREADS", "1"))
        out = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(args.rounds)], env=env,
                             capture_output=True, text=True, check=True, timeout=3600).stdout
        runs.append(summarize(json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "packing.json").write_text(json.dumps(runs, indent=2) + "\n")
    (RESULTS / "packing.md").write_text(markdown(runs))
    print(markdown(runs))


if __name__ == "__main__":
    main()
