"""A real `train.py` run whose engines are scripted policies, half of them forging their reward.

    python -m tests._forging_run launch <train.py arguments>     # the real launcher
    python -m tests._forging_run engine --port P                  # one scripted engine (started by the above)

Only the engine processes are fakes (the edge): each is tests/_fakes.ScriptedEngine on a real
loopback port, speaking SGLang's /generate and weight-sync API. Everything else is the
launcher's own: sglang-router, the trainer process, the agent loop, the sandboxes, the grader.

The policy: on tasks whose bundled index is odd it types the task's real fix; on even ones
it forges, planting a tests/__init__.py that rewrites pytest's reports so every test
"passes" (issue 10's forgery 2), then submits.
"""

from __future__ import annotations

import argparse
import sys
import threading


def policy(prompt: str, turn: int) -> str:
    from tests._swe import PATCH_REPORTS_CODE, SENTINEL, bash, bundled_rows, fix_command, write_file

    if turn >= 2:
        return bash(f"echo {SENTINEL}", "Done.")
    row = next(r for r in bundled_rows() if r["problem_statement"].strip()[:200] in prompt)
    if row["_index"] % 2:
        return bash(fix_command(row), "Fix the bug.")
    return bash(write_file("tests/__init__.py", PATCH_REPORTS_CODE), "Make the tests pass.")


def serve_engine(port: int) -> None:
    from tests._fakes import ScriptedEngine
    from tests._swe import tiny_tokenizer

    with ScriptedEngine(tiny_tokenizer(), policy, port=port):
        threading.Event().wait()  # until the launcher's supervisor stops this process


def launch(argv: list[str]) -> int:
    from tandem.orchestrator import cluster
    from tandem.orchestrator.launcher import main

    def scripted_engine(cfg, name, port, run_config, model_path):
        return [sys.executable, "-m", "tests._forging_run", "engine", "--port", str(port)]

    cluster.engine_command = scripted_engine
    return main(argv)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "launch":
        sys.exit(launch(sys.argv[2:]))
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["engine"])
    parser.add_argument("--port", type=int, required=True)
    serve_engine(parser.parse_args().port)
