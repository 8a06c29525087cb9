"""Predict one rollout batch on N simulated engines in pure virtual time (no processes, no HTTP).

    python -m tandem.lab.sim.predict --engines 1 2 3 [--routing round_robin|sticky] \
        [--engine-profile profiles/engine/qwen3_14b_h100.toml] \
        [--workload profiles/workload/reference_agentic.toml]

It drives the same `SimScheduler` the sim engine uses with the workload profile's rollouts
(all of one step's rollouts start together, as in sync mode), so it answers in a second
what a sweep would measure in minutes, and is how the shipped profiles were calibrated.
It deliberately leaves out everything the real sweep exists to measure: the orchestrator,
router, staleness control, weight sync and CPU overheads. Read its output as "the engines'
side of the story": rollout makespan, engine busy time, the longest rollout, queue peaks,
and the resulting bounds on the step time.

Routing: round_robin sends every request (every turn) to the next engine, as the
sglang-router policy of that name does; sticky keeps all turns of one rollout on one engine
(least-loaded at the rollout's first turn), which is what lets the radix cache reuse the
previous turn's context.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
from dataclasses import dataclass, field

from tandem.lab.sim.latency import LatencyModel
from tandem.lab.sim.profiles import EngineProfile, WorkloadProfile, load_engine_profile, load_workload_profile
from tandem.lab.sim.scheduler import PrefixCache, SimReq, SimScheduler


@dataclass
class _Rollout:
    idx: int
    group: int
    turns: int
    prompt_tokens: int
    outputs: list[int]
    observations: list[int]
    tools: list[float]
    eval_s: float
    turn: int = 0
    context: int = 0
    engine: int = -1
    start: float = 0.0
    end: float = 0.0


@dataclass
class Prediction:
    engines: int
    routing: str
    rollout_makespan_s: float
    longest_rollout_s: float
    busy_s: list[float]
    queue_peak: list[int]
    generated_tokens: int
    prefill_tokens: int
    cached_tokens: int
    retractions: int
    train_s: float
    reload_s: float
    rollout_s: list[float] = field(default_factory=list)

    @property
    def busy_per_engine_s(self) -> float:
        return sum(self.busy_s) / self.engines

    @property
    def sync_step_s(self) -> float:
        """Sync mode: rollout, then train, then reload (no overlap)."""
        return self.rollout_makespan_s + self.train_s + self.reload_s

    def async_bound_s(self, staleness: int = 1) -> float:
        """Async (max_staleness S) can be no faster than the largest of train, engine work / N, and
        (longest rollout + train) / (S + 1): a rollout cannot start before the weights it must use
        exist, S steps before its batch is trained. bench/scaling.py reports the same chain with
        each rollout's idle-engine critical path (a strict bound); here the longest rollout is the
        one simulated under the batch's own contention, so this is an estimate of the async step."""
        return max(self.train_s, self.busy_per_engine_s + self.reload_s,
                   (self.longest_rollout_s + self.train_s) / (staleness + 1))


def draw_rollouts(wl: WorkloadProfile, seed: int) -> list[_Rollout]:
    a = wl.agent
    out: list[_Rollout] = []
    for g in range(wl.batch.prompts_per_step):
        grng = random.Random(f"{seed}:group:{g}")
        prompt = a.prompt_tokens.sample_int(grng)
        for s in range(wl.batch.samples_per_prompt):
            rng = random.Random(f"{seed}:{g}:{s}")
            turns = max(1, a.turns.sample_int(rng))
            outs, obs, tools = [], [], []
            ctx = prompt
            for t in range(turns):
                room = a.max_context_tokens - ctx
                if room < 1:
                    break
                n = min(max(1, a.output_tokens.sample_int(rng)), room)
                outs.append(n)
                ctx += n
                if t == turns - 1:
                    break
                tools.append(a.tool_time_s.sample(rng))
                o = min(max(0, a.observation_tokens.sample_int(rng)), a.max_context_tokens - ctx - 1)
                if o <= 0:
                    break
                obs.append(o)
                ctx += o
            out.append(_Rollout(len(out), g, len(outs), prompt, outs, obs, tools, a.eval_time_s.sample(rng)))
    return out


class _Fleet:
    """N schedulers and the rollouts' turns, driven by one event heap in model time."""

    def __init__(self, profile: EngineProfile, engines: int, routing: str, rollouts: list[_Rollout]):
        self.model = LatencyModel.from_profile(profile)
        self.bt = profile.prefix_cache.block_tokens
        self.scheds = [SimScheduler(self.model, profile.capacity, PrefixCache(self.bt, profile.prefix_cache.enabled))
                       for _ in range(engines)]
        self.engines, self.routing, self.rollouts = engines, routing, rollouts
        self.heap: list[tuple[float, int, str, int]] = []
        self.seq = itertools.count()
        self.armed: list[float | None] = [None] * engines
        self.rr = itertools.count()
        self.peaks = [0] * engines
        self.owner: dict[str, _Rollout] = {}

    def blocks(self, r: _Rollout, tokens: int) -> list[int]:
        # Prompt blocks are shared by the group; later blocks are the rollout's own.
        pb = r.prompt_tokens // self.bt
        return [hash(("g", r.group, i)) if i < pb else hash(("r", r.idx, i)) for i in range(tokens // self.bt)]

    def arm(self, e: int) -> None:
        """Schedule engine e's next event, unless that very time is already on the heap."""
        t = self.scheds[e].next_event_time()
        if t is not None and self.armed[e] != t:
            self.armed[e] = t
            heapq.heappush(self.heap, (t, next(self.seq), "engine", e))

    def on_finished(self, e: int, done: list[SimReq]) -> None:
        """Finished turns: cache their context, then queue the next turn after its tool call."""
        for req in done:
            r = self.owner.pop(req.rid)
            assert req.finished_at is not None  # the scheduler stamps every request it returns as done
            r.context += req.done
            self.scheds[e].cache_insert(self.blocks(r, r.context))
            r.turn += 1
            if r.turn >= r.turns:
                r.end = req.finished_at + r.eval_s
                continue
            r.context += r.observations[r.turn - 1]
            heapq.heappush(self.heap, (req.finished_at + r.tools[r.turn - 1], next(self.seq), "turn", r.idx))

    def engine_for(self, r: _Rollout) -> int:
        if self.routing == "sticky":
            if r.engine < 0:
                r.engine = min(range(self.engines),
                               key=lambda e: len(self.scheds[e].running) + len(self.scheds[e].waiting))
            return r.engine
        return next(self.rr) % self.engines

    def submit(self, r: _Rollout, now: float) -> None:
        e = self.engine_for(r)
        n = r.outputs[r.turn]
        req = SimReq(rid=f"{r.idx}:{r.turn}", input_len=r.context, max_new_tokens=n, target=n,
                     input_blocks=self.blocks(r, r.context))
        self.owner[req.rid] = r
        self.on_finished(e, self.scheds[e].submit(req, now))
        self.peaks[e] = max(self.peaks[e], len(self.scheds[e].waiting))
        self.arm(e)

    def run(self) -> None:
        """Every rollout's first turn at t=0 (sync mode), then events in time order until none is left."""
        for r in self.rollouts:
            r.context = r.prompt_tokens
            heapq.heappush(self.heap, (0.0, next(self.seq), "turn", r.idx))
        while self.heap:
            now, _, kind, i = heapq.heappop(self.heap)
            if kind == "turn":
                self.submit(self.rollouts[i], now)
            elif self.armed[i] == now:   # otherwise a stale event: the engine was re-armed since
                self.armed[i] = None
                self.on_finished(i, self.scheds[i].advance(now))
                self.arm(i)

    def prediction(self, train_s: float) -> Prediction:
        rollouts, scheds = self.rollouts, self.scheds
        durations = [r.end - r.start for r in rollouts]
        return Prediction(
            engines=self.engines, routing=self.routing, rollout_makespan_s=max(r.end for r in rollouts),
            longest_rollout_s=max(durations), busy_s=[s.busy_s for s in scheds], queue_peak=self.peaks,
            generated_tokens=sum(s.generated_tokens for s in scheds),
            prefill_tokens=sum(s.prefill_token_count for s in scheds),
            cached_tokens=sum(s.cached_token_count for s in scheds), retractions=sum(s.retractions for s in scheds),
            train_s=train_s, reload_s=self.model.reload_s, rollout_s=durations,
        )


def predict(profile: EngineProfile, wl: WorkloadProfile, engines: int, routing: str = "round_robin",
            seed: int = 0) -> Prediction:
    fleet = _Fleet(profile, engines, routing, draw_rollouts(wl, seed))
    fleet.run()
    return fleet.prediction(wl.train.time_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tandem.lab.sim.predict", description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--routing", choices=["round_robin", "sticky"], default="round_robin")
    ap.add_argument("--engine-profile", default="profiles/engine/qwen3_14b_h100.toml")
    ap.add_argument("--workload", default="profiles/workload/reference_agentic.toml")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--staleness", type=int, default=1, help="rollout.staleness.max for the async bound")
    args = ap.parse_args(argv)
    profile = load_engine_profile(args.engine_profile)
    wl = load_workload_profile(args.workload)
    print(f"{'N':>2} {'rollout':>8} {'busy/N':>8} {'longest':>8} {'q_peak':>7} {'sync~':>8} {'async>=':>8} "
          f"{'cached%':>7} {'retract':>7}   (model seconds, routing={args.routing})")
    for n in args.engines:
        p = predict(profile, wl, n, args.routing, args.seed)
        cached = p.cached_tokens / max(1, p.cached_tokens + p.prefill_tokens)
        print(f"{n:>2} {p.rollout_makespan_s:8.0f} {p.busy_per_engine_s:8.0f} {p.longest_rollout_s:8.0f} "
              f"{max(p.queue_peak):7d} {p.sync_step_s:8.0f} {p.async_bound_s(args.staleness):8.0f} {cached:7.1%} {p.retractions:7d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
