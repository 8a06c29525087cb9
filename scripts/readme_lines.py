"""Run every command the README prints, in order, verbatim, and record how each one ended.

    python scripts/readme_lines.py --checkout /work/fresh50 --venv /work/freshvenv --out readme_lines.json
    python scripts/readme_lines.py ... --only 3 4          # a few of them again (numbers from --list)
    python scripts/readme_lines.py --list                  # the commands, numbered, and nothing run

The commands come from README.md itself (of --checkout), so what runs is what a reader copies:
the install line, the Python example (written to a file as printed and run with `python FILE`),
each line of the Quick-start block, and the inline `python ...`/`tandem ...`/`pip install ...` commands
of "From laptop to node". Each runs through `bash -c` in the checkout, with the venv's bin first on PATH
(as after `source VENV/bin/activate`) and no PYTHONPATH, under `timeout -s INT LIMIT` (a Ctrl-C at
the limit: a training line that would run for tens of minutes is stopped as a user would stop it,
and how long it then takes to exit is recorded too).

Not run: the test-suite line (the whole suite; CI's job, see docs/testing.md) and commands with a
placeholder (`tandem inspect RUN_DIR`) or that serve forever (`mkdocs serve`).

Recorded per command: exit status (124 = stopped by the time limit), wall time, the 1-minute load
average before and after, the steps in the run dir's metrics.jsonl with their median `step_time`,
and the last output line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import time
from pathlib import Path

LIMITS_S = {"pip install -r requirements-gpu": 900, "--help": 300, "inspect": 300, "lab.plan": 300, "--rehearse": 900, "Qwen/": 600,
            "--steps 20": 1200, "--resume": 1200, "coding_agent": 900, "tandem.train(": 900}
"""Time limit by a fragment of the command; training lines not named here get --limit-s (their whole run)."""
DEFAULT_LIMIT_S = 3600
SKIPPED = ("pytest", "RUN_DIR", "mkdocs serve")


def readme_commands(readme: str) -> list[tuple[str, str]]:
    """(kind, command) in README order: 'shell' lines and the 'python' example's whole text."""
    commands: list[tuple[str, str]] = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", readme, re.S):
        if lang == "bash":
            commands += [("shell", line) for line in body.splitlines() if line.strip()]
        elif lang == "python":
            commands.append(("python", body))
    node = readme.split("## From laptop to node", 1)[1].split("\n## ", 1)[0]
    commands += [("shell", code) for code in re.findall(r"`((?:python|tandem|pip install) [^`]+)`", node)]
    return commands


def run_dir_of(command: str, checkout: Path) -> Path | None:
    match = re.search(r"--run-dir (\S+)|--resume (\S+)|run_dir=\"([^\"]+)\"", command)
    if match:
        return checkout / next(g for g in match.groups() if g)
    config = re.search(r"--config (\S+)", command)
    if config and "--rehearse" not in command:
        found = re.search(r'^run_dir = "([^"]+)"', (checkout / config.group(1)).read_text(), re.M)
        return checkout / found.group(1) if found else None
    return checkout / "runs/default" if re.search(r"python train.py( &&|$| --engines| --run\.| --model)", command) else None


def steps_in(run_dir: Path | None) -> tuple[int | None, float | None]:
    """How many metrics rows the run dir holds, and the median of their step_time (s)."""
    metrics = run_dir / "metrics.jsonl" if run_dir else None
    if not metrics or not metrics.exists():
        return None, None
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    times = sorted(r["step_time"] for r in rows if isinstance(r.get("step_time"), (int, float)))
    return len(rows), (round(times[len(times) // 2], 3) if times else None)


def load_1min() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_one(kind: str, command: str, checkout: Path, venv: Path, logs: Path, index: int, default_limit: int) -> dict:
    shown = command if kind == "shell" else "python readme_example.py  # the README's Python block, as printed"
    limit = next((s for frag, s in LIMITS_S.items() if frag in command), default_limit)
    run_dir = run_dir_of(command, checkout)  # the Python block's too: its run_dir="..."
    if kind == "python":
        (checkout / "readme_example.py").write_text(command)
        command = "python readme_example.py"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", VIRTUAL_ENV=str(venv))
    log = logs / f"{index:02d}.log"
    load_before, started = load_1min(), time.monotonic()
    with open(log, "wb") as out:
        out.write(f"$ {shown}\n".encode())
        out.flush()
        code = subprocess.call(["timeout", "-s", "INT", "-k", "120", str(limit), "bash", "-c", command],
                               cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    steps, step_time = steps_in(run_dir)
    return {"n": index, "command": shown, "exit": code, "wall_s": round(wall, 1), "limit_s": limit,
            "load_before": load_before, "load_after": load_1min(),
            "steps": steps, "step_time_median_s": step_time,
            "last_line": lines[-1][:200] if lines else "", "log": str(log)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--venv", type=Path)
    parser.add_argument("--out", type=Path, default=Path("readme_lines.json"))
    parser.add_argument("--only", type=int, nargs="*")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--limit-s", type=int, default=DEFAULT_LIMIT_S,
                        help="time limit of a training line (its whole run, by default)")
    opts = parser.parse_args()
    checkout = opts.checkout.resolve()
    commands = readme_commands((checkout / "README.md").read_text())
    logs = opts.out.resolve().parent / "readme_lines_logs"
    logs.mkdir(parents=True, exist_ok=True)
    results = json.loads(opts.out.read_text()) if opts.only and opts.out.exists() else []
    for index, (kind, command) in enumerate(commands, 1):
        skip = kind == "shell" and any(s in command for s in SKIPPED)
        print(f"{index:2d} {'SKIP ' if skip else ''}{kind}: {command.splitlines()[0] if kind == 'shell' else '(python block)'}",
              flush=True)
        if opts.list or skip or (opts.only and index not in opts.only):
            continue
        result = run_one(kind, command, checkout, opts.venv.resolve(), logs, index, opts.limit_s)
        results = [r for r in results if r["n"] != index] + [result]
        print(f"   exit {result['exit']}, {result['wall_s']} s, load {result['load_before']}->{result['load_after']}, "
              f"steps {result['steps']} (median {result['step_time_median_s']} s): {result['last_line']}", flush=True)
        opts.out.write_text(json.dumps(sorted(results, key=lambda r: r["n"]), indent=1) + "\n")


if __name__ == "__main__":
    main()
