"""The default job colocated on one GPU (run.colocate): its memory timeline and its reward curve.

    python scripts/colocate_gpu_check.py [--steps 30] [--out runs/colocate_check] [train.py overrides ...]

Runs `python train.py --run.colocate true --mode sync` in this process and, at every hand-over the
loop reports (tandem.orchestrator.hooks: "released" = the engines gave their memory back for train step
n; "sync" = version n is loaded into the resumed weights), records what the engine processes hold:
their GPU memory from nvidia-smi on a GPU, their resident memory (VmRSS) on a CPU. The trainer's side
is its own torch.cuda.memory_allocated after the offload and its step's peak (trainer_device_memory_mb,
trainer_train_peak_mb in metrics.jsonl). Writes OUT/colocate_timeline.json and prints a table.

Without a GPU it says so and records resident memory instead (the engines run on the CPU, the trainer
reports 0 device memory): a rehearsal of the script, not a GPU figure.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tandem.orchestrator import launcher
from tandem.orchestrator.colocation import engines_memory_bytes, process_tree
from tandem.orchestrator.hooks import RunHooks
from tandem.placement import visible_gpu_count


def engine_pids() -> list[int]:
    found = []
    for pid in process_tree(os.getpid())[1:]:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"tandem.engine" in cmd or b"sglang.launch_server" in cmd:
            found.append(pid)
    return found


class Timeline(RunHooks):
    def __init__(self, on_gpu: bool):
        self.on_gpu, self.points, self.t0 = on_gpu, [], time.monotonic()

    async def at_async(self, phase: str, n: int) -> None:
        if phase in ("released", "sync"):
            mb = engines_memory_bytes(engine_pids(), self.on_gpu) / 2**20
            self.points.append({"t": round(time.monotonic() - self.t0, 3), "phase": phase, "n": n,
                                "engines_mb": round(mb, 1)})


def main(argv: list[str]) -> int:
    steps, out, rest = "30", Path("runs/colocate_check"), []
    i = 0
    while i < len(argv):
        if argv[i] in ("--steps", "--out") and i + 1 < len(argv):
            steps, out = (argv[i + 1], out) if argv[i] == "--steps" else (steps, Path(argv[i + 1]))
            i += 2
        else:
            rest.append(argv[i])
            i += 1
    gpus = visible_gpu_count()
    if gpus == 0:
        print("colocate_gpu_check: NO GPU: recording the engines' resident memory (VmRSS) instead of GPU memory; "
              "the trainer's device memory reads 0. This rehearses the script; it measures no GPU.", flush=True)
    timeline = Timeline(on_gpu=gpus > 0)
    run = out / "run"
    code = launcher.main(["--run.colocate", "true", "--mode", "sync", "--steps", steps, "--run-dir", str(run),
                          "--overwrite", "--logging.live", "off", *rest], hooks=timeline)
    if code != 0:
        print(f"colocate_gpu_check: the run failed (exit {code}); see {run / 'logs'}", file=sys.stderr)
        return code
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    keys = ("step", "reward_mean", "engine_memory_generate_mb", "engine_memory_train_mb", "engine_memory_resumed_mb",
            "trainer_train_peak_mb", "trainer_device_memory_mb", "trainer_offloaded_mb", "handover_time")
    steps_out = [{k: row.get(k) for k in keys} for row in rows]
    report = {"gpus": gpus, "memory": "nvidia-smi per engine process" if gpus else "VmRSS (no GPU)",
              "hand_overs": timeline.points, "steps": steps_out}
    out.mkdir(parents=True, exist_ok=True)
    (out / "colocate_timeline.json").write_text(json.dumps(report, indent=1))
    print(" ".join(f"{k:>14}" for k in keys))
    for row in steps_out:
        print(" ".join(f"{(round(v, 3) if isinstance(v, float) else v)!s:>14}" for v in row.values()))
    print(f"colocate_gpu_check: {len(timeline.points)} hand-overs; timeline in {out / 'colocate_timeline.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
