"""Bring your own agent: outside harnesses that speak the OpenAI API, trained with their tokens captured exactly.

- capture.py     a recorded call, and how each request's prompt ids are built (extending, or rendered whole)
- endpoint.py    the per-trajectory OpenAI-compatible endpoint in the orchestrator (/v1/chat/completions, ...)
- trajectory.py  recorded calls -> segments with exact loss masks; prefix breaks counted
- run.py         running a harness: an async function in process, or a program per trajectory
- rollout.py     HarnessRollout, the rollout plug-in behind rollout.harness / rollout.harness_command
"""

from tandem.harness.capture import CapturedCall
from tandem.harness.endpoint import HarnessEndpoint
from tandem.harness.rollout import HarnessRollout
from tandem.harness.run import HarnessFailed
from tandem.harness.trajectory import Rebuilt, rebuild

__all__ = ["CapturedCall", "HarnessEndpoint", "HarnessFailed", "HarnessRollout", "Rebuilt", "rebuild"]
