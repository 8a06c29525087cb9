"""Guarantees the rest of the suite only ever reached at a default value, or on a path a CPU makes
trivial: each test here fails when its guarantee is broken by one line (scripts/mutants_tests3.py).

- routing replay: an engine record whose first expert is 0 is a record, not "no record";
- `--overwrite`: a user's own directories inside the run dir survive, not only their files;
- preflight, as the launcher runs it: an environment's declared requirements are asked;
- preflight: sync.encoding = "delta" without zstandard is named;
- trainer.loss.tis_clip_high: the truncation bound is the configured one, not the default 2.0.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tandem.config import TandemConfig, build_config


# --------------------------------------------------------------------------- routing replay
def test_an_engine_record_of_expert_zero_is_replayed_not_taken_for_no_record():
    from tandem.trainer.routing_replay import NO_RECORD, RoutingReplay

    routing = RoutingReplay([0], num_layers=1, top_k=2, replay=True)
    # One row of three positions, one MoE layer, top-2: the engine chose expert 0 first at two positions;
    # the last position has no record (e.g. the final token).
    routed = torch.tensor([[[[0, 3]], [[0, 1]], [[NO_RECORD, NO_RECORD]]]], dtype=torch.int32)
    own = torch.tensor([[2, 3], [2, 1], [2, 3]])
    with routing.micro_batch(routed, counting=True):
        chosen = routing.route(0, own)
    assert chosen.tolist() == [[0, 3], [0, 1], [2, 3]]
    metrics = routing.take_metrics()
    assert metrics["routing_recorded_tokens"] == 2.0  # both positions led by expert 0 are records
    assert metrics["routing_agreement"] == 0.0  # and the trainer's own {2, 3} / {1, 2} differ from them


# --------------------------------------------------------------------------- --overwrite
def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def test_overwrite_keeps_the_users_own_directories_inside_the_run_dir(tmp_path):
    from tandem.orchestrator import run_state

    cfg = TandemConfig()
    run = tmp_path / "run"
    run_state.fresh(run, cfg)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "weights" / "v000001").mkdir(parents=True)
    (run / "weights" / "v000001" / "model.safetensors").write_bytes(b"w")
    (run / "data" / "split").mkdir(parents=True)  # the user's own: a dataset, notes, an empty mount point
    (run / "data" / "train.jsonl").write_text('{"prompt": "x"}\n')
    (run / "data" / "split" / "eval.jsonl").write_text('{"prompt": "y"}\n')
    (run / "notes" / "empty").mkdir(parents=True)
    (run / "notes" / "todo.md").write_text("keep")
    mine = {name: _digest(run / name) for name in ("data", "notes")}
    run_state.fresh(run, cfg, overwrite=True)
    assert {name: _digest(run / name) for name in ("data", "notes")} == mine
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "data", "notes"]


# --------------------------------------------------------------------------- preflight
NEEDY_ENV = '''
from tandem.env import Environment


class Needy(Environment):
    @classmethod
    def requirements(cls, cfg):
        return ["environment Needy needs the frobnicator: pip install frobnicator"]

    def reset(self, row):
        return "hello"

    def reward(self):
        return 0.0
'''


def test_the_launchers_preflight_asks_the_environment_what_it_needs(tmp_path, monkeypatch, capsys):
    from tandem.orchestrator import launcher

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPUs, and no nvidia-smi asked
    (tmp_path / "needy.py").write_text(NEEDY_ENV)
    run = tmp_path / "run"
    code = launcher.main(["--environment.name", f"{tmp_path / 'needy.py'}:Needy", "--run-dir", str(run),
                          "--run.cache_dir", str(tmp_path / "cache"), "--logging.live", "off"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "environment Needy needs the frobnicator: pip install frobnicator" in err
    assert not run.exists(), "the run started before preflight refused it"


def test_preflight_names_zstandard_for_delta_weight_sync(monkeypatch):
    from tandem.orchestrator import preflight

    monkeypatch.setattr(preflight, "importable", lambda module: module != "zstandard")
    assert preflight.module_problems(build_config({})) == []  # full checkpoints need nothing more
    [problem] = preflight.module_problems(build_config({"sync": {"encoding": "delta"}}))
    assert "sync.encoding = 'delta' needs zstandard" in problem and problem.endswith("pip install -r requirements.txt")


# --------------------------------------------------------------------------- TIS
def test_tis_clip_high_is_the_configured_bound(monkeypatch):
    from tandem.losses import PolicyLoss

    def loss_at(clip_high: float) -> float:
        cfg = build_config({"trainer": {"loss": {"tis": True, "tis_clip_high": clip_high, "aggregation": "token_mean"}}})
        loss = PolicyLoss.from_config(cfg.trainer.loss)
        logp = torch.zeros(1, 3, requires_grad=True)  # on-policy: ratio 1, nothing clipped by PPO
        batch = SimpleNamespace(mask=torch.ones(1, 3), advantages=torch.ones(1, 3), old_logp=None, ref_logp=None,
                                rollout_logp=torch.tensor([[-1.0, -0.1, 0.5]]))  # TIS weights e, 1.105, 0.607
        value, _ = loss(logp, lambda: torch.zeros(1, 3), batch, num_samples=1, num_tokens=3.0)
        return value.item()

    w = torch.exp(torch.tensor([1.0, 0.1, -0.5]))
    assert loss_at(1.2) == pytest.approx(-(1.2 + w[1] + w[2]).item() / 3, rel=1e-6)
    assert loss_at(2.0) == pytest.approx(-(2.0 + w[1] + w[2]).item() / 3, rel=1e-6)
    assert loss_at(5.0) == pytest.approx(-w.sum().item() / 3, rel=1e-6)  # above e: nothing truncated
