"""Predict one rollout batch on N simulated engines in pure virtual time (no processes, no HTTP).

    python -m tandem.sim.predict --engines 1 2 3 [--routing round_robin|sticky] \
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

from tandem.sim.latency import LatencyModel
from tandem.sim.profiles import EngineProfile, WorkloadProfile, load_engine_profile, load_workload_profile
from tandem.sim.scheduler import PrefixCache, SimReq, SimScheduler


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
    out = []
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


def predict(profile: EngineProfile, wl: WorkloadProfile, engines: int, routing: str = "round_robin",
            seed: int = 0) -> Prediction:
    model = LatencyModel.from_profile(profile)
    bt = profile.prefix_cache.block_tokens
    scheds = [SimScheduler(model, profile.capacity, PrefixCache(bt, profile.prefix_cache.enabled))
              for _ in range(engines)]
    rollouts = draw_rollouts(wl, seed)
    heap: list[tuple[float, int, str, int]] = []
    seq = itertools.count()
    armed: list[float | None] = [None] * engines
    rr = itertools.count()
    peaks = [0] * engines
    owner: dict[str, _Rollout] = {}

    def blocks(r: _Rollout, tokens: int) -> list[int]:
        # Prompt blocks are shared by the group; later blocks are the rollout's own.
        pb = r.prompt_tokens // bt
        return [hash(("g", r.group, i)) if i < pb else hash(("r", r.idx, i)) for i in range(tokens // bt)]

    def arm(e: int) -> None:
        t = scheds[e].next_event_time()
        if t is not None and armed[e] != t:
            armed[e] = t
            heapq.heappush(heap, (t, next(seq), "engine", e))

    def on_finished(e: int, done: list[SimReq], now: float) -> None:
        for req in done:
            r = owner.pop(req.rid)
            r.context += req.done
            scheds[e].cache_insert(blocks(r, r.context))
            r.turn += 1
            if r.turn >= r.turns:
                r.end = req.finished_at + r.eval_s
                continue
            r.context += r.observations[r.turn - 1]
            heapq.heappush(heap, (req.finished_at + r.tools[r.turn - 1], next(seq), "turn", r.idx))

    def submit(r: _Rollout, now: float) -> None:
        if routing == "sticky":
            if r.engine < 0:
                r.engine = min(range(engines), key=lambda e: len(scheds[e].running) + len(scheds[e].waiting))
            e = r.engine
        else:
            e = next(rr) % engines
        n = r.outputs[r.turn]
        req = SimReq(rid=f"{r.idx}:{r.turn}", input_len=r.context, max_new_tokens=n, target=n,
                     input_blocks=blocks(r, r.context))
        owner[req.rid] = r
        on_finished(e, scheds[e].submit(req, now), now)
        peaks[e] = max(peaks[e], len(scheds[e].waiting))
        arm(e)

    for r in rollouts:
        r.context = r.prompt_tokens
        heapq.heappush(heap, (0.0, next(seq), "turn", r.idx))
    now = 0.0
    while heap:
        now, _, kind, i = heapq.heappop(heap)
        if kind == "turn":
            submit(rollouts[i], now)
        else:
            if armed[i] != now:
                continue
            armed[i] = None
            on_finished(i, scheds[i].advance(now), now)
            arm(i)
    durations = [r.end - r.start for r in rollouts]
    return Prediction(
        engines=engines, routing=routing, rollout_makespan_s=max(r.end for r in rollouts),
        longest_rollout_s=max(durations), busy_s=[s.busy_s for s in scheds], queue_peak=peaks,
        generated_tokens=sum(s.generated_tokens for s in scheds),
        prefill_tokens=sum(s.prefill_token_count for s in scheds),
        cached_tokens=sum(s.cached_token_count for s in scheds), retractions=sum(s.retractions for s in scheds),
        train_s=wl.train.time_s, reload_s=model.reload_s, rollout_s=durations,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tandem.sim.predict", description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--routing", choices=["round_robin", "sticky"], default="round_robin")
    ap.add_argument("--engine-profile", default="profiles/engine/qwen3_14b_h100.toml")
    ap.add_argument("--workload", default="profiles/workload/reference_agentic.toml")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--staleness", type=int, default=1, help="rollout.max_staleness for the async bound")
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
