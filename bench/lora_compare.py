"""LoRA against full fine-tuning, in the same run of this script: learning and weight sync.

    python bench/lora_compare.py                   # both parts, 2 rounds each
    python bench/lora_compare.py --part learn --rounds 3
    python bench/lora_compare.py --part sync

learn: the default job (`python train.py`) and the LoRA job (`python train.py --config
configs/lora.toml`), alternated round by round so both see the same machine load. Reported per
run: the first step whose 5-step mean reward reaches the success level (0.8), the seconds the
run took until then and in all (the launcher's wall clock, start-up included), and LoRA / full
per round.

sync: what one weight version costs, adapter against whole model (rank 16 on the seven
projections, as on a pretrained model, and configs/lora.toml), on the tiny default model and
on a ~103M-parameter bf16 model (hidden 768, 12 layers, 12 heads / 4 KV heads of 64, MLP 3072):
4 sync-mode steps each, 2 embedded engines, the trainer's publish (bytes, seconds) and the
engines' reload (seconds, /update_weights_from_disk or /load_lora_adapter), per version.
Results: bench/results/lora_compare.md and .json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUCCESS, WINDOW = 0.8, 5
BIG_MODEL = ["--model.tiny.hidden_size", "768", "--model.tiny.num_layers", "12", "--model.tiny.num_heads", "12",
             "--model.tiny.num_kv_heads", "4", "--model.tiny.head_dim", "64", "--model.tiny.intermediate_size", "3072",
             "--model.dtype", "bfloat16"]
VARIANTS = {"full": [], "lora": ["--config", "configs/lora.toml"]}
SYNC_VARIANTS = {"full": [], "lora r16": ["--trainer.lora.rank", "16"], "lora.toml": ["--config", "configs/lora.toml"]}
"""What a pretrained model would use (rank 16 on the seven projections), and configs/lora.toml
(rank 64 and lm_head, which the random tiny model needs: larger than that model itself)."""


def train_command(run_dir: Path, args: list[str]) -> list[str]:
    """`python train.py ARGS` into a fresh run_dir, with the shared model cache and no live view."""
    shutil.rmtree(run_dir, ignore_errors=True)
    return [sys.executable, "train.py", *args, "--run.run_dir", str(run_dir), "--run.cache_dir",
            str(REPO / ".cache/tandem"), "--logging.live", "off", "--logging.tensorboard", "false"]


def train(run_dir: Path, args: list[str]) -> tuple[list[dict], float]:
    cmd = train_command(run_dir, args)
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()], wall


def success_step(rows: list[dict]) -> int | None:
    rewards = [r["reward_mean"] for r in rows]
    for i in range(WINDOW - 1, len(rewards)):
        if statistics.fmean(rewards[i - WINDOW + 1:i + 1]) >= SUCCESS:
            return i + 1  # steps done
    return None


def learn(rounds: int, scratch: Path) -> list[dict]:
    out = []
    for round_ in range(1, rounds + 1):
        for variant, args in VARIANTS.items():
            rows, wall = train(scratch / f"learn_{variant}", args)
            step = success_step(rows)
            # step_time is measured from one trained step to the next; the launcher's start-up is the rest.
            startup = wall - sum(r["step_time"] for r in rows)
            to_success = None if step is None else startup + sum(r["step_time"] for r in rows[:step])
            out.append({"round": round_, "variant": variant, "success_step": step, "seconds_to_success": to_success,
                        "wall_s": wall, "final_reward": statistics.fmean(r["reward_mean"] for r in rows[-WINDOW:])})
            print(json.dumps(out[-1]), flush=True)
    return out


def sync(rounds: int, scratch: Path) -> list[dict]:
    out = []
    for round_ in range(1, rounds + 1):
        for size, model in (("tiny", []), ("103M", BIG_MODEL)):
            for variant, args in SYNC_VARIANTS.items():
                rows, _ = train(scratch / f"sync_{size}_{variant.replace(' ', '_')}",
                                [*args, *model, "--run.mode", "sync", "--run.steps", "4", "--checkpoint.interval", "0",
                                 "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "8",
                                 "--trainer.micro_batch_size", "8"])
                for r in rows:
                    out.append({"round": round_, "model": size, "variant": variant, "version": r["weight_version"],
                                "publish_bytes": r["publish_bytes"], "publish_s": r["sync_time"] - r["reload_time"],
                                "reload_s": r["reload_time"], "sync_s": r["sync_time"]})
                last = out[-1]
                print(f"round {round_} {size} {variant}: {last['publish_bytes'] / 1e6:.3f} MB per version, "
                      f"publish {last['publish_s']:.3f}s, reload {last['reload_s']:.3f}s", flush=True)
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3g} ({min(values):.3g}-{max(values):.3g})" if values else "n/a"


def report(learned: list[dict], synced: list[dict]) -> str:
    lines = ["# LoRA against full fine-tuning (bench/lora_compare.py)", ""]
    if learned:
        lines += ["## The default job: steps and seconds to the success level (5-step mean reward >= 0.8)", "",
                  "| round | variant | success step | s to success | wall s, whole run (full 200 steps, LoRA 300) | final reward |",
                  "|---|---|---|---|---|---|"]
        for r in learned:
            seconds = "n/a" if r["seconds_to_success"] is None else f"{r['seconds_to_success']:.1f}"
            lines.append(f"| {r['round']} | {r['variant']} | {r['success_step']} | {seconds} | "
                         f"{r['wall_s']:.1f} | {r['final_reward']:.3f} |")
        ratios = []
        for round_ in sorted({r["round"] for r in learned}):
            pair = {r["variant"]: r for r in learned if r["round"] == round_}
            if pair["full"]["seconds_to_success"] and pair["lora"]["seconds_to_success"]:
                ratios.append(pair["lora"]["seconds_to_success"] / pair["full"]["seconds_to_success"])
        lines += ["", f"LoRA / full, seconds to success, per round: {', '.join(f'{x:.2f}' for x in ratios) or 'n/a'}", ""]
    if synced:
        lines += ["## One weight version: adapter against whole model (versions 1-4 of each run, all rounds)", "",
                  "| model | variant | MB per version | publish s | reload s | sync s |", "|---|---|---|---|---|---|"]
        for size in dict.fromkeys(r["model"] for r in synced):
            for variant in SYNC_VARIANTS:
                rows = [r for r in synced if r["model"] == size and r["variant"] == variant]
                lines.append(f"| {size} | {variant} | {spread([r['publish_bytes'] / 1e6 for r in rows])} | "
                             f"{spread([r['publish_s'] for r in rows])} | {spread([r['reload_s'] for r in rows])} | "
                             f"{spread([r['sync_s'] for r in rows])} |")
            for round_ in sorted({r["round"] for r in synced}):
                mean = {v: statistics.fmean(r["sync_s"] for r in synced if (r["model"], r["variant"], r["round"])
                                            == (size, v, round_)) for v in SYNC_VARIANTS}
                nbytes = {v: statistics.fmean(r["publish_bytes"] for r in synced if (r["model"], r["variant"],
                                              r["round"]) == (size, v, round_)) for v in SYNC_VARIANTS}
                for v in list(SYNC_VARIANTS)[1:]:
                    lines.append(f"| {size} | round {round_}: {v} / full | {nbytes[v] / nbytes['full']:.4f} | | | "
                                 f"{mean[v] / mean['full']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["learn", "sync", "both"], default="both")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scratch", default=str(REPO / "runs" / "bench_lora"))
    args = ap.parse_args()
    scratch = Path(args.scratch)
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    earlier = json.loads((results / "lora_compare.json").read_text()) if (results / "lora_compare.json").exists() \
        else {"learn": [], "sync": []}
    # A part not run now keeps its last results, so the report always shows both.
    learned = learn(args.rounds, scratch) if args.part in ("learn", "both") else earlier["learn"]
    synced = sync(args.rounds, scratch) if args.part in ("sync", "both") else earlier["sync"]
    text = report(learned, synced)
    (results / "lora_compare.md").write_text(text)
    (results / "lora_compare.json").write_text(json.dumps({"learn": learned, "sync": synced}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
