"""bench/scaling.py's figure: step time vs engines (mean over seeds) with bounds and the reference
run, and queue-depth timelines (imported as `_scaling_plot`, like `_common`)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tandem.lab.sim.sweep import Result

def plot(results: list[Result], path: Path, on_grid: Callable[[Result, str], bool],
         reference: dict[str, dict[int, int]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    ax = axes[0]
    colors = {"async": "tab:blue", "sync": "tab:orange"}
    for mode in ("sync", "async"):
        pts = sorted((r for r in results if on_grid(r, mode)), key=lambda r: r.point.engines)
        if not pts:
            continue
        xs = sorted({r.point.engines for r in pts})

        def mean_of(key: str, n: int) -> float:  # over the seeds
            vals = [getattr(r, key) for r in pts if r.point.engines == n]
            return sum(vals) / len(vals)
        ax.plot(xs, [mean_of("step_s", n) for n in xs], "o-", color=colors[mode], label=f"{mode}: tandem (sim)")
        ax.plot(xs, [mean_of("bound_s", n) for n in xs], "--", color=colors[mode], alpha=0.6,
                label=f"{mode}: lower bound")
        ref = reference[mode]
        ax.plot(sorted(ref), [ref[n] for n in sorted(ref)], "x:", color=colors[mode], alpha=0.5,
                label=f"{mode}: reference run")
    ax.set_xlabel("engines (1 GPU each)")
    ax.set_ylabel("step time (model s)")
    ax.set_title("Step time vs engines")
    ax.set_xticks([1, 2, 3])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    for ax, mode in zip(axes[1:], ("sync", "async")):
        for r in sorted((r for r in results if on_grid(r, mode) and r.point.seed == 0), key=lambda r: r.point.engines):
            if r.queue_series:
                xs, ys = zip(*r.queue_series)
                ax.plot(xs, ys, label=f"{r.point.engines} engine(s)", lw=0.9)
        ax.set_title(f"Queue depth (waiting requests, all engines), {mode}")
        ax.set_xlabel("model time since start (s)")
        ax.set_ylabel("#queue-req")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
