"""Where a run starts: every random stream a checkpoint saves is restored on resume.

The data cursor and the trainer's torch RNG are covered by the crash-chain test
(tests/test_faults.py); this file covers the orchestrator's Python `random` stream, which
retry jitter and rollout plug-ins draw from.
"""

from __future__ import annotations

import json
import random

from tandem import checkpoint
from tandem.config import TandemConfig
from tandem.orchestrator import run_state


def draws(n: int = 5) -> list[float]:
    return [random.random() for _ in range(n)]


def checkpoint_at(run_dir, step: int) -> None:
    """A complete checkpoint of `step`, as the launcher finalizes one (the trainer's part is a stand-in)."""
    tmp = checkpoint.tmp_dir(run_dir, step)
    tmp.mkdir(parents=True)
    (tmp / "trainer_rank000.pt").write_bytes(b"trainer part")
    state = run_state.orchestrator_state(step, step, {"epoch": 0, "position": step})
    checkpoint.finalize(run_dir, step, state, keep_last=2)


def test_a_resumed_run_draws_what_the_uninterrupted_run_drew(tmp_path):
    cfg = TandemConfig()
    cfg.run.seed, cfg.run.steps = 7, 10
    run = tmp_path / "run"
    run_state.fresh(run, cfg)
    first = draws()
    checkpoint_at(run, 2)
    uninterrupted = draws()

    random.seed(12345)  # the crashed process is gone; a new one starts from another state
    start = run_state.resume(run, cfg)
    assert start.step == 2
    assert draws() == uninterrupted

    run_state.fresh(tmp_path / "again", cfg)  # a fresh run is seeded by run.seed
    assert draws() == first


def test_a_checkpoint_saved_before_the_rng_was_recorded_still_resumes(tmp_path):
    cfg = TandemConfig()
    run = tmp_path / "run"
    run_state.fresh(run, cfg)
    checkpoint_at(run, 1)
    saved = checkpoint.latest(run) / "orchestrator.json"
    state = json.loads(saved.read_text())
    del state["python_rng"]
    saved.write_text(json.dumps(state))
    assert run_state.resume(run, cfg).step == 1


def test_resume_drops_what_the_crashed_run_wrote_after_its_checkpoint(tmp_path):
    """Checkpoint 2 (steps numbered from 1): rows 1-2 stay, rows 3-4 go; so do the step files and
    weight versions past it, so the resumed run numbers and trains steps 3, 4 afresh."""
    cfg = TandemConfig()
    run = tmp_path / "run"
    run_state.fresh(run, cfg)
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3, 4)))
    for kind in ("rollouts", "trainer"):
        (run / kind).mkdir()
        for s in (1, 2, 3, 4):
            (run / kind / f"step_{s:06d}.json").write_text("{}")
    for v in (1, 2, 3, 4):
        (run / "weights" / f"step_{v:06d}").mkdir(parents=True)
    checkpoint_at(run, 2)
    start = run_state.resume(run, cfg)
    assert (start.step, start.weight_version) == (2, 2)
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    for kind in ("rollouts", "trainer"):
        assert sorted(p.name for p in (run / kind).iterdir()) == ["step_000001.json", "step_000002.json"]
    assert sorted(p.name for p in (run / "weights").iterdir()) == ["step_000001", "step_000002"]
