"""The engine-scaling sweep's arithmetic: per-step lower bounds from a sim run's trace.

bench/scaling.py runs the launcher once per sweep `Point` (mode, engines, straggler policy)
and hands the run directory to `analyse`, which reads what the run recorded (metrics.jsonl,
queue.jsonl, the sim engines' busy spans in sim/*.jsonl) and computes, per measured step,

    async: bound = max(train, busy / N, (longest single rollout alone + sync + train) / W)
    sync:  bound = max(busy / N, longest single rollout alone + sync) + train

with W = max_staleness + 1 (bench/scaling.py's docstring derives it). It lives in the package,
next to the sim engine and workload that write those traces, so the fields it reads and the
code that writes them change together, and tests/test_bench_scaling.py checks it by hand.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from tandem.config import TandemConfig

BOUND_TERMS = ("train", "engines", "longest")


def default_policy() -> str:
    """The grid runs tandem's default partial-rollout policy; the others are the variants."""
    return TandemConfig().rollout.staleness.partial_rollout


@dataclass
class Point:
    mode: str
    engines: int
    policy: str = field(default_factory=default_policy)
    oversample: float = 1.0
    staleness: int = 1
    extra: list[str] = field(default_factory=list)
    seed: int = 0
    """run.seed: the workload's draws (turns, token counts, tool times) and the engines' sampling."""
    tag: str = ""
    """A named config variant (its overrides are in `extra`), shown in the name and the label."""

    @property
    def name(self) -> str:
        tag = f"{self.mode}_e{self.engines}_{self.policy}"
        if self.oversample != 1.0:
            tag += f"_os{self.oversample:g}"
        if self.mode == "async" and self.staleness != 1:
            tag += f"_s{self.staleness}"
        if self.tag:
            tag += f"_{self.tag}"
        return tag + (f"_seed{self.seed}" if self.seed else "")

    @property
    def label(self) -> str:
        parts = [self.policy]
        if self.oversample != 1.0:
            parts.append(f"oversample {self.oversample:g}")
        if self.mode == "async" and self.staleness != 1:
            parts.append(f"staleness {self.staleness}")
        if self.tag:
            parts.append(" ".join(self.extra).replace("--rollout.", ""))
        return ", ".join(parts)


@dataclass
class Result:
    point: Point
    ok: bool
    wall_s: float
    error: str = ""
    steps: list[dict] = field(default_factory=list)
    step_s: float = 0.0
    rollout_s: float = 0.0
    train_s: float = 0.0
    sync_s: float = 0.0
    idle_ratio: float = 0.0
    busy_per_engine_s: float = 0.0
    reload_per_engine_s: float = 0.0
    longest_rollout_s: float = 0.0
    """The step's longest rollout as measured (wall time under load)."""
    longest_alone_s: float = 0.0
    """The step's longest rollout critical path on an idle engine (what the bound uses)."""
    bound_s: float = 0.0
    efficiency: float = 0.0
    dominant: str = ""
    queue_median: float = 0.0
    queue_peak: int = 0
    queue_series: list[tuple[float, int]] = field(default_factory=list)
    dropped_stale: int = 0
    recycled_groups: int = 0
    cpu_s: float = 0.0
    """CPU seconds of the whole process tree (launcher, engines, router, trainer)."""
    engine_lag_s: float = 0.0
    """Mean lateness of the sim engines' event timers (wall s): high = the machine is CPU-starved."""
    loop_lag_s: float = float("nan")
    """Mean lateness of the orchestrator's event loop waking rollouts from tool sleeps (wall s):
    high = the orchestrator process (rollout loop) is the bottleneck."""
    length_bias_turns: float = 1.0
    """Mean over measured steps of trained-on turns / turns of everything finished in the step's window."""
    discarded_groups: int = 0
    """Groups cancelled at a take (lost the race, or too old for any later step)."""


def warmup_steps(p: Point) -> int:
    """Steps whose rollouts started together at t=0 (before any weights were trained)."""
    return 1 if p.mode == "sync" else p.staleness + 1


def cycle_steps(p: Point) -> int:
    """Async with staleness S launches the rollouts of S + 1 consecutive steps close together and
    its step times alternate (one long step, S short ones), so it is measured in whole cycles."""
    return 1 if p.mode == "sync" else p.staleness + 1


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_end_times(run_dir: Path, rows: list[dict]) -> list[float]:
    """Unix time at which each step's trainer result arrived (= the end of its step window)."""
    ends = []
    for row in rows:
        if "time" in row:
            ends.append(float(row["time"]))
        else:
            ends.append((run_dir / "trainer" / f"step_{row['step']:06d}.json").stat().st_mtime)
    return ends


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def measured_steps(p: Point, n_rows: int) -> tuple[int, int]:
    """[first, last) metrics rows to measure: after the warm-up, in whole cycles."""
    warmup = warmup_steps(p)
    last = warmup + (n_rows - warmup) // cycle_steps(p) * cycle_steps(p)
    if last <= warmup:
        raise ValueError(f"{n_rows} metrics rows: too few for {warmup} warm-up step(s) and one cycle of "
                         f"{cycle_steps(p)} measured step(s)")
    return warmup, last


def window_busy(spans: list[dict], w0: float, w1: float, ts: float) -> tuple[float, float]:
    """(generation, reload) model seconds of the engines' busy spans inside the wall window [w0, w1]."""
    # Busy spans are contiguous GPU work, so model busy time = wall overlap x time_scale.
    busy = sum(overlap(s["start"], s["end"], w0, w1) * ts * s["busy_s"] / max(s["busy_s"] + s["reload_s"], 1e-12)
               for s in spans)
    reload = sum(overlap(s["start"], s["end"], w0, w1) * ts * s["reload_s"] / max(s["busy_s"] + s["reload_s"], 1e-12)
                 for s in spans)
    return busy, reload


def step_record(p: Point, row: dict, w0: float, w1: float, spans: list[dict], ts: float) -> dict:
    """One measured step: its times in model seconds, the bound's terms and the term that sets it."""
    busy, reload = window_busy(spans, w0, w1, ts)
    longest = row.get("sim_longest_rollout_s", row.get("longest_group_s", 0.0)) * ts
    # Only the sim workload records a rollout's idle-engine critical path; without it the
    # term falls back to train / W (still a lower bound, never the largest).
    alone = row.get("sim_longest_alone_s", 0.0) * ts
    # A rollout of an async step may start up to `staleness` steps early (its version gate
    # opens then), so it can span staleness + 1 step windows; in sync mode it spans one.
    windows = 1 if p.mode == "sync" else p.staleness + 1
    train, sync = row["train_time"] * ts, row["sync_time"] * ts
    engines = (busy + reload) / p.engines
    if p.mode == "sync":  # rollout, sync and training alternate: the rollout-side terms add train
        engines += train
    terms = {"train": train, "engines": engines, "longest": (alone + sync + train) / windows}
    dominant = max(terms, key=terms.__getitem__)
    return {
        "step": row["step"], "step_s": row["step_time"] * ts, "rollout_s": row["rollout_time"] * ts,
        "train_s": row["train_time"] * ts, "sync_s": row["sync_time"] * ts,
        "idle_ratio": row["trainer_idle_ratio"], "busy_per_engine_s": busy / p.engines,
        "reload_per_engine_s": reload / p.engines, "longest_rollout_s": longest, "longest_alone_s": alone,
        "bound_s": terms[dominant], "dominant": dominant, "terms": terms,
        "dropped_stale": row.get("dropped_stale", 0), "recycled_groups": row.get("recycled_groups", 0),
        "length_bias_turns": row.get("length_bias_turns", 1.0), "discarded": row.get("oversample_discarded", 0),
        "loop_lag_s": row.get("sim_loop_lag_ms", float("nan")) / 1e3,
        "window": [w0, w1],
    }


def queue_timeline(queue: list[dict], ts: float) -> list[tuple[float, int]]:
    """Queue depth over the whole run: total waiting across engines per sampling instant."""
    t0 = queue[0]["t"] if queue else 0.0
    per_t: dict[float, int] = {}
    for q in queue:
        per_t[round(q["t"], 2)] = per_t.get(round(q["t"], 2), 0) + q["waiting"]
    return [((t - t0) * ts, w) for t, w in sorted(per_t.items())]


def analyse(p: Point, run_dir: Path, ts: float, wall: float) -> Result:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    ends = step_end_times(run_dir, rows)
    traces = [read_jsonl(f) for f in sorted((run_dir / "sim").glob("*.jsonl"))]
    spans = [s for t in traces for s in t if s.get("type") == "span"]
    finals = [s for t in traces for s in t if s.get("type") == "final"]
    queue = read_jsonl(run_dir / "queue.jsonl")
    warmup, last = measured_steps(p, len(rows))
    steps = [step_record(p, rows[i], ends[i - 1], ends[i], spans, ts) for i in range(warmup, last)]
    w_start, w_end = ends[warmup - 1], ends[last - 1]
    waiting = [q["waiting"] for q in queue if w_start <= q["t"] <= w_end]

    def mean(key: str) -> float:
        return statistics.fmean(s[key] for s in steps)

    step_sum = sum(s["step_s"] for s in steps)
    # The bound of the measured span: each term summed over it (the "longest" term bounds the
    # average over a cycle, not each step of it), then the largest.
    totals = {term: sum(s["terms"][term] for s in steps) for term in BOUND_TERMS}
    dominant = max(totals, key=totals.__getitem__)
    bound_sum = totals[dominant]
    return Result(
        p, True, wall, steps=steps, step_s=mean("step_s"), rollout_s=mean("rollout_s"), train_s=mean("train_s"),
        sync_s=mean("sync_s"), idle_ratio=mean("idle_ratio"), busy_per_engine_s=mean("busy_per_engine_s"),
        reload_per_engine_s=mean("reload_per_engine_s"), longest_rollout_s=mean("longest_rollout_s"),
        longest_alone_s=mean("longest_alone_s"),
        bound_s=bound_sum / len(steps), efficiency=bound_sum / step_sum, dominant=dominant,
        queue_median=statistics.median(waiting) if waiting else 0.0, queue_peak=max(waiting, default=0),
        queue_series=queue_timeline(queue, ts), dropped_stale=sum(s["dropped_stale"] for s in steps),
        engine_lag_s=statistics.fmean(f.get("lag_mean_s", 0.0) for f in finals) if finals else float("nan"),
        loop_lag_s=mean("loop_lag_s"),
        recycled_groups=sum(s["recycled_groups"] for s in steps),
        length_bias_turns=mean("length_bias_turns"), discarded_groups=sum(s["discarded"] for s in steps),
    )


@dataclass
class AcrossSeeds:
    """One sweep point measured in independent sweeps (one per seed): mean and range."""
    point: Point
    seeds: list[int]
    step_s: tuple[float, float, float]
    """(mean, min, max) over the seeds; likewise below."""
    efficiency: tuple[float, float, float]
    length_bias_turns: tuple[float, float, float]


def spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.fmean(values), min(values), max(values)


def across_seeds(results: list[Result]) -> list[AcrossSeeds]:
    """Group the successful results by point (mode, engines, policy variant), seeds apart."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        if r.ok:
            groups.setdefault((r.point.mode, r.point.engines, r.point.label), []).append(r)
    return [AcrossSeeds(rs[0].point, [r.point.seed for r in rs], spread([r.step_s for r in rs]),
                        spread([r.efficiency for r in rs]), spread([r.length_bias_turns for r in rs]))
            for rs in groups.values()]


def speedup_by_seed(results: list[Result], mode: str, engines: int, on_grid) -> dict[int, float]:
    """Per seed: step time at 1 engine / step time at `engines`, both from that seed's sweep."""
    by = {(r.point.seed, r.point.engines): r for r in results if on_grid(r, mode)}
    return {seed: by[(seed, 1)].step_s / by[(seed, engines)].step_s
            for seed, n in by if n == engines and (seed, 1) in by}
