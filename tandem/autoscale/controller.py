"""The autoscaler: after every step, measure, ask the policy, and resize the fleet in the background.

The loop calls `after_step(row)` with the step's metrics row. The autoscaler reads the engines'
queues and KV use, hands the policy one `Signals`, writes the decision and its reason to
<run_dir>/autoscale.jsonl, and, when the count changes, starts the change as a task so that
the loop never waits on a model loading:

- up:   the provider starts each engine; the fleet loads it with the current weights and only
        then adds it to the router (Fleet.join, under the sync lock);
- down: the newest engines leave first: out of the router, drained, then stopped (Fleet.leave).

While a change runs the policy is not asked again. Engine-seconds count every engine that
exists, from the moment its start is asked for until it has stopped (a starting or draining
engine holds its GPU too), on the loop's clock, so a simulated run counts virtual seconds.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Callable

from tandem import registry
from tandem.autoscale.policy import Decision, Signals, TargetPolicy
from tandem.autoscale.providers import EngineProvider
from tandem.rollout.plugins import load_plugin


class Autoscaler:
    def __init__(self, cfg, fleet, provider: EngineProvider, run_dir: Path, policy: Any = None):
        self.cfg, self.fleet, self.provider = cfg, fleet, provider
        self.scale = cfg.engine.autoscale
        self.policy = policy or self._configured_policy()
        self.log_path = run_dir / "autoscale.jsonl"
        self.alive = len(fleet.engines)
        """Engines that exist (serving, starting or draining): what engine-seconds count."""
        self._next_index = len(fleet.engines)
        self.engine_seconds = 0.0
        self._seconds_at_step = 0.0
        self._clock = asyncio.get_running_loop().time
        self._since = self._clock()
        self.change: asyncio.Task | None = None

    def _configured_policy(self) -> Any:
        """engine.autoscale.policy (a user's class, built with the section), else the target policy."""
        if not self.scale.policy:
            return TargetPolicy(self.scale, self._decode_step_s())
        return load_plugin(self.scale.policy, "engine.autoscale.policy")(self.scale)

    def _decode_step_s(self) -> Callable[[float, float], float] | None:
        """One engine's decode step time at (batch, KV tokens on the wire) from the engine profile's
        latency model; infinite past its KV capacity or running-request limit (requests would queue)."""
        cfg = self.cfg
        path = self.scale.latency_profile or (cfg.engine.sim.profile if cfg.engine.backend == "sim" else "")
        if not path:
            return None
        per_wire_token = cfg.engine.sim.token_scale if cfg.engine.backend == "sim" else 1
        return registry.load(registry.LAB["decode_step_time"])(path, per_wire_token)

    def _tick(self) -> None:
        now = self._clock()
        self.engine_seconds += self.alive * (now - self._since)
        self._since = now

    def _set_alive(self, delta: int) -> None:
        self._tick()
        self.alive += delta

    async def after_step(self, row: dict) -> dict[str, float]:
        """Decide on the step just logged; the autoscaling metrics for its row."""
        self._tick()
        serving = len(self.fleet.engines)
        if self.change is not None and not self.change.done():
            decision = Decision(serving, "hold: the last change is still in progress")
        elif row["step"] <= self.cfg.effective_staleness:  # steps are numbered from 1
            # Async: the first rollouts overlap no training, so the trainer waits whatever the fleet size.
            decision = Decision(serving, f"hold: warm-up (the first {self.cfg.effective_staleness} step(s) "
                                         "overlap no training)")
        else:
            if self.change is not None and self.change.exception() is not None:
                raise self.change.exception()  # type: ignore[misc]
            decision = self.policy.decide(await self._signals(row, serving))
            if decision.engines != serving:
                want = min(max(decision.engines, self.scale.min), self.scale.max)
                self.change = asyncio.create_task(self._resize(serving, want), name="autoscale-change")
        self._log(row["step"], serving, decision)
        per_step, self._seconds_at_step = self.engine_seconds - self._seconds_at_step, self.engine_seconds
        return {"engines": serving, "engines_alive": self.alive, "engine_seconds": self.engine_seconds,
                "engine_seconds_per_step": per_step}

    async def _signals(self, row: dict, serving: int) -> Signals:
        waiting = running = 0
        kv = 0.0
        for load in (await self.fleet.loads()).values():
            waiting += load.get("waiting", 0)
            running += load.get("running", 0)
            kv = max(kv, load.get("kv_usage", 0.0))
        return Signals(step=row["step"], engines=serving, step_time=row["step_time"],
                       rollout_time=row["rollout_time"], train_time=row["step_time"] - row["trainer_wait_time"],
                       trainer_idle_ratio=row["trainer_idle_ratio"], longest_group_s=row.get("longest_group_s", 0.0),
                       waiting=waiting, running=running, kv_usage=kv,
                       mode="sync" if self.cfg.effective_staleness == 0 else "async",
                       tokens=row["gen_tokens_per_s"] * row["rollout_time"],
                       requests_mean=row.get("engine_requests_mean", 0.0),
                       context_tokens_mean=row.get("engine_context_tokens_mean", 0.0))

    async def _resize(self, serving: int, want: int) -> None:
        if want > serving:
            await asyncio.gather(*(self._add() for _ in range(want - serving)))
        else:
            victims = list(self.fleet.engines)[-(serving - want):]  # the newest leave first
            await asyncio.gather(*(self._remove(name) for name in victims))

    async def _add(self) -> None:
        """Start and join one engine. One that cannot start or join is logged and the run goes on
        with the fleet it has (the policy may try again after its cooldown); one that started but
        could not join is stopped, never left running (and billed) outside the router."""
        name = f"engine{self._next_index}"
        self._next_index += 1
        self._set_alive(+1)
        url = None
        try:
            url = await self.provider.start(name)
            fleet_version, reported = await self.fleet.join(name, url)
        except Exception as err:
            if url is not None:
                await self.provider.stop(name, url)
            self._set_alive(-1)
            self._note("failed", name, url or "", error=f"{type(err).__name__}: {err}"[:1000])
            return
        except BaseException:  # cancelled with the run
            self._set_alive(-1)
            raise
        self._note("joined", name, url, fleet_version=fleet_version, serves_version=reported)

    async def _remove(self, name: str) -> None:
        url = self.fleet.engines[name]
        held = await self.fleet.leave(name, self.scale.drain_timeout_s)
        await self.provider.stop(name, url)
        self._set_alive(-1)
        self._note("left", name, url, held_at_stop=held)

    def _note(self, event: str, name: str, url: str, **extra: Any) -> None:
        entry = {"t": self._clock(), "event": event, "engine": name, "url": url, **extra}
        why = f": {extra['error']}" if "error" in extra else ""
        print(f"tandem: autoscale: {name} ({url}) {event}{why}", file=sys.stderr, flush=True)
        with open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def _log(self, step: int, serving: int, decision: Decision) -> None:
        with open(self.log_path, "a") as f:
            f.write(json.dumps({"t": self._clock(), "step": step, "engines": serving, "alive": self.alive,
                                "decision": decision.engines, "reason": decision.reason,
                                "predicted_step_s": decision.predicted_step_s}) + "\n")

    async def close(self) -> None:
        if self.change is not None and not self.change.done():
            self.change.cancel()
            await asyncio.gather(self.change, return_exceptions=True)
        self._tick()
        with open(self.log_path, "a") as f:  # the run's total, up to its very end
            f.write(json.dumps({"t": self._clock(), "event": "closed", "engines": len(self.fleet.engines),
                                "engine_seconds": self.engine_seconds}) + "\n")
