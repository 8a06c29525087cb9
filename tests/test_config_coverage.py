"""Every config key is set to a non-default value by some test, or listed below with its reason.

How a key counts as set is tests/_config_keys.py's docstring (a static reading of tests/: command-line
options, dict literals from the root, section models built with keywords, attribute assignments, TOML
text, and the **kwargs of helpers that forward into one of these). A new key fails this test until a
test sets it off its default (the cheap way: build the config with it set and check that the code
reading it sees the value, as tests/test_key_effects.py does), or until it is listed in EXCEPTIONS with
a one-line reason a reviewer can judge. Measured for issue 45: 144 of 191 keys before its tests,
176 of 191 after, the other 15 listed.
"""

from __future__ import annotations

from pathlib import Path

from _config_keys import coverage

TESTS = Path(__file__).resolve().parent

EXCEPTIONS = {
    # GPU or Transformer Engine only
    "trainer.megatron.overlap_cpu_optimizer_d2h_h2d":
        "megatron-core's HybridDeviceOptimizer overlaps its copies on CUDA streams; on a CPU there is nothing to "
        "overlap (scripts/gpu_check.py runs the offloaded optimizer)",
    # needs what a test here cannot have
    "model.trust_remote_code":
        "passed straight to transformers' from_pretrained; honouring it needs a model whose code lives on the hub",
    "engine.sim.profile": "one engine profile ships (profiles/engine/qwen3_14b_h100.toml); the sim runs on it",
    "engine.autoscale.latency_profile":
        "the same single profile; without this key the autoscaler already reads it through engine.sim.profile",
    # a wait's upper bound: a test of it would wait for it (no test may have a wall-clock premise)
    "router.startup_timeout_s": "upper bound of a wait for the router to come up",
    "trainer.startup_timeout_s": "upper bound of a wait for the trainer to load",
    "sync.reload_timeout_s": "upper bound of a wait for an engine to load a weight version",
    "sync.trainer_timeout_s": "upper bound of a wait for the trainer's step result",
    "logging.queue_sample_interval_s": "a sampling period: its effect is rows per second of wall-clock time",
    # the coding environment's sandbox: read when its sandbox pool starts (get_runtime), which
    # probes and starts sandboxes; the sandbox tests pass these to SandboxPool / Isolation directly
    "environment.args.sandbox.root_dir": "read by get_runtime only (e2e); tests pass the pool's root directly",
    "environment.args.sandbox.test_plugin_autoload": "read by the Grader at start-up (e2e, sandboxes)",
    "environment.args.sandbox.max_output_bytes": "read by SandboxPool.from_config (e2e); tests pass it directly",
    "environment.args.sandbox.base_uid": "read by SandboxPool.from_config (e2e); tests pass it directly",
    "environment.args.sandbox.extra_ro_paths": "read by Isolation.create (probes sandboxes: e2e)",
}
"""Keys no test sets off their default, each with why. Remove an entry once a test sets the key."""


def test_every_config_key_is_set_off_its_default_by_a_test_or_listed_with_a_reason():
    setters = coverage(TESTS)
    untested = sorted(k for k, where in setters.items() if not where and k not in EXCEPTIONS)
    stale = sorted(k for k in EXCEPTIONS if k not in setters)
    now_tested = sorted(f"{k} (set by {', '.join(setters[k])})" for k in EXCEPTIONS if setters.get(k))
    problems = [f"config key {k!r} is never set to a non-default value by any test: test it (e.g. in "
                f"tests/test_key_effects.py) or list it in EXCEPTIONS of tests/test_config_coverage.py with a "
                f"one-line reason" for k in untested]
    problems += [f"EXCEPTIONS lists {k!r}, which is no longer a config key: remove it" for k in stale]
    problems += [f"EXCEPTIONS lists {k}: remove it from the list" for k in now_tested]
    covered = sum(1 for where in setters.values() if where)
    print(f"FIGURE config keys set off their default by a test: {covered} of {len(setters)} "
          f"({len(EXCEPTIONS)} listed as exceptions)")
    assert not problems, "\n".join(problems)


def test_the_reading_sees_each_way_a_test_sets_a_key(tmp_path):
    """The reader itself, on a planted tests/ directory: each form counts, a default value does not."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_planted.py").write_text('''
from tandem.config import LossConfig, build_config, load_config

def helper(tmp, **loss):
    return build_config({"trainer": {"loss": loss}})

def test_forms(cfg, monkeypatch):
    load_config(["--trainer.loss.kl_coef", "0.1", "--steps=3", "--rollout.sampling.top_p", "1.0"])
    build_config({"trainer": {"lr": 0.5}, "sync.keep_last": 7, "run": {"seed": 0}})
    LossConfig(entropy_coef=0.01)
    cfg.trainer.grad_clip = 0.5
    monkeypatch.setattr(cfg.rollout.client, "concurrency", 3)
    helper(None, eps_clip=0.1)
    TOML = """
[checkpoint]
interval = 3
"""
''')
    setters = coverage(tmp_path / "tests")
    set_here = {k for k, where in setters.items() if where}
    assert set_here == {"trainer.loss.kl_coef", "run.steps", "trainer.lr", "sync.keep_last",
                        "trainer.loss.entropy_coef", "trainer.grad_clip", "rollout.client.concurrency",
                        "trainer.loss.eps_clip", "checkpoint.interval"}, set_here
    # rollout.sampling.top_p = 1.0 and run.seed = 0 are the defaults: they test nothing
