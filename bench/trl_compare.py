"""One step of tandem (sync and async) against TRL's GRPOTrainer, measured in the same run.

    python bench/trl_compare.py                       # P=8, G=4, T=32, engines 1 and 2
    python bench/trl_compare.py --group 8 --tokens 8  # another shape
    python bench/trl_compare.py --quick               # a smoke run (fewer steps, engines=1)

Both sides run the same tiny Qwen3 directory (tandem's `model.path = "tiny"`, built and
cached by tandem.model_source), the same echo prompts, group size G, max new tokens T,
temperature 1.0, learning rate and batch (P*G samples per optimizer step), the same
reward (tandem.envs.echo.echo_reward, called on the decoded completion), with no KL reference.

What is timed, and what is not:
- TRL: GRPOTrainer in a child process (bench/trl_worker.py; CPU, plain HF `generate`, no vLLM).
  A TrainerCallback stamps on_step_begin/on_step_end. The headline s/step is the interval
  between consecutive on_step_end stamps (the same definition as tandem's `step_time`,
  which is end-of-step to end-of-step); begin->end is reported too. Warm-up steps are
  dropped; the median of the rest is reported.
- tandem: the real launcher (`python train.py ...`) as a subprocess; s/step is the median
  `step_time` in <run_dir>/metrics.jsonl over the steps after the warm-up ones. One extra
  cool-down step is run and not measured: the last step has no next batch to roll out, so
  keeping it would flatter async mode.
- CPU seconds per step are reported next to wall time, because this benchmark usually runs
  on a shared CPU box where other users' load moves wall time a lot: TRL's is its process
  CPU time (all threads) between on_step_end stamps; tandem's is the CPU time of train.py
  and every child (engines, router, trainer), read from /proc when each metrics row lands.
- TRL runs once per --trl-threads value before tandem and again after it (bracketing it in
  time); the ratio columns are against TRL's fastest run, the conservative choice.
- Startup (imports, model load, engine/router/trainer start-up, TRL's model/optimizer
  set-up) is excluded on both sides.
- The systems run one after another, never concurrently (this machine has 2 shared cores),
  in one invocation of this script.

Results: a table on stdout and bench/results/trl_compare.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import loadavg, median_or_none, tail_text, tree_cpu_seconds

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / "results" / "trl_compare.json"
TRL_WORKER = Path(__file__).resolve().with_name("trl_worker.py")


# ----------------------------------------------------------------------------- TRL side (child process)
def run_trl(spec: dict, timeout_s: float) -> dict:
    """Run bench/trl_worker.py on `spec`; its timings, or the error and the tail of its stderr."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        spec_path = f.name
    out_path = spec_path + ".out"
    cmd = [sys.executable, str(TRL_WORKER), spec_path, out_path]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        return {"error": f"TRL timed out after {timeout_s:.0f}s", "stderr_tail": tail_text(err.stderr)}
    finally:
        os.unlink(spec_path)
    if proc.returncode != 0 or not Path(out_path).exists():
        return {"error": f"TRL worker exited {proc.returncode}", "stderr_tail": tail_text(proc.stderr)}
    res = json.loads(Path(out_path).read_text())
    os.unlink(out_path)
    res["process_wall_s"] = time.perf_counter() - t0
    return res


# ----------------------------------------------------------------------------- tandem side
CPU_POLL_S = 0.05


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def tandem_command(mode: str, engines: int, a: argparse.Namespace, run_dir: Path, steps: int) -> list[str]:
    return [sys.executable, str(REPO / "train.py"), "--mode", mode, "--engines", str(engines), "--steps", str(steps),
            "--run-dir", str(run_dir),
            "--rollout.prompts_per_step", str(a.prompts), "--rollout.samples_per_prompt", str(a.group),
            "--rollout.sampling.max_new_tokens", str(a.tokens), "--rollout.sampling.temperature", "1.0",
            "--logging.tensorboard", "false", "--logging.live", "off", *a.tandem_cfg_argv]


def watch_cpu(proc: subprocess.Popen, metrics_path: Path, t0: float,
              timeout_s: float) -> tuple[int | str, list[dict[str, float] | None]]:
    """Wait for the launcher (terminating it at the timeout): its exit code or "timeout", and the
    CPU seconds of train.py and all its children, stamped whenever a new metrics row lands, so
    CPU per step can be read off the steady-state steps like step_time."""
    cpu_at_row: list[dict[str, float] | None] = []
    rc: int | str | None = None
    while rc is None:
        rc = proc.poll()
        if rc is None and time.perf_counter() - t0 > timeout_s:
            proc.terminate()  # train.py turns SIGTERM into an orderly shutdown of its children
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            rc = "timeout"
        n_rows = _count_lines(metrics_path)
        while len(cpu_at_row) < n_rows:
            cpu_at_row.append(tree_cpu_seconds(proc.pid))
        if rc is None:
            time.sleep(CPU_POLL_S)
    return rc, cpu_at_row


def steady_stats(rows: list[dict], cpu_at_row: list[dict[str, float] | None], a: argparse.Namespace) -> dict:
    """Medians over the measured steps (after the warm-up, before the cool-down step)."""
    steady = [r for r in rows if a.warmup < r["step"] <= a.warmup + a.steps]  # steps are numbered from 1

    def med(key: str) -> float | None:
        return median_or_none([float(r[key]) for r in steady if r.get(key) is not None])

    # CPU per step: rows are stamped on arrival (<= CPU_POLL_S late); None where /proc was unreadable.
    pairs = [(a_, b) for a_, b in zip(cpu_at_row[:-1], cpu_at_row[1:]) if a_ is not None and b is not None]
    cpu_steps = [sum(b.values()) - sum(a_.values()) for a_, b in pairs]
    roles = sorted({k for _, b in pairs for k in b})
    # cpu_steps[i] belongs to step i+1; a pair is lost if /proc was unreadable, which only ever
    # makes the window shorter (the steady window is steps warmup .. warmup+steps-1).
    lo, hi = max(a.warmup - 1, 0), a.warmup - 1 + a.steps
    cpu_by_role = {k: median_or_none([b.get(k, 0.0) - a_.get(k, 0.0) for a_, b in pairs][lo:hi]) for k in roles}
    return {
        "steps_run": len(rows),
        "step_time_all": [r["step_time"] for r in rows],
        "step_time": med("step_time"),
        "cpu_s_per_step_all": cpu_steps,
        "cpu_s_per_step": median_or_none(cpu_steps[lo:hi]),
        "cpu_s_per_step_by_role": cpu_by_role,
        "samples_per_step": med("samples"),
        "rollout_time": med("rollout_time"),
        "train_time": med("train_time"),
        "sync_time": med("sync_time"),
        "reload_time": med("reload_time"),
        "trainer_wait_time": med("trainer_wait_time"),
        "trainer_idle_ratio": med("trainer_idle_ratio"),
        "completion_tokens_mean": med("response_len_mean"),
        "reward_mean": med("reward_mean"),
        "staleness_mean": med("staleness_mean"),
        # run.cpu_split = "phase": torch threads of each engine and of the trainer (absent: even split)
        "engine_cpu_threads": med("engine_cpu_threads"),
        "trainer_cpu_threads": med("trainer_cpu_threads"),
    }


def run_tandem(mode: str, engines: int, a: argparse.Namespace, run_dir: Path, timeout_s: float) -> dict:
    """Run the real launcher and read its metrics.jsonl; on failure return the log tails."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    # One cool-down step past the measured ones: tandem's last step has no next batch to roll
    # out (async would look cheaper than it is), so it is run but not measured.
    steps = a.warmup + a.steps + 1
    cmd = tandem_command(mode, engines, a, run_dir, steps)
    metrics_path = run_dir / "metrics.jsonl"
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out_f, stderr=err_f, text=True)
        rc, cpu_at_row = watch_cpu(proc, metrics_path, t0, timeout_s)
        wall = time.perf_counter() - t0
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    res: dict = {"command": " ".join(cmd[1:]), "process_wall_s": wall, "run_dir": str(run_dir)}
    rows = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()] if metrics_path.exists() else []
    if rc != 0 or len(rows) < steps:
        res["error"] = f"train.py exit {rc}; {len(rows)}/{steps} metrics rows"
        res["stdout_tail"] = tail_text(stdout, 15)
        res["stderr_tail"] = tail_text(stderr)
        res["log_tails"] = {p.name: tail_text(p.read_text(errors="replace"), 20)
                            for p in sorted((run_dir / "logs").glob("*.log"))} if (run_dir / "logs").exists() else {}
        return res
    res.update(steady_stats(rows, cpu_at_row, a))
    return res


# ----------------------------------------------------------------------------- report
def samples_per_s(res: dict) -> float | None:
    if res.get("error") or not res.get("step_time"):
        return None
    return res["samples_per_step"] / res["step_time"]


def samples_per_cpu_s(res: dict) -> float | None:
    if res.get("error") or not res.get("cpu_s_per_step"):
        return None
    return res["samples_per_step"] / res["cpu_s_per_step"]


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _ratio(x: float | None, base: float | None) -> str:
    return _fmt(x / base if x and base else None, ".2f") + "x"


def print_table(results: dict) -> None:
    base, base_cpu = results["trl"].get("samples_per_s"), results["trl"].get("samples_per_cpu_s")
    head = (f"{'system':<7} {'mode':<5} {'eng':>3} {'thr':>4} {'when':<6} {'s/step':>7} {'samples/s':>9} "
            f"{'vs TRL':>7} {'cpu-s/step':>10} {'samples/cpu-s':>13} {'vs TRL':>7} {'tok/smp':>7}  breakdown (median s)")
    print(head)
    print("-" * len(head))
    for t in results["trl_runs"]:
        thr = str(t.get("torch_threads") or t.get("threads_asked") or "-")
        if t.get("error"):
            print(f"{'TRL':<7} {'-':<5} {'-':>3} {thr:>4} {t['when']:<6}  FAILED: {t['error']}")
            continue
        gen, score = t.get("gen_time") or 0.0, t.get("score_time") or 0.0
        mark = "  <- baseline" if t is results["trl"] else ""
        print(f"{'TRL':<7} {'-':<5} {'-':>3} {thr:>4} {t['when']:<6} {t['step_time']:>7.3f} {t['samples_per_s']:>9.1f} "
              f"{_ratio(t['samples_per_s'], base):>7} {_fmt(t['cpu_s_per_step'], '.3f'):>10} "
              f"{_fmt(t['samples_per_cpu_s'], '.1f'):>13} {_ratio(t['samples_per_cpu_s'], base_cpu):>7} "
              f"{_fmt(t['completion_tokens_mean'], '.1f'):>7}  generate {gen:.3f}, score {score - gen:.3f}, "
              f"train+optim {t['step_time_begin_end'] - score:.3f}{mark}")
    for r in results["tandem"]:
        if r.get("error"):
            print(f"{'tandem':<7} {r['mode']:<5} {r['engines']:>3} {'-':>4} {'':<6}  FAILED: {r['error']}")
            continue
        thr = f"{r['engine_cpu_threads']:.0f}/{r['trainer_cpu_threads']:.0f}" if r.get("trainer_cpu_threads") else "even"
        print(f"{'tandem':<7} {r['mode']:<5} {r['engines']:>3} {thr:>4} {'':<6} {r['step_time']:>7.3f} "
              f"{r['samples_per_s']:>9.1f} {_ratio(r['samples_per_s'], base):>7} "
              f"{_fmt(r['cpu_s_per_step'], '.3f'):>10} {_fmt(r['samples_per_cpu_s'], '.1f'):>13} "
              f"{_ratio(r['samples_per_cpu_s'], base_cpu):>7} {_fmt(r['completion_tokens_mean'], '.1f'):>7}  "
              f"rollout {_fmt(r['rollout_time'], '.3f')}, train {_fmt(r['train_time'], '.3f')}, "
              f"sync {_fmt(r['sync_time'], '.3f')} (reload {_fmt(r['reload_time'], '.3f')}), "
              f"trainer idle {_fmt(r['trainer_idle_ratio'], '.0%')}; cpu-s/step: "
              + ", ".join(f"{k} {v:.3f}" for k, v in r.get("cpu_s_per_step_by_role", {}).items() if v is not None))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="measured steps per system (default 6; --quick 3)")
    ap.add_argument("--warmup", type=int, default=None, help="steps dropped before measuring (default 2; --quick 1)")
    ap.add_argument("--prompts", type=int, default=8, help="P: prompts per step")
    ap.add_argument("--group", type=int, default=4, help="G: samples per prompt")
    ap.add_argument("--tokens", type=int, default=32, help="T: max new tokens")
    ap.add_argument("--engines", default=None, help="comma list of tandem engine counts (default 1,2; --quick 1)")
    ap.add_argument("--modes", default="sync,async", help="comma list of tandem modes")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 warm-up + 3 measured steps, engines=1, TRL at 1 thread, no TRL re-run")
    ap.add_argument("--trl-threads", default=None,
                    help="comma list of torch thread counts to run TRL with (0 = torch's default, every core; "
                         "default 1,0; --quick 1)")
    ap.add_argument("--no-trl-after", action="store_true",
                    help="skip the second round of TRL runs after tandem (they bracket tandem in time, "
                         "so a change in machine load shows up as a TRL before/after difference)")
    ap.add_argument("--skip-trl", action="store_true", help="tandem only (the ratio columns are then empty)")
    ap.add_argument("--skip-tandem", action="store_true", help="TRL only")
    ap.add_argument("--tandem-arg", action="append", default=[],
                    help="extra config key for both sides, --tandem-arg=--section.key=VALUE (repeatable); "
                         "train.py gets it, and TRL reads lr/clip/seed/model from the same resolved config")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per system run")
    ap.add_argument("--work-dir", default=None, help="where tandem run dirs go (default: a temp dir, removed)")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="results JSON path")
    return ap


def apply_quick_defaults(a: argparse.Namespace) -> None:
    """Fill the options whose default depends on --quick."""
    a.steps = a.steps if a.steps is not None else (3 if a.quick else 6)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.quick else 2)
    a.engines = a.engines or ("1" if a.quick else "1,2")
    a.trl_threads = a.trl_threads or ("1" if a.quick else "1,0")


def new_results(a: argparse.Namespace) -> dict:
    return {
        "shape": {"prompts": a.prompts, "group": a.group, "tokens": a.tokens,
                  "samples_per_step": a.prompts * a.group, "warmup_steps": a.warmup, "measured_steps": a.steps},
        "notes": "s/step = median over measured steps of the end-of-step to end-of-step interval; cpu-s/step = "
                 "median CPU seconds (user+sys, every thread; for tandem train.py and all its children) per step; "
                 "start-up (imports, model load, engine/router/trainer launch, TRL set-up) excluded on both sides; "
                 "systems run one after another on the same machine; the TRL baseline is its fastest run.",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg_start": loadavg()},
        "trl": {},
        "trl_runs": [],
        "tandem": [],
    }


def trl_round(a: argparse.Namespace, data_path: Path, results: dict, when: str) -> None:
    """One TRL run per --trl-threads value, appended to results["trl_runs"]."""
    import trl
    for threads in [int(x) for x in a.trl_threads.split(",") if x]:
        print(f"[trl] GRPOTrainer {trl.__version__} ({when}): P={a.prompts} G={a.group} T={a.tokens}, "
              f"torch threads {threads or 'default'}, {a.warmup} warm-up + {a.steps} measured steps ...",
              flush=True)
        t = {"version": trl.__version__, "when": when, "threads_asked": threads, **run_trl(
            {"config_argv": a.tandem_cfg_argv, "data_path": str(data_path), "prompts": a.prompts,
             "group": a.group, "tokens": a.tokens, "warmup": a.warmup, "steps": a.steps, "threads": threads},
            a.timeout)}
        if t.get("error"):
            print(f"[trl] FAILED: {t['error']}\n{t.get('stderr_tail', '')}", flush=True)
        results["trl_runs"].append(t)


def tandem_round(a: argparse.Namespace, work: Path, results: dict) -> None:
    """tandem in every mode at every engine count, appended to results["tandem"]."""
    for n in [int(x) for x in a.engines.split(",") if x]:
        for mode in [m for m in a.modes.split(",") if m]:
            print(f"[tandem] {mode}, {n} engine(s) ...", flush=True)
            r = run_tandem(mode, n, a, work / f"{mode}_e{n}", a.timeout)
            r.update(mode=mode, engines=n)
            if r.get("error"):
                print(f"[tandem] FAILED: {r['error']}\n--- stderr ---\n{r['stderr_tail']}", flush=True)
                for name, tail_text in r["log_tails"].items():
                    print(f"--- {name} ---\n{tail_text}", flush=True)
            results["tandem"].append(r)


def add_ratios(results: dict) -> None:
    """Throughput per run, TRL's baseline, and each tandem run's ratio to it."""
    for t in results["trl_runs"] + results["tandem"]:
        t["samples_per_s"] = samples_per_s(t)
        t["samples_per_cpu_s"] = samples_per_cpu_s(t)
    ok = [t for t in results["trl_runs"] if t["samples_per_s"]]
    # The ratios are against TRL's fastest run: on a shared CPU the thread count alone can change
    # TRL's step time by an order of magnitude (OpenMP spin-waits when cores are oversubscribed),
    # and other users' load drifts between runs. Taking TRL's best is the conservative choice for tandem.
    results["trl"] = dict(max(ok, key=lambda t: t["samples_per_s"])) if ok else {"error": "no successful TRL run"}
    best_cpu = [t["samples_per_cpu_s"] for t in ok if t["samples_per_cpu_s"]]
    results["trl"]["samples_per_cpu_s"] = max(best_cpu) if best_cpu else None
    base, base_cpu = results["trl"].get("samples_per_s"), results["trl"]["samples_per_cpu_s"]
    for r in results["tandem"]:
        r["ratio_vs_trl"] = r["samples_per_s"] / base if r["samples_per_s"] and base else None
        r["cpu_ratio_vs_trl"] = r["samples_per_cpu_s"] / base_cpu if r["samples_per_cpu_s"] and base_cpu else None


def print_report(a: argparse.Namespace, results: dict) -> None:
    print()
    print(f"P={a.prompts} prompts x G={a.group} samples x T={a.tokens} tokens ({a.prompts * a.group} samples/step); "
          f"{a.warmup} warm-up + {a.steps} measured steps per run; medians; s/step is end-of-step to end-of-step; "
          f"start-up excluded on both sides")
    print_table(results)
    print("vs TRL = against TRL's fastest run (samples/s) and its most CPU-efficient run (samples/cpu-s); "
          "thr = torch threads per process (tandem: each engine's / the trainer's, run.cpu_split)")
    print(f"load average (1/5/15 min): start {results['machine']['loadavg_start']}, "
          f"end {results['machine']['loadavg_end']} on {os.cpu_count()} CPUs")


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    apply_quick_defaults(a)
    trl_after = not (a.no_trl_after or a.quick)
    # The tandem half gets exactly these keys; the TRL half reads the same resolved config
    # (model, lr, clip, seed, data path) so both sides see the same knobs.
    a.tandem_cfg_argv = [x for arg in a.tandem_arg for x in arg.split("=", 1)]
    from tandem.config import load_config
    cfg = load_config(a.tandem_cfg_argv)
    data_path = Path(cfg.data.path)
    data_path = data_path if data_path.is_absolute() else REPO / data_path

    results = new_results(a)
    work = Path(a.work_dir) if a.work_dir else Path(tempfile.mkdtemp(prefix="tandem_trl_compare_"))
    try:
        if not a.skip_trl:
            trl_round(a, data_path, results, "before")
        if not a.skip_tandem:
            tandem_round(a, work, results)
        if not a.skip_trl and trl_after and not a.skip_tandem:
            trl_round(a, data_path, results, "after")
    finally:
        if not a.work_dir:
            shutil.rmtree(work, ignore_errors=True)

    results["machine"]["loadavg_end"] = loadavg()
    add_ratios(results)
    print_report(a, results)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"results: {out}")
    failed = any(t.get("error") for t in results["trl_runs"]) or any(r.get("error") for r in results["tandem"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
