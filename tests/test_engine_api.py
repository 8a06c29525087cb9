"""The embedded engine against the SGLang API conformance suite (tests/engine_conformance.py):
directly, through a real sglang-router, and (with $TANDEM_SGLANG_URL) a real SGLang server,
plus embedded-only checks: startup errors, the thread-count default, SamplingParams parsing, and
the scheduler's waiting-queue order (in process)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine_conformance import *  # noqa: F401,F403  (fixtures and conformance tests)
from engine_conformance import ROOT, core_generate, wait_load, write_run_config

ENGINE_BACKEND = "embedded"


def test_bad_model_path_exits_fast_with_one_clear_line(tmp_path: Path) -> None:
    conf = write_run_config(tmp_path / "engine.json", "embedded")
    import json

    tree = json.loads(conf.read_text())
    missing = str(tmp_path / "no_such_model")
    tree["model"]["path"] = missing
    conf.write_text(json.dumps(tree))
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "tandem.engine", "--run-config", str(conf), "--port", "1",
                        "--name", "bad"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert p.returncode != 0
    errors = [line for line in p.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and missing in errors[0], p.stderr
    assert time.time() - t0 < 60


def test_non_loopback_host_refused(tmp_path: Path) -> None:
    conf = write_run_config(tmp_path / "engine.json", "embedded")
    p = subprocess.run([sys.executable, "-m", "tandem.engine", "--run-config", str(conf), "--port", "1",
                        "--host", "0.0.0.0"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode != 0 and "loopback" in p.stderr


def test_sampling_params_parsing() -> None:
    from tandem.engine.core import InvalidRequest, SamplingParams
    from tandem.engine.sampling_params import ContractError

    p = SamplingParams.from_dict({"temperature": 0, "stop": "x", "stop_token_ids": [3], "top_k": 5, "frequency_penalty": 0,
                                  "max_new_tokens": 7, "sampling_seed": 3, "stream_interval": 2, "top_p": None})
    assert p.greedy and p.stop == ["x"] and p.stop_token_ids == [3] and p.max_new_tokens == 7 and p.seed == 3
    assert SamplingParams.from_dict(None).max_new_tokens == 128
    for bad in ({"top_k": 0}, {"min_p": 2}, {"n": 2}, {"stop_token_ids": [999]}, {"frequency_penalty": 0.5},
                {"regex": "a+"}, {"stop_regex": "a+"}):
        with pytest.raises(InvalidRequest) as err:
            SamplingParams.from_dict(bad, vocab_size=259)
        assert not isinstance(err.value, ContractError), bad  # a value SGLang's contract takes, then refuses
    # SGLang 0.5.23's JSON contract: an unknown field, or a value of the wrong JSON type.
    for bad in ({"unknown_field": 1}, {"seed": 1}, {"temperature": "hot"}, {"temperature": True},
                {"max_new_tokens": 7.0}, {"ignore_eos": 1}, {"stop": [1]}, {"stop_token_ids": 3}):
        with pytest.raises(ContractError):
            SamplingParams.from_dict(bad, vocab_size=259)


def test_default_torch_threads_leave_room() -> None:
    from tandem.engine.__main__ import default_torch_threads

    assert default_torch_threads(1) >= 1
    assert default_torch_threads(10 ** 6) == 1


def test_waiting_requests_are_admitted_by_priority_when_enabled(tmp_path: Path) -> None:
    """The embedded scheduler with one running slot: a long request holds it while six more queue
    behind it, one at a time so their arrival order is known; then it is aborted and the six run
    one after another. With priority scheduling they run by `priority`, larger first (SGLang's
    default; none counts as 0), in arrival order within a priority; without it, in arrival order."""
    from tandem.config import ENGINE_VIEW, read_view
    from tandem.engine.embedded import EmbeddedCore
    from tandem.model_source import resolve_model_path

    model_path = resolve_model_path(read_view(write_run_config(tmp_path / "engine.json", "embedded"), ENGINE_VIEW))
    arrivals = [("a", None), ("b", 2), ("c", 0), ("d", 5), ("e", 2), ("f", -1)]

    async def order(by_priority: bool) -> list[str]:
        core = EmbeddedCore.load(model_path, max_running_requests=1, priority_scheduling=by_priority)
        await core.start()
        done: list[str] = []

        async def one(name: str, priority: int | None) -> None:
            await core_generate(core, [65], priority=priority, max_new_tokens=2, ignore_eos=True)
            done.append(name)

        try:
            hold = asyncio.create_task(core_generate(core, [65], rid="hold", max_new_tokens=4000, ignore_eos=True))
            await wait_load(core, 1, 0)
            queued = []
            for i, (name, priority) in enumerate(arrivals):
                queued.append(asyncio.create_task(one(name, priority)))
                await wait_load(core, 1, i + 1)
            assert await core.abort("hold") == 1, "the long request ended before the others queued behind it"
            await asyncio.gather(*queued)
            assert (await hold).finish_reason.type == "abort"
        finally:
            await core.shutdown()
        return done

    assert asyncio.run(order(True)) == ["d", "b", "e", "a", "c", "f"]
    assert asyncio.run(order(False)) == ["a", "b", "c", "d", "e", "f"]


def test_an_idle_engine_prefills_a_burst_together(tmp_path: Path) -> None:
    """engine.embedded.admission_window_ms: requests that reach an idle engine a millisecond apart (a step's
    groups) are prefilled as one batch, so the batch decodes without padding; with no window a
    request is prefilled as it arrives and the later ones join the running batch. The answers are
    the same either way. No timing premise: the window (0.5 s) is far above the 1 ms gaps, and the
    arm without it waits for the first prefill before sending the rest (on a loaded machine the
    engine thread could otherwise meet all four at once)."""
    from tandem.config import ENGINE_VIEW, read_view
    from tandem.engine.embedded import EmbeddedCore
    from tandem.model_source import resolve_model_path

    model_path = resolve_model_path(read_view(write_run_config(tmp_path / "engine.json", "embedded"), ENGINE_VIEW))

    async def burst(window_s: float) -> tuple[int, list[list[int]]]:
        core = EmbeddedCore.load(model_path, admission_window_s=window_s)
        await core.start()
        stats = core.engine_backend.scheduler.stats
        try:
            tasks = []
            for i in range(4):
                tasks.append(asyncio.create_task(core_generate(core, [65 + i], max_new_tokens=8, temperature=0,
                                                               ignore_eos=True)))
                await asyncio.sleep(0.001)
                if window_s == 0 and i == 0:  # the first one prefilled before the rest are sent (at most 60 s)
                    for _ in range(6000):
                        if stats["prefill_batches"]:
                            break
                        await asyncio.sleep(0.01)
            outs = await asyncio.gather(*tasks)
            return stats["prefill_batches"], [r.output_ids for r in outs]
        finally:
            await core.shutdown()

    together, answers = asyncio.run(burst(0.5))
    apart, answers_apart = asyncio.run(burst(0.0))
    assert together == 1 and apart > 1
    assert answers == answers_apart
