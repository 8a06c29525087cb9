"""Fakes at the edges for the coding-agent tests: a scripted SGLang engine and the real router.

`ScriptedEngine` is an HTTP server on a real loopback socket that speaks SGLang's API as
sglang-router 0.3.2 needs it (GET /health, /get_server_info, /get_model_info; POST
/generate with input_ids) and answers /generate with a scripted reply: a `policy`
function of (prompt text, turn number) returns the assistant's text, which is encoded with
the tiny byte tokenizer and returned as output_ids (+ eos when it "stops"), with
per-token logprobs, finish_reason, weight_version, in SGLang's response format. Replies
longer than max_new_tokens are cut and finish with "length", as a real engine would.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import httpx

from tandem.ports import free_port

REPO = Path(__file__).resolve().parents[1]

Policy = Callable[[str, int], str]
"""(decoded prompt so far, 1-based turn number) -> the assistant's reply text."""


def fake_logprob(token_id: int, position: int) -> float:
    """A deterministic, position-dependent value, so misaligned logprobs are caught."""
    return -round(0.01 * ((token_id * 7 + position * 13) % 97 + 1), 4)


def expected_logprobs(segments: list[tuple[list[int], bool]], start: int) -> list[float]:
    """A trajectory's rollout logprobs from segments (ids, model-generated?) starting at position
    `start`: fake_logprob at each model token's absolute position, 0.0 for every other token."""
    out, pos = [], start
    for ids, is_model in segments:
        out += [fake_logprob(t, pos + k) if is_model else 0.0 for k, t in enumerate(ids)]
        pos += len(ids)
    return out


class ScriptedEngine:
    CONTROL = ("/pause_generation", "/continue_generation", "/flush_cache", "/abort_request")
    """SGLang's control endpoints the launcher calls directly (acknowledged; a script has no KV cache)."""

    def __init__(self, tokenizer, policy: Policy, weight_version: int = 0, port: int = 0):
        self.tok = tokenizer
        self.policy = policy
        self.weight_version = weight_version
        self.requests: list[dict] = []
        self.control: list[tuple[str, dict]] = []
        """Control-plane calls received, in order: (path, body)."""
        self.lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, code: int, payload) -> None:
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/health":
                    self._send(200, {})
                elif self.path == "/get_server_info":
                    self._send(200, {"model_path": "tiny", "max_total_num_tokens": 65536, "version": "fake"})
                elif self.path == "/get_model_info":
                    self._send(200, {"model_path": "tiny", "tokenizer_path": "tiny", "is_generation": True})
                elif self.path == "/v1/loads":  # SGLang 0.5.23's load report
                    self._send(200, {"loads": [{"num_running_reqs": 0, "num_waiting_reqs": 0}]})
                else:
                    self._send(404, {"error": self.path})

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                body["_headers"] = {k.lower(): v for k, v in self.headers.items()}
                if self.path != "/generate":
                    with engine.lock:
                        engine.control.append((self.path, {k: v for k, v in body.items() if k != "_headers"}))
                if self.path == "/update_weights_from_disk":  # SGLang's answer; the script ignores weights
                    engine.weight_version = int(body.get("weight_version") or engine.weight_version)
                    self._send(200, {"success": True, "message": "ok", "num_paused_requests": 0})
                elif self.path in engine.CONTROL:
                    self._send(200, {"success": True})
                elif self.path == "/generate":
                    self._send(200, engine.generate(body))
                else:
                    self._send(404, {"error": self.path})

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def generate(self, body: dict) -> dict | list[dict]:
        if body["input_ids"] and isinstance(body["input_ids"][0], list):  # SGLang's batch form: one answer each
            batch = len(body["input_ids"])
            return [self.generate({**body, "input_ids": ids, "_batch": batch}) for ids in body["input_ids"]]
        ids = [int(i) for i in body["input_ids"]]
        params = body.get("sampling_params") or {}
        prompt = self.tok.decode(ids, skip_special_tokens=False)
        turn = prompt.count("<|im_start|>assistant")
        reply = self.policy(prompt, turn)
        out = list(self.tok.encode(reply, add_special_tokens=False)) + [self.tok.eos_token_id]
        finish = {"type": "stop", "matched": self.tok.eos_token_id}
        max_new = int(params.get("max_new_tokens", 1 << 30))
        if len(out) > max_new:
            out = out[:max_new]
            finish = {"type": "length", "length": max_new}
        with self.lock:
            self.requests.append({"input_ids": ids, "sampling_params": params, "turn": turn,
                                  "priority": body.get("priority"), "batch": body.get("_batch", 1),
                                  "routing_key": (body.get("_headers") or {}).get("x-smg-routing-key")})
        return {
            "text": self.tok.decode(out, skip_special_tokens=True),
            "output_ids": out,
            "meta_info": {
                "id": f"req-{len(self.requests)}",
                "finish_reason": finish,
                "prompt_tokens": len(ids),
                "completion_tokens": len(out),
                "cached_tokens": 0,
                "output_token_logprobs": [[fake_logprob(t, len(ids) + k), t, None] for k, t in enumerate(out)],
                "weight_version": str(self.weight_version),
                "e2e_latency": 0.001,
            },
        }

    def __enter__(self) -> "ScriptedEngine":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class Router:
    """A real `sglang_router.launch_router` process, started with tandem's own router command."""

    def __init__(self, worker_url: str | list[str], log_path: Path, cfg=None):
        from tandem.orchestrator.cluster import router_command
        from tandem.config import TandemConfig

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        urls = [worker_url] if isinstance(worker_url, str) else list(worker_url)
        self.proc = subprocess.Popen(router_command(cfg or TandemConfig(), self.port, urls, free_port()),
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO)

    def wait_routing(self, probe_ids: list[int], timeout_s: float = 60) -> None:
        """The router answers /health before the worker is registered; wait for a routed /generate."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("sglang-router exited:\n" + self.log_path.read_text()[-3000:])
            try:
                r = httpx.post(self.url + "/generate", json={"input_ids": probe_ids,
                                                              "sampling_params": {"max_new_tokens": 1}}, timeout=5)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("sglang-router never routed /generate:\n" + self.log_path.read_text()[-3000:])
            time.sleep(0.2)

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)
        self._log.close()


def stop_process(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM, then SIGKILL after grace_s: a test's server never outlives it."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
