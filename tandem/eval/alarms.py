"""Alarms that say when learning goes wrong, read off the metrics rows as the run writes them.

Each alarm is a rule over the step rows (and the evaluation rows) with a threshold in [alarms],
whose docstrings say why each threshold is what it is. Every step row gets `alarm/<name>` (1 when
it fired at that step, else 0), so the curves show when; a firing alarm also gets one line in the
live view, and with run.stop_on_alarm it stops the run (exit 1, the alarm named, a checkpoint kept).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.config import AlarmsConfig

ALARMS = ("entropy_collapse", "kl_spike", "length_collapse", "length_blowup", "tamper", "reward_divergence")


@dataclass
class Alarm:
    name: str
    message: str
    """What crossed which threshold, in numbers."""

    def line(self) -> str:
        return f"alarm/{self.name}: {self.message}"


def _window_mean(rows: list[dict], key: str) -> float | None:
    values = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.fmean(values) if values else None


class AlarmWatch:
    """Feed it every step row (`check`) and every evaluation row (`eval_done`), in order."""

    def __init__(self, cfg: AlarmsConfig, past_rows: Sequence[dict] = (), past_evals: Sequence[dict] = ()):
        """`past_rows`, `past_evals`: what a resumed run logged before its checkpoint (the baselines)."""
        self.cfg = cfg
        self.rows: list[dict] = list(past_rows)
        self.evals: list[dict] = [e for e in past_evals if "eval/reward_mean" in e]
        self._evals_checked = len(self.evals)

    def eval_done(self, row: dict) -> None:
        if "eval/reward_mean" in row:
            self.evals.append(row)

    def check(self, row: dict) -> list[Alarm]:
        """The alarms `row` (the newest step's) sets off."""
        before = self.rows[-self.cfg.window_steps:]
        fired = [a for a in (self._entropy(row), self._kl(row, before), *self._length(row, before), self._tamper(row),
                             self._divergence()) if a is not None]
        self.rows.append(row)
        return fired

    @staticmethod
    def metrics(fired: list[Alarm]) -> dict[str, float]:
        names = {a.name for a in fired}
        return {f"alarm/{name}": float(name in names) for name in ALARMS}

    def _entropy(self, row: dict) -> Alarm | None:
        first = next((float(r["entropy"]) for r in self.rows + [row] if float(r.get("entropy") or 0) > 0), None)
        ratio, entropy = self.cfg.entropy_collapse_ratio, float(row.get("entropy") or 0.0)
        if not ratio or first is None or "entropy" not in row or entropy >= ratio * first:
            return None
        reward = _window_mean(self.rows[-self.cfg.window_steps + 1:] + [row], "reward_mean")
        if reward is not None and reward >= self.cfg.entropy_collapse_reward:
            return None  # converged on the task, not collapsed before learning it
        return Alarm("entropy_collapse", f"entropy {entropy:.4g} < {ratio:g} x its first value {first:.4g} while the "
                                         f"training reward is {reward if reward is not None else 0:.4g} "
                                         f"(< {self.cfg.entropy_collapse_reward:g})")

    def _kl(self, row: dict, before: list[dict]) -> Alarm | None:
        factor, kl = self.cfg.kl_spike_factor, float(row.get("kl") or 0.0)
        mean = _window_mean(before, "kl")
        if not factor or mean is None or len(before) < 2 or kl <= self.cfg.kl_spike_min or kl <= factor * mean:
            return None
        return Alarm("kl_spike", f"kl {kl:.4g} > {factor:g} x the mean {mean:.4g} of the {len(before)} steps before")

    def _length(self, row: dict, before: list[dict]) -> tuple[Alarm | None, Alarm | None]:
        mean, length = _window_mean(before, "response_len_mean"), row.get("response_len_mean")
        if mean is None or length is None or len(before) < self.cfg.window_steps:
            return None, None
        low, high = self.cfg.length_collapse_ratio, self.cfg.length_blowup_ratio
        said = f"response_len_mean {float(length):.4g} {{}} x the mean {mean:.4g} of the {len(before)} steps before"
        collapse = Alarm("length_collapse", said.format(f"< {low:g}")) if low and length < low * mean else None
        blowup = Alarm("length_blowup", said.format(f"> {high:g}")) if high and length > high * mean else None
        return collapse, blowup

    def _tamper(self, row: dict) -> Alarm | None:
        rate = row.get("agent_tamper_rate")
        if rate is None or float(rate) <= self.cfg.tamper_rate:
            return None
        return Alarm("tamper", f"agent_tamper_rate {float(rate):.4g} > {self.cfg.tamper_rate:g}: trajectories "
                               f"tampered with the grader")

    def _train_reward_at(self, steps_done: int) -> float | None:
        """The training reward around evaluation step `steps_done`: the mean over the window of steps
        ending there (the first step's, for the starting weights)."""
        upto = max(steps_done, 1)
        return _window_mean([r for r in self.rows if upto - self.cfg.window_steps < r["step"] <= upto], "reward_mean")

    def _divergence(self) -> Alarm | None:
        """Between the previous evaluation and a new one: training reward up, evaluation reward down."""
        gap = self.cfg.reward_divergence
        if len(self.evals) == self._evals_checked or len(self.evals) < 2:
            return None
        self._evals_checked = len(self.evals)
        a, b = self.evals[-2], self.evals[-1]
        train_a, train_b = self._train_reward_at(a["step"]), self._train_reward_at(b["step"])
        if not gap or train_a is None or train_b is None:
            return None
        rise, fall = train_b - train_a, a["eval/reward_mean"] - b["eval/reward_mean"]
        if rise <= gap or fall <= gap:
            return None
        return Alarm("reward_divergence", f"from step {a['step']} to {b['step']} the training reward rose by "
                                          f"{rise:.4g} while eval/reward_mean fell by {fall:.4g} (> {gap:g} each)")
