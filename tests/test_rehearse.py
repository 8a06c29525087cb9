"""--rehearse: the node's own config, run on this machine with only what cannot run here swapped.

The example node configs are rehearsed end to end through train.py: the Megatron trainer on CPU
gloo ranks at the configured TP, embedded engines behind the real router, the real loop, weight
export and reload; after every sync each engine logprob must equal the published weights' within
REHEARSAL_TOL (recomputed with plain transformers).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.config import ConfigError, load_config
from tandem.lab.rehearse import (NOT_REHEARSABLE, REHEARSAL_TOL, _memory_features, _unverified, _what_is_real,
                                  rehearsal_config)

ROOT = Path(__file__).resolve().parents[1]


def swaps_of(config: str, *overrides: str) -> tuple:
    r = rehearsal_config(load_config(["--config", str(ROOT / config), *overrides]))
    return r, {s.key: (s.node, s.here) for s in r.swaps}


def test_the_stand_in_keeps_the_family_and_shards_at_the_configured_tp():
    r, swaps = swaps_of("configs/node_qwen3_14b.toml")  # 40 heads / 8 KV heads, untied, TP 4
    tiny = r.config.model.tiny
    assert r.config.model.path == "tiny" and swaps["model.path"] == ("Qwen/Qwen3-14B", "tiny")
    assert (tiny.num_heads // tiny.num_kv_heads, tiny.num_kv_heads, tiny.tie_word_embeddings) == (5, 4, False)
    assert tiny.intermediate_size % 4 == 0
    r4, _ = swaps_of("configs/node_qwen3_4b.toml")  # 32 / 8, tied
    assert (r4.config.model.tiny.num_heads // r4.config.model.tiny.num_kv_heads,
            r4.config.model.tiny.tie_word_embeddings) == (4, True)


def test_a_config_of_the_tiny_model_rehearses_with_it_and_asks_no_hub():
    """configs/coding_agent.toml runs the tiny model: its rehearsal keeps it (no swap of the model, no
    hub lookup of a model named 'tiny', which had retried for ~25 s and then refused the rehearsal)."""
    r, swaps = swaps_of("configs/coding_agent.toml", "--model.tiny.num_layers", "3")
    assert r.config.model.path == "tiny" and r.config.model.tiny == r.node.model.tiny
    assert r.config.model.tiny.num_layers == 3 and not [k for k in swaps if k.startswith("model.")]
    # its report's lists read a torch trainer's config (which has no [trainer.megatron] table)
    said = "\n".join(_what_is_real(r.config) + _memory_features(r.config) + _unverified(r.node))
    assert "environment tandem.envs.coding:CodingEnv" in said and "the real model's weights" not in said


def test_what_runs_here_and_what_is_reported_as_not_rehearsable():
    r, swaps = swaps_of("configs/node_qwen3_14b.toml", "--trainer.megatron.pipeline_parallel", "2",
                        "--trainer.megatron.tensor_parallel", "2")
    cfg, node = r.config, r.node
    # kept: the layout's TP, the engine count, the router, sampling, partial rollouts, the mode, the environment
    assert (cfg.trainer.backend, cfg.trainer.gpus, cfg.trainer.megatron.tensor_parallel) == ("megatron", 4, 2)
    assert cfg.engine.count == node.engine.count and cfg.router == node.router
    assert (cfg.rollout.sampling.temperature, cfg.rollout.staleness.partial_rollout, cfg.run.mode) == (
        node.rollout.sampling.temperature, node.rollout.staleness.partial_rollout, node.run.mode)
    assert cfg.environment.name == node.environment.name
    # swapped: SGLang -> embedded, GPUs -> CPU, bf16 -> fp32; recompute and PP reported, not hidden
    assert swaps["engine.backend"] == ("sglang", "embedded") and swaps["trainer.device"] == ("auto", "cpu")
    assert swaps["trainer.megatron.pipeline_parallel"] == (2, 1) and swaps["trainer.megatron.recompute"] == (True, False)
    not_rehearsable = {s.key for s in r.swaps if s.why.startswith(NOT_REHEARSABLE)}
    assert not_rehearsable == {"trainer.megatron.pipeline_parallel", "trainer.megatron.recompute"}
    assert cfg.model.tiny.num_layers == 4  # two per configured pipeline stage
    # the node's dataset is not here: the project's own coding tasks stand in, and that is said
    assert swaps["data.path"][1].endswith("data/swe_tasks/tasks.jsonl")


def test_what_cannot_be_rehearsed_fails_once_naming_the_cause(tmp_path):
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 32,
                                                   "num_key_value_heads": 8, "hidden_size": 4096}))
    with pytest.raises(ConfigError, match="'llama' model; a rehearsal has a tiny stand-in for qwen3"):
        swaps_of("configs/node_qwen3_4b.toml", "--model.path", str(llama))
    with pytest.raises(ConfigError, match="do not shard over trainer.megatron.tensor_parallel = 3"):
        swaps_of("configs/node_qwen3_4b.toml", "--trainer.megatron.tensor_parallel", "3", "--trainer.gpus", "3")
    with pytest.raises(ConfigError, match="data.path 'nowhere.jsonl' does not exist here"):
        swaps_of("configs/node_qwen3_4b.toml", "--environment.name", "tandem.envs.counter:Counter",
                 "--data.path", "nowhere.jsonl")


def test_the_memory_features_stay_on_at_rehearsal_sizes():
    r, swaps = swaps_of("configs/node_qwen3_14b.toml")
    tc, mp = r.config.trainer, r.config.trainer.megatron
    # kept: the offloaded optimizer as configured (megatron-core's HybridDeviceOptimizer runs on the CPU ranks)
    assert (mp.optimizer_cpu_offload, mp.optimizer_offload_fraction, mp.precision_aware_optimizer) == (True, 0.5, True)
    # resized so that the rehearsal's short samples make several chunks and packed micro-batches
    assert swaps["trainer.logprob_chunk_tokens"] == (4096, 64)
    assert swaps["trainer.max_tokens_per_micro_batch"] == (32768, 1024)
    assert any("HybridDeviceOptimizer" in item for item in r.real) and any("chunked loss head" in item for item in r.real)
    off, off_swaps = swaps_of("configs/node_qwen3_14b.toml", "--trainer.logprob_chunk_tokens", "0")
    assert off.config.trainer.logprob_chunk_tokens == 0 and "trainer.logprob_chunk_tokens" not in off_swaps


# The 4B run also has the node's plan fail: its memory features off, recompute off (137 GiB per rank at TP 4).
NOT_FITTING = ["--trainer.logprob_chunk_tokens", "0", "--trainer.max_tokens_per_micro_batch", "0",
               "--trainer.megatron.recompute", "false"]


@pytest.mark.parametrize("config,mode,extra", [("configs/node_qwen3_14b.toml", "sync", []),
                                               ("configs/node_qwen3_4b.toml", "async", NOT_FITTING)],
                         ids=["14b-sync-fits", "4b-async-does-not-fit"])
def test_rehearsal_of_the_example_node_configs(tmp_path, config, mode, extra):
    run = tmp_path / "node"
    done = subprocess.run([sys.executable, "train.py", "--config", config, "--rehearse", "--run.mode", mode,
                           "--run.run_dir", str(run), "--logging.live", "off", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    fits = not extra
    assert done.returncode == (0 if fits else 1), done.stdout[-4000:] + done.stderr[-4000:]
    out = done.stdout
    assert "verdict:" in out and "tandem plan:" in out  # the plan is printed first
    report = (tmp_path / "node-rehearsal" / "rehearsal.md").read_text()
    # the plan is in the report, and a plan that does not fit is the run's verdict: exit 1, said last
    plan = report.split("## Plan on the node's GPUs", 1)[1].split("## Substituted", 1)[0]
    assert "tandem plan:" in plan and ("verdict: FITS" if fits else "verdict: DOES NOT FIT") in plan
    last = out.strip().splitlines()[-1]
    assert last.startswith("verdict: DOES NOT FIT") if not fits else last == "Verdict: every sync agreed."
    for section in ("## Substituted", "## Ran for real", "## Unverified", "## Logprob agreement"):
        assert section in report and section in out
    rows = [json.loads(line) for line in (tmp_path / "node-rehearsal" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["samples"] > 0 for r in rows)
    section = report.split("## Logprob agreement", 1)[1]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
             if line.startswith("| ") and not line.startswith("| step")]
    assert cells and all(float(c[4]) <= REHEARSAL_TOL for c in cells)
    assert sum(int(c[2]) for c in cells if c[0].isdigit()) > 0  # the trained samples' model tokens were replayed
    probes = [c for c in cells if c[0].startswith("after the run")]  # every engine, on the last version
    assert len(probes) == 3 and {int(c[1]) for c in probes} == {3}
    assert "Verdict: every sync agreed." in report


def test_the_report_shows_the_real_models_shape_on_the_node():
    """The node runs Qwen3-14B, not its model.tiny defaults: "on the node" says 40 heads, 8 KV heads, 40 layers."""
    _, swaps = swaps_of("configs/node_qwen3_14b.toml")
    assert swaps["model.tiny.num_heads"][0] == 40 and swaps["model.tiny.num_kv_heads"][0] == 8
    assert swaps["model.tiny.num_layers"][0] == 40 and swaps["model.tiny.hidden_size"][0] == 5120
