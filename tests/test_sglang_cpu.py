"""engine.backend = "sglang" on a CPU machine, for real: the opt-in tier (scripts/sglang_cpu_tier.sh).

With $TANDEM_SGLANG_PYTHON (an interpreter that has SGLang 0.5.23 and sgl-kernel's CPU extension), the real
launcher starts and supervises two real SGLang servers on this CPU (engine.sglang.device = "cpu", tandem's own
launch command), behind the real sglang-router, in async mode with a weight sync every step (partial rollouts
aborted at a sync). Checks: the run
ends, every step trains; each engine is SGLang on the CPU; every sample's engine log-probs are those of the weight
version it claims (a plain HF forward of that published version), so every sync really reached the servers; and
nothing tandem polls is answered 404 (the /get_load that SGLang 0.5.23 no longer serves).
Skipped without $TANDEM_SGLANG_PYTHON: about 10 minutes on two busy cores, and SGLang's 7 GB venv.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from _faults import Launch, batch, metrics
from tandem.lab.rehearse import replayed_logprobs

pytestmark = pytest.mark.skipif(not os.environ.get("TANDEM_SGLANG_PYTHON"), reason=(
    "TANDEM_SGLANG_PYTHON is not set: no SGLang interpreter to launch real servers with "
    "(scripts/sglang_cpu_tier.sh sets one up)"))

STEPS = 3
VERSION_TOL = 1e-3
"""Mean |engine - HF forward| per sample on the same weights (fp32 on both sides; seen ~1e-5)."""


def test_a_run_with_real_sglang_servers_on_the_cpu(tmp_path: Path) -> None:
    run = tmp_path / "run"
    launch = Launch(run, ["--engine.backend", "sglang", "--engine.sglang.device", "cpu", "--engines", "2",
                          "--mode", "async", "--steps", str(STEPS), "--engine.max_total_tokens", "16384",
                          "--engine.startup_timeout_s", "900", "--rollout.prompts_per_step", "2",
                          "--rollout.samples_per_prompt", "4", "--logging.live", "off", "--logging.tensorboard", "false",
                          "--run.keep_rollouts", "all", "--sync.keep_last", str(STEPS + 1),
                          # abort: every sample is generated on one version (under continue a sample that spans
                          # a sync claims its oldest; the continue path is in the conformance suite)
                          "--rollout.staleness.partial_rollout", "abort"])
    assert launch.wait(1800) == 0, launch.stderr[-4000:]
    rows = metrics(run)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    logs = sorted((run / "logs").glob("engine*.log"))
    assert len(logs) == 2
    served = []
    for log in logs:
        text = log.read_text(errors="replace")
        assert "'device': 'cpu'" in text and "The server is fired up and ready to roll!" in text, log
        # The router's HTTP/2 probe ("PRI * HTTP/2.0") is answered 404 too; nothing tandem asks may be.
        assert not [line for line in text.splitlines() if " 404 " in line and "PRI * HTTP/2.0" not in line], log
    for row in rows:
        samples = batch(run, row["step"])["samples"]
        for version in {s["weight_version"] for s in samples}:
            claimed = [s for s in samples if s["weight_version"] == version]
            for s, ref in zip(claimed, replayed_logprobs(run, version, claimed)):
                err = [abs(a - b) for a, b, m in zip(ref, s["rollout_logprobs"], s["loss_mask"]) if m]
                assert sum(err) / len(err) < VERSION_TOL, (row["step"], version, sum(err) / len(err))
            served.append(version)
    assert max(served) >= 1, "no sample came from a synced version"
