"""The autoscaler's sim actuator and the changing-demand workload: the in-process router's worker
list, a stopped engine's 502, the demand schedule by hand, and a whole virtual-clock run that grows
and shrinks its fleet (tandem.lab.virtual with engine.autoscale)."""

from __future__ import annotations

import asyncio
import sys
import itertools
import json

import httpx
import pytest

from tandem.config import load_config
from tandem.lab.inprocess import InProcessRouter
from _golden import assert_golden_rows
from tandem.lab.sim.profiles import DemandParams, ProfileError, workload_profile_from_dict


def test_the_router_stand_in_adds_and_removes_workers_and_moves_their_sessions():
    router = InProcessRouter(load_config([]), {"engine0": "http://e0"}, http=None)
    assert router.pick("a") == "http://e0"
    asyncio.run(router.add("http://e1"))
    assert router.pick("b") == "http://e0"            # both idle: the first of the tie
    router.in_flight["http://e0"] = 5
    assert router.pick("c") == "http://e1"            # new key: the least loaded, now including e1
    asyncio.run(router.remove("http://e1"))
    assert router.urls == ["http://e0"]
    assert router.pick("c") == "http://e0"            # its session moved off the removed engine
    assert router.pick("a") == "http://e0"


def test_a_request_on_an_engine_stopped_under_it_is_a_502_the_client_retries():
    async def main():
        async def app(scope, receive, send):  # an engine that answers, but was stopped meanwhile
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b"{}"})
        http = httpx.AsyncClient(mounts={"http://e0": httpx.ASGITransport(app=app)})
        gone: set[str] = set()
        router = InProcessRouter(load_config([]), {"engine0": "http://e0", "engine1": "http://e1"}, http, gone)
        assert (await router.post({}, None))[0] == 200
        gone.add("http://e0")
        assert (await router.post({}, None))[0] == 502        # answered, but its engine is gone
        router.in_flight["http://e0"] = 1
        status, body = await router.post({}, None)            # e1: nothing listens there
        assert status == 502 and "unreachable" in body
        await http.aclose()
    asyncio.run(main())


def test_the_demand_schedule_by_hand():
    d = DemandParams([[0, 0.5], [8, 0.5], [14, 1.6], [24, 1.6], [30, 0.5]])
    assert [d.turns_factor(v) for v in (-1, 0, 8, 11, 14, 24, 27, 30, 99)] == \
        pytest.approx([0.5, 0.5, 0.5, 1.05, 1.6, 1.6, 1.05, 0.5, 0.5])   # 11: half way from 0.5 to 1.6
    assert DemandParams().turns_factor(7) == 1.0
    with pytest.raises(ProfileError, match="'demand.turns_scale' needs strictly rising x"):
        workload_profile_from_dict({"demand": {"turns_scale": [[0, 1], [0, 2]]}})
    with pytest.raises(ProfileError, match="'demand.turns_scale' must be a list of"):
        workload_profile_from_dict({"demand": {"turns_scale": [[0, "x"]]}})


def alive_integral(events: list[dict], start: int, end_t: float) -> float:
    """Engine-seconds by hand from autoscale.jsonl: a decision to grow adds its engines at once
    (they hold a GPU while they start), a leave removes one when it has stopped."""
    alive, since, total = start, 0.0, 0.0
    for e in events:
        total += alive * (e["t"] - since)
        since = e["t"]
        if "decision" in e and e["decision"] > e["engines"]:
            alive += e["decision"] - e["engines"]
        elif e.get("event") == "left":
            alive -= 1
    return total + alive * (end_t - since)


def test_a_virtual_run_grows_and_shrinks_its_fleet_without_losing_a_sample(tmp_path, monkeypatch, capsys):
    from tandem.lab import virtual
    from tandem.lab.sim import workload

    monkeypatch.setattr(workload, "_calls", itertools.count())
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"prompt": f"sim task {i}", "label": ""}) + "\n" for i in range(16)))
    run_dir = tmp_path / "run"
    prompts, group, steps = 2, 2, 12
    virtual.run([
        "--engines", "1", "--mode", "async", "--steps", str(steps), "--run-dir", str(run_dir),
        "--engine.backend", "sim", "--trainer.backend", "sim",
        "--rollout.function", "tandem.lab.sim.workload:agentic_rollout",
        "--rollout.reward", "tandem.lab.sim.workload:agentic_reward", "--data.path", str(tasks),
        "--rollout.prompts_per_step", str(prompts), "--rollout.samples_per_prompt", str(group),
        "--engine.sim.token_scale", "8", "--trainer.sim.train_time_s", "400",
        "--logging.live", "off", "--logging.tensorboard", "false",
        # Grow to 3 at step 1; after 5 steps at 3, back to 1. A leaving engine is stopped almost at
        # once (drain 1 ms), so what it held fails and is retried elsewhere.
        "--engine.autoscale.enabled", "true", "--engine.autoscale.min", "1", "--engine.autoscale.max", "3",
        "--engine.autoscale.policy", "tests/fixtures/autoscale_policy.py:Scripted",
        "--engine.autoscale.drain_timeout_s", "0.001"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    events = [json.loads(line) for line in (run_dir / "autoscale.jsonl").read_text().splitlines()]
    assert_golden_rows(run_dir, "virtual_autoscale_metrics.jsonl")  # as before the composition root
    assert [r["samples"] for r in rows] == [prompts * group] * steps          # none lost, none twice
    assert max(r["staleness_max"] for r in rows) <= 1
    joined = [e for e in events if e.get("event") == "joined"]
    left = [e for e in events if e.get("event") == "left"]
    assert [e["engine"] for e in joined] == ["engine1", "engine2"] and sorted(e["engine"] for e in left) == ["engine1", "engine2"]
    # The leaving engines still held requests when they stopped: each was retried on another engine.
    held = sum(e["held_at_stop"] for e in left)
    assert held >= 1 and rows[-1]["requests_retried"] >= held
    # A joining engine served the fleet's version before the router sent it anything.
    assert all(e["serves_version"] == e["fleet_version"] >= 1 for e in joined)
    # It started 90 s (the engine profile's startup) after the decision, then loaded the weights.
    grow = next(e for e in events if e.get("decision") == 3)
    assert all(e["t"] >= grow["t"] + 90.0 for e in joined)
    assert [r["engines"] for r in rows][:2] == [1, 1] and 3 in [r["engines"] for r in rows]
    assert rows[-1]["engines"] == 1 and rows[-1]["engines_alive"] == 1
    # Engine-seconds by hand, to the end of the run (virtual time is exact).
    closed = events[-1]
    assert closed["event"] == "closed"
    assert closed["engine_seconds"] == pytest.approx(alive_integral(events[:-1], 1, closed["t"]))
    assert rows[-1]["engine_seconds"] == pytest.approx(sum(r["engine_seconds_per_step"] for r in rows))
    # The progress lines show the fleet's size.
    shown = [line.rsplit("engines=", 1)[1] for line in capsys.readouterr().out.splitlines() if " engines=" in line]
    assert shown == [str(r["engines"]) for r in rows]


def test_the_client_time_averages_requests_in_flight_and_their_context():
    from tandem.rollout.client import InFlightMeter, _context_tokens
    from tandem.lab.sim import virtual_clock

    async def main():
        meter = InFlightMeter()
        meter.add(1, 100)              # t 0: one request, 100 tokens
        await asyncio.sleep(10)
        meter.add(1, 50)               # t 10: two, 150
        await asyncio.sleep(10)
        meter.add(-1, -100)            # t 20: one, 50
        await asyncio.sleep(20)
        return meter.take(), meter.take()

    first, second = virtual_clock.run(main())
    # (1*10 + 2*10 + 1*20) / 40 requests; (100*10 + 150*10 + 50*20) / 40 tokens
    assert first == {"engine_requests_mean": 1.25, "engine_context_tokens_mean": 87.5}
    assert second == {"engine_requests_mean": 0.0, "engine_context_tokens_mean": 0.0}   # nothing since
    # The prompt plus half of max_new_tokens per request, single or batched.
    assert _context_tokens({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 10}}) == (1, 8)
    assert _context_tokens({"input_ids": [[1, 2], [3, 4]], "sampling_params": {"max_new_tokens": 4}}) == (2, 8)


@pytest.mark.e2e
def test_the_command_provider_starts_reports_and_stops_an_engine(tmp_path):
    """engine.autoscale.provider = 'command' with a real process: the command prints the engine's
    URL and keeps serving; the provider waits for /health, and stops it with stop_command and by
    terminating the command's process. A command that fails first is reported with its exit."""
    from tandem.autoscale.providers import CommandProvider
    from tandem.supervisor import ChildFailed, Supervisor
    from tandem.paths import PROJECT_ROOT
    from tandem.ports import free_port

    site = tmp_path / "site"
    site.mkdir()
    (site / "health").write_text("ok")   # GET /health -> 200 from a static file server
    port = free_port()
    stopped = tmp_path / "stopped.txt"
    cfg = load_config(["--engine.autoscale.enabled", "true", "--engine.autoscale.provider", "command",
                       "--engine.autoscale.ready_timeout_s", "30", "--engine.autoscale.command",
                       f"echo starting {{name}}; echo TANDEM_ENGINE_URL=http://127.0.0.1:{port}; "
                       f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1 --directory {site}",
                       "--engine.autoscale.stop_command", f"echo {{name}} {{url}} >> {stopped}"])
    sup = Supervisor(tmp_path / "run", PROJECT_ROOT)

    async def main():
        provider = CommandProvider(cfg, sup)
        url = await provider.start("engine1")
        assert url == f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{url}/health")).status_code == 200
        child = sup.children["engine1-provider"]
        await provider.stop("engine1", url)
        assert stopped.read_text().split() == ["engine1", url] and not child.alive
        assert "starting engine1" in child.log_path.read_text()

        failing = CommandProvider(load_config(["--engine.autoscale.enabled", "true",
                                               "--engine.autoscale.provider", "command",
                                               "--engine.autoscale.command", "echo no capacity; exit 3"]), sup)
        with pytest.raises(ChildFailed, match="exited with 3 before printing TANDEM_ENGINE_URL"):
            await failing.start("engine2")
    try:
        asyncio.run(main())
    finally:
        sup.shutdown(1.0)


class _Fleet:
    """The fleet's edge as the autoscaler sees it: engines by name, loads, join and leave."""

    def __init__(self, join_fails: bool):
        self.engines = {"engine0": "http://e0"}
        self.join_fails = join_fails

    async def loads(self):
        return {}

    async def join(self, name, url):
        if self.join_fails:
            raise RuntimeError("weights would not load")
        self.engines[name] = url
        return 1, 1


class _Provider:
    def __init__(self, starts: bool):
        self.starts, self.stopped = starts, []

    async def start(self, name):
        if not self.starts:
            from tandem.supervisor import ChildFailed
            raise ChildFailed("no capacity in this region")
        return f"http://{name}"

    async def stop(self, name, url):
        self.stopped.append((name, url))


class _Grow:
    def decide(self, signals):
        from tandem.autoscale import Decision
        return Decision(2, "grow")


@pytest.mark.parametrize("starts", [False, True])
def test_an_engine_that_cannot_start_or_join_is_logged_stopped_and_the_run_goes_on(tmp_path, starts):
    from tandem.autoscale.controller import Autoscaler

    cfg = load_config(["--engine.autoscale.enabled", "true", "--engine.autoscale.max", "2"])
    fleet, provider = _Fleet(join_fails=starts), _Provider(starts)
    row = {"step_time": 10.0, "rollout_time": 8.0, "trainer_wait_time": 2.0, "trainer_idle_ratio": 0.2,
           "gen_tokens_per_s": 1.0}

    async def main():
        scaler = Autoscaler(cfg, fleet, provider, tmp_path, policy=_Grow())
        first = await scaler.after_step({**row, "step": 2})  # step 1 is async mode's warm-up
        await scaler.change
        second = await scaler.after_step({**row, "step": 3})   # no exception: the run goes on
        await scaler.close()
        return first, second

    first, second = asyncio.run(main())
    assert first["engines"] == second["engines"] == 1 and second["engines_alive"] == 1
    events = [json.loads(line) for line in (tmp_path / "autoscale.jsonl").read_text().splitlines()]
    failed = [e for e in events if e.get("event") == "failed"]
    assert len(failed) == 1 and failed[0]["engine"] == "engine1"
    assert ("no capacity in this region" if not starts else "weights would not load") in failed[0]["error"]
    # Started but not joined: stopped, not left running outside the router.
    assert provider.stopped == ([("engine1", "http://engine1")] if starts else [])
