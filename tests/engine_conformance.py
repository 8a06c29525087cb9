"""SGLang HTTP API conformance tests, written once, run against every engine we serve.

A test module opts in with

    ENGINE_BACKEND = "embedded"          # or "sim"
    from engine_conformance import *     # noqa: F401,F403  (fixtures + tests)

and then runs every test below against up to three targets (the `eng` fixture's params):
  direct  - `python -m tandem.engine` as a real subprocess on a free loopback port (tiny model);
  router  - the same engine behind a real sglang-router process (data-plane tests only: the router
            does not forward /update_weights_from_disk, /pause_generation, /continue_generation);
  sglang  - a real SGLang server: the one at $TANDEM_SGLANG_URL (set $TANDEM_SGLANG_MODEL_PATH to its
            model directory to enable the HF-forward checks), else, with $TANDEM_SGLANG_PYTHON, one that
            tandem launches itself on this CPU (scripts/sglang_cpu_tier.sh); skipped when neither is set.
            Real SGLang 0.5.23 is the reference: where tandem's engine and it could answer differently, the
            tests pin SGLang's answer.

Capability gates (`eng.caps`) skip checks a target cannot make: "hf" (same weights available
locally for a reference forward), "deterministic" (greedy decoding is reproducible, so outputs
can be compared across calls), "tandem" (tandem-only observables such as
max_running_batch_seen), "control" (pause / weights / abort endpoints reachable), "release"
(/release_memory_occupation and /resume_memory_occupation: SGLang's need CUDA, and a CPU server exits on
them, so a server at $TANDEM_SGLANG_URL with $TANDEM_SGLANG_DEVICE=cpu and a self-launched one lack it). A module adds
capabilities its backend has with `ENGINE_EXTRA_CAPS = {"deterministic"}`, and serves another tiny
model with `ENGINE_MODEL = {"tiny": {...}}` (the [model] table): "moe" (a mixture-of-experts model,
tests/test_engine_moe.py; a real SGLang server started with --enable-return-routed-experts when
$TANDEM_SGLANG_MOE is set) enables the routed-experts checks.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from tandem.engine_api import LOADS_ROUTE, error_message
from tandem.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
LOGPROB_TOL = 1e-4  # fp32 CPU: batched/left-padded attention vs. one unpadded HF forward
PROMPT = "The quick brown fox"


# --------------------------------------------------------------------------- process helpers
def wait_http(url: str, proc: subprocess.Popen | None, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode} before answering {url}\n{tail}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer {url} within {timeout}s")


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def write_run_config(path: Path, backend: str, model: dict | None = None, **engine: Any) -> Path:
    """The engine's view of a run config (what the launcher writes as run_dir/views/engine.json)."""
    from tandem.config import ENGINE_VIEW, build_config, child_view

    own = {"embedded": {"device": "cpu"}} if backend == "embedded" else {}
    cfg = build_config({"engine": {"backend": backend, **own, **engine}, "model": model or {},
                        "run": {"cache_dir": str(ROOT / ".cache" / "tandem"), "run_dir": str(path.parent)}})
    path.write_text(child_view(cfg, ENGINE_VIEW).model_dump_json())
    return path


@dataclass
class EngineProc:
    url: str
    proc: subprocess.Popen
    model_path: str
    config_path: Path
    log: Path


def start_engine(workdir: Path, backend: str, name: str = "engine0", model: dict | None = None,
                 **engine: Any) -> EngineProc:
    """`python -m tandem.engine` as a real subprocess (1 torch thread: the box has 2 cores)."""
    from tandem.config import ENGINE_VIEW, read_view
    from tandem.model_source import resolve_model_path

    workdir.mkdir(parents=True, exist_ok=True)
    conf = write_run_config(workdir / "engine.json", backend, model, **engine)
    model_path = resolve_model_path(read_view(conf, ENGINE_VIEW))
    port = free_port()
    log = workdir / f"{name}.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_TORCH_THREADS="1")
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "tandem.engine", "--run-config", str(conf), "--port", str(port),
                                 "--name", name], cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc, 300, f"engine {name}", log)  # a loaded 2-core box imports slowly
    except Exception:
        stop_process(proc)
        raise
    return EngineProc(url, proc, model_path, conf, log)


def start_router(worker_url: str, workdir: Path) -> tuple[str, subprocess.Popen]:
    port, prom = free_port(), free_port()
    log = workdir / "router.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
             "--worker-urls", worker_url, "--policy", "round_robin", "--prometheus-host", "127.0.0.1",
             "--prometheus-port", str(prom)], cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc, 60, "sglang-router", log)
        # The router answers /health before the worker is registered; wait for a real generation.
        deadline = time.time() + 60
        while True:
            try:
                r = httpx.post(url + "/generate", json={"text": "a", "sampling_params": {"max_new_tokens": 1}},
                               timeout=10)
                if r.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise RuntimeError("sglang-router never routed a /generate:\n" + log.read_text()[-3000:])
            time.sleep(0.3)
    except Exception:
        stop_process(proc)
        raise
    return url, proc


# --------------------------------------------------------------------------- cores in process
async def core_generate(core: Any, ids: list[int], priority: int | None = None, rid: str | None = None,
                        **sp: Any) -> Any:
    """Run one request through an EngineCore (no HTTP) to its end; returns its GenerateRequest."""
    from tandem.engine.core import SamplingParams

    req = core.make_request(input_ids=ids, sampling=SamplingParams(**sp), return_logprob=True, priority=priority,
                            rid=rid)
    async for _ in core.generate(req):
        pass
    return req


async def wait_load(core: Any, running: int, waiting: int, timeout: float = 30) -> None:
    """Until the core's own queue holds `running` running and `waiting` waiting requests (a state, not a delay)."""
    deadline = time.monotonic() + timeout
    while (core.get_load().num_running_reqs, core.get_load().num_waiting_reqs) != (running, waiting):
        assert time.monotonic() < deadline, (f"wanted {running} running, {waiting} waiting", core.get_load())
        await asyncio.sleep(0.001)


# --------------------------------------------------------------------------- fixtures
@dataclass
class Eng:
    """What a conformance test talks to."""

    target: str                 # direct | router | sglang
    backend: str                # embedded | sim | sglang
    url: str                    # data plane (/generate, /v1/*)
    control_url: str | None     # the engine itself (control plane), None when unreachable
    model_path: str | None      # local weights for the HF reference forward, if any
    caps: set[str] = field(default_factory=set)
    workdir: Path | None = None

    def need(self, *caps: str) -> None:
        missing = [c for c in caps if c not in self.caps]
        if missing:
            pytest.skip(f"{self.target}/{self.backend} lacks {missing}")

    def post(self, path: str, body: dict | None = None, *, control: bool = False, timeout: float = 60) -> httpx.Response:
        base = self.control_url if control else self.url
        assert base is not None
        return httpx.post(base + path, json=body if body is not None else {}, timeout=timeout)

    def get(self, path: str, *, control: bool = False) -> httpx.Response:
        base = self.control_url if control else self.url
        assert base is not None
        return httpx.get(base + path, timeout=30)

    def generate(self, body: dict, **kw: Any) -> dict:
        r = self.post("/generate", body, **kw)
        assert r.status_code == 200, r.text
        return r.json()

    def load(self) -> dict:
        """The engine's load entry in SGLang 0.5.23's /v1/loads answer (one DP rank)."""
        r = self.get(LOADS_ROUTE, control=True)
        assert r.status_code == 200, r.text
        return r.json()["loads"][0]

    def requests_held(self) -> int:
        load = self.load()
        return load["num_running_reqs"] + load["num_waiting_reqs"]


def _backend(request: pytest.FixtureRequest) -> str:
    return getattr(request.module, "ENGINE_BACKEND", "embedded")


@pytest.fixture(scope="module")
def engine_proc(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProc]:
    backend = _backend(request)
    e = start_engine(tmp_path_factory.mktemp(f"engine_{backend}"), backend, max_running_requests=64,
                     model=getattr(request.module, "ENGINE_MODEL", None))
    yield e
    stop_process(e.proc)


@pytest.fixture(scope="module")
def router_url(engine_proc: EngineProc) -> Iterator[str]:
    url, proc = start_router(engine_proc.url, engine_proc.config_path.parent)
    yield url
    stop_process(proc)


@pytest.fixture(scope="module")
def tokenizer(engine_proc: EngineProc) -> Any:
    from tandem.model_source import load_tokenizer

    return load_tokenizer(engine_proc.model_path)


SGLANG_STARTUP_S = 900
"""A real SGLang server's start on a loaded 2-core CPU (tens of seconds when the box is quiet)."""


@pytest.fixture(scope="module")
def sglang_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(url, model path) of a real SGLang server that tandem launches itself, with its own command
    (tandem.engine.sglang_launch, engine.sglang.device = "cpu") and the interpreter $TANDEM_SGLANG_PYTHON: the
    opt-in tier (scripts/sglang_cpu_tier.sh). Only for the tiny dense model: SGLang's CPU build has no MoE."""
    if not os.environ.get("TANDEM_SGLANG_PYTHON"):
        pytest.skip("neither TANDEM_SGLANG_URL nor TANDEM_SGLANG_PYTHON is set (no real SGLang server to compare "
                    "with; scripts/sglang_cpu_tier.sh sets one up)")
    if getattr(request.module, "ENGINE_MODEL", None) is not None or _backend(request) != "embedded":
        pytest.skip("a self-launched SGLang server serves the tiny dense model beside the embedded engine only")
    workdir = tmp_path_factory.mktemp("sglang_server")
    proc, url, model_path = launch_sglang(workdir, "sglang0")
    yield url, model_path
    stop_process(proc)


def launch_sglang(workdir: Path, name: str, **engine: Any) -> tuple[subprocess.Popen, str, str]:
    """A real SGLang server on this CPU, started with tandem's own launch command and environment."""
    from tandem.config import build_config
    from tandem.engine.sglang_launch import sglang_command
    from tandem.model_source import resolve_model_path
    from tandem.placement import plan_placement

    cfg = build_config({"engine": {"backend": "sglang", "count": 1, "max_running_requests": 64,
                                   "max_total_tokens": 16384, "sglang": {"device": "cpu"}, **engine},
                        "run": {"cache_dir": str(ROOT / ".cache" / "tandem")}})
    model_path = resolve_model_path(cfg)
    port = free_port()
    log = workdir / f"{name}.log"
    env = {**os.environ, **plan_placement(cfg, 0).engine_env(0)}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(sglang_command(cfg, port, model_path), cwd=workdir, env=env, stdout=fh,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc, SGLANG_STARTUP_S, f"SGLang server {name}", log)
    except Exception:
        stop_process(proc)
        raise
    return proc, url, model_path


@pytest.fixture(scope="module", params=["direct", "router", "sglang"])
def eng(request: pytest.FixtureRequest) -> Eng:
    backend = _backend(request)
    if request.param == "sglang":
        url = os.environ.get("TANDEM_SGLANG_URL")
        if not url:
            url, mp = request.getfixturevalue("sglang_server")
            return Eng("sglang", "sglang", url, url, mp, {"control", "deterministic", "hf"})
        mp = os.environ.get("TANDEM_SGLANG_MODEL_PATH")
        caps = {"control", "deterministic"} | ({"hf"} if mp else set()) | ({"moe"} if os.environ.get(
            "TANDEM_SGLANG_MOE") else set())
        if os.environ.get("TANDEM_SGLANG_DEVICE") != "cpu":
            caps.add("release")
        return Eng("sglang", "sglang", url.rstrip("/"), url.rstrip("/"), mp, caps)
    e: EngineProc = request.getfixturevalue("engine_proc")
    caps = {"tandem", "control", "release"} | ({"hf", "deterministic"} if backend == "embedded" else set())
    caps |= set(getattr(request.module, "ENGINE_EXTRA_CAPS", ()))
    if request.param == "direct":
        return Eng("direct", backend, e.url, e.url, e.model_path, caps, e.config_path.parent)
    url = request.getfixturevalue("router_url")
    return Eng("router", backend, url, e.url, e.model_path, (caps - {"control"}) | {"routed"},
               e.config_path.parent)


# --------------------------------------------------------------------------- reference forward
_HF: dict[str, Any] = {}


def hf_logprobs(model_path: str, prompt_ids: list[int], output_ids: list[int], temperature: float) -> list[float]:
    """log_softmax(logits / T) of each output token from one plain HF forward (T=0: raw logits)."""
    import torch

    from tandem.model_source import load_causal_lm

    torch.set_num_threads(1)
    key = model_path
    if key not in _HF:
        _HF[key] = load_causal_lm(model_path).eval()
    model = _HF[key]
    ids = torch.tensor([prompt_ids + output_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / scale, dim=-1)
    n = len(prompt_ids)
    return [logp[n - 1 + j, t].item() for j, t in enumerate(output_ids)]


def sse_events(resp: httpx.Response) -> list[Any]:
    """Parse SSE `data: ...` events; [DONE] is returned as the string "[DONE]"."""
    events: list[Any] = []
    for line in resp.iter_lines():
        if not line:
            continue
        assert line.startswith("data: "), f"not an SSE data line: {line!r}"
        payload = line[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def greedy(eng: Eng, n: int, text: str = PROMPT, **sp: Any) -> dict:
    return eng.generate({"text": text, "sampling_params": {"max_new_tokens": n, "temperature": 0,
                                                             "ignore_eos": True, **sp},
                         "return_logprob": True})


# =========================================================================== tests: info
def test_health_and_info(eng: Eng) -> None:
    assert eng.get("/health").status_code == 200
    if "control" not in eng.caps and eng.target != "router":
        return
    base_ok = eng.control_url is not None
    assert base_ok
    info = eng.get("/get_model_info", control=True).json()
    assert info["is_generation"] is True and "model_path" in info and "weight_version" in info
    server = eng.get("/get_server_info", control=True).json()
    assert "weight_version" in server or "internal_states" in server
    if "tandem" in eng.caps:
        assert eng.get("/model_info", control=True).json() == info
        assert eng.get("/server_info", control=True).status_code == 200
        assert eng.get("/health_generate", control=True).status_code == 200
    load = eng.load()
    assert {"num_running_reqs", "num_waiting_reqs", "num_used_tokens", "max_total_num_tokens", "token_usage"} <= set(load)
    assert eng.get("/get_load", control=True).status_code == 404  # SGLang 0.5.23 serves /v1/loads only


def test_models_endpoint(eng: Eng) -> None:
    data = eng.get("/v1/models").json()
    assert data["object"] == "list" and data["data"] and data["data"][0]["id"]


# =========================================================================== tests: /generate
def test_generate_text_shape(eng: Eng) -> None:
    out = eng.generate({"text": PROMPT, "sampling_params": {"max_new_tokens": 6, "ignore_eos": True},
                        "return_logprob": True, "rid": f"shape-{eng.target}"})
    meta = out["meta_info"]
    assert isinstance(out["text"], str)
    assert len(out["output_ids"]) == 6 == meta["completion_tokens"]
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert meta["id"] == f"shape-{eng.target}"
    assert meta["prompt_tokens"] > 0 and meta["cached_tokens"] >= 0 and meta["e2e_latency"] > 0
    assert isinstance(meta["weight_version"], str)
    lps = meta["output_token_logprobs"]
    assert len(lps) == 6
    for (lp, tid, text), oid in zip(lps, out["output_ids"]):
        assert isinstance(lp, float) and lp <= 0 and tid == oid and text is None


def test_generate_input_ids_equals_text(eng: Eng) -> None:
    eng.need("deterministic")
    a = greedy(eng, 8)
    if eng.model_path is None:
        pytest.skip("no local tokenizer for this target")
    from tandem.model_source import load_tokenizer

    ids = load_tokenizer(eng.model_path).encode(PROMPT)
    b = eng.generate({"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True},
                      "return_logprob": True})
    assert b["meta_info"]["prompt_tokens"] == len(ids) == a["meta_info"]["prompt_tokens"]
    assert b["output_ids"] == a["output_ids"] and b["text"] == a["text"]


def test_logprobs_match_hf_forward(eng: Eng) -> None:
    eng.need("hf")
    from tandem.model_source import load_tokenizer

    ids = load_tokenizer(eng.model_path).encode(PROMPT)
    for temp in (0.0, 0.7, 1.3):
        out = eng.generate({"input_ids": ids, "sampling_params": {"max_new_tokens": 12, "temperature": temp,
                                                                  "ignore_eos": True}, "return_logprob": True})
        got = [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]
        ref = hf_logprobs(eng.model_path, ids, out["output_ids"], temp)
        worst = max(abs(a - b) for a, b in zip(got, ref))
        assert worst < LOGPROB_TOL, f"temperature {temp}: max |engine - HF| = {worst}"
    # Greedy really is greedy: every token is the argmax of the reference distribution.
    import torch

    out = greedy(eng, 10)
    model = _HF[eng.model_path]
    full = torch.tensor([ids + out["output_ids"]])
    with torch.no_grad():
        am = model(full).logits[0, len(ids) - 1:-1].argmax(-1).tolist()
    assert am == out["output_ids"]


def test_input_token_logprobs(eng: Eng) -> None:
    eng.need("hf", "tandem")
    from tandem.model_source import load_tokenizer

    ids = load_tokenizer(eng.model_path).encode(PROMPT)
    out = eng.generate({"input_ids": ids, "sampling_params": {"max_new_tokens": 2, "temperature": 0},
                        "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 3})
    meta = out["meta_info"]
    inp = meta["input_token_logprobs"]
    assert len(inp) == len(ids) and inp[0][0] is None and [t for _, t, _ in inp] == ids
    ref = hf_logprobs(eng.model_path, ids[:1], ids[1:], 0.0)
    assert max(abs(a[0] - b) for a, b in zip(inp[1:], ref)) < LOGPROB_TOL
    tops = meta["output_top_logprobs"]
    assert len(tops) == 2 and all(len(t) == 3 for t in tops)
    assert tops[0][0][1] == out["output_ids"][0]  # greedy: the top-1 is the chosen token


def test_max_new_tokens_and_zero(eng: Eng) -> None:
    out = eng.generate({"text": PROMPT, "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
    assert out["meta_info"]["finish_reason"]["type"] == "length" and len(out["output_ids"]) == 3
    if "tandem" in eng.caps:
        z = eng.generate({"text": PROMPT, "sampling_params": {"max_new_tokens": 0}})
        assert z["output_ids"] == [] and z["meta_info"]["finish_reason"]["type"] == "length"


# Prompts to look for something to stop on in: a greedy continuation with a token at index >= 1 that
# did not occur before it, so the output kept in front of the stop is not empty. A real model's
# continuation of PROMPT has one at once; the tiny random model echoes the prompt's last byte for a
# while and only then drifts to another byte, and these short prompts (found by a search over random
# strings) drift to a printable ASCII one within STOP_SEARCH_TOKENS.
STOP_PROMPTS = (PROMPT, "ZJc", "8BR", "wF", "1iGn")
STOP_SEARCH_TOKENS = 24


def _fresh_stop(eng: Eng, fits: Callable[[list[int], int], bool] = lambda ids, k: True
                ) -> tuple[str, list[int], int]:
    """(prompt, its greedy output, k) for the first fresh token ids[k], k >= 1, that `fits(ids, k)`."""
    for text in STOP_PROMPTS:
        ids = greedy(eng, STOP_SEARCH_TOKENS, text=text)["output_ids"]
        for k in range(1, len(ids)):
            if ids[k] not in ids[:k] and fits(ids, k):
                return text, ids, k
    pytest.fail(f"no greedy output of {STOP_PROMPTS} has a fresh token to stop on: add a prompt for this model")


def test_stop_token_ids_and_ignore_eos(eng: Eng) -> None:
    eng.need("deterministic")
    text, ref, k = _fresh_stop(eng)
    stop_id = ref[k]
    out = greedy(eng, STOP_SEARCH_TOKENS, text=text, stop_token_ids=[stop_id], ignore_eos=False)
    fr = out["meta_info"]["finish_reason"]
    assert fr == {"type": "stop", "matched": stop_id}, (text, ref, k, fr)
    assert out["output_ids"] == ref[:k + 1]  # the matched token is part of output_ids (SGLang)
    # ignore_eos also ignores stop_token_ids (SGLang's check_finished): runs to the length limit.
    out = greedy(eng, STOP_SEARCH_TOKENS, text=text, stop_token_ids=[stop_id], ignore_eos=True)
    assert out["meta_info"]["finish_reason"]["type"] == "length" and out["output_ids"] == ref


def test_stop_strings(eng: Eng) -> None:
    eng.need("deterministic")
    if eng.model_path is None:
        pytest.skip("needs the tokenizer to pick a stop string")
    from tandem.model_source import load_tokenizer

    tok = load_tokenizer(eng.model_path)

    def one_new_char(ids: list[int], k: int) -> bool:  # a stop string that first occurs at token k
        piece = tok.decode([ids[k]])
        return len(piece) == 1 and piece.isascii() and piece.isprintable() and piece not in tok.decode(ids[:k])

    text, ref, k = _fresh_stop(eng, one_new_char)
    piece, before = tok.decode([ref[k]]), tok.decode(ref[:k])
    out = greedy(eng, STOP_SEARCH_TOKENS, text=text, stop=[piece, "never-happens"])
    fr = out["meta_info"]["finish_reason"]
    assert fr == {"type": "stop", "matched": piece}, (text, ref, k, fr)
    assert out["output_ids"] == ref[:k + 1]
    assert out["text"] == before
    kept = greedy(eng, STOP_SEARCH_TOKENS, text=text, stop=piece, no_stop_trim=True)
    assert kept["text"] == before + piece


def test_streaming_matches_non_streaming(eng: Eng) -> None:
    ref = greedy(eng, 10) if "deterministic" in eng.caps else None
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True},
            "return_logprob": True, "stream": True}
    with httpx.stream("POST", eng.url + "/generate", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) >= 2
    last = chunks[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "length"
    if ref is not None:
        assert last["output_ids"] == ref["output_ids"] and last["text"] == ref["text"]
    assert len(last["output_ids"]) == 10 and len(last["meta_info"]["output_token_logprobs"]) == 10
    # Cumulative chunks: every chunk's ids extend the previous ones.
    for a, b in zip(chunks, chunks[1:]):
        assert b["output_ids"][:len(a["output_ids"])] == a["output_ids"]
        assert a["meta_info"]["finish_reason"] is None


def test_streamed_token_ids_carry_their_logprobs_in_every_chunk(eng: Eng) -> None:
    """What a harness's streamed call sends (tandem EngineClient.generate_stream): token ids in,
    return_logprob; every chunk's meta_info holds the log-probs of all its output ids so far (SGLang's
    default, non-incremental stream output), and the last is the non-streamed answer."""
    eng.need("hf")
    from tandem.model_source import load_tokenizer

    ids = load_tokenizer(eng.model_path).encode(PROMPT)
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True},
            "return_logprob": True}
    with httpx.stream("POST", eng.url + "/generate", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]" and len(events) >= 3
    chunks = events[:-1]
    for c in chunks:
        assert [t for _, t, _ in c["meta_info"]["output_token_logprobs"]] == c["output_ids"]
        assert c["meta_info"]["completion_tokens"] == len(c["output_ids"])
    assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    ref = eng.generate(body)
    last = chunks[-1]
    assert last["meta_info"]["finish_reason"] == ref["meta_info"]["finish_reason"]
    if "deterministic" in eng.caps:
        assert last["output_ids"] == ref["output_ids"]
        for a, b in zip(last["meta_info"]["output_token_logprobs"], ref["meta_info"]["output_token_logprobs"]):
            assert a[1] == b[1] and abs(a[0] - b[0]) < LOGPROB_TOL


def test_batch_generate(eng: Eng) -> None:
    if eng.target == "router":
        pytest.skip("sglang-router 0.3.2 rejects batched text in /generate (expects a string)")
    texts = ["a", "bb", "ccc"]
    r = eng.post("/generate", {"text": texts, "sampling_params": {"max_new_tokens": 4, "temperature": 0,
                                                                  "ignore_eos": True}})
    assert r.status_code == 200, r.text
    outs = r.json()
    assert isinstance(outs, list) and len(outs) == 3
    for t, o in zip(texts, outs):
        assert len(o["output_ids"]) == 4
        if "deterministic" in eng.caps:
            assert o["output_ids"] == greedy(eng, 4, text=t)["output_ids"]


def test_group_as_one_batched_request(eng: Eng) -> None:
    """tandem's single-turn rollout asks for a group as one /generate: the prompt's ids G times.
    sglang-router forwards this form (not batched text), and every sample keeps its own logprobs."""
    eng.need("hf")
    from tandem.model_source import load_tokenizer

    ids = load_tokenizer(eng.model_path).encode(PROMPT)
    outs = eng.generate({"input_ids": [ids] * 4, "sampling_params": {"max_new_tokens": 6, "temperature": 1.0,
                                                                     "ignore_eos": True}, "return_logprob": True})
    assert isinstance(outs, list) and len(outs) == 4
    assert len({tuple(o["output_ids"]) for o in outs}) > 1  # independent samples, not one copied
    for o in outs:
        got = [lp for lp, _, _ in o["meta_info"]["output_token_logprobs"]]
        assert [t for _, t, _ in o["meta_info"]["output_token_logprobs"]] == o["output_ids"]
        worst = max(abs(a - b) for a, b in zip(got, hf_logprobs(eng.model_path, ids, o["output_ids"], 1.0)))
        assert worst < LOGPROB_TOL


def test_set_cpu_threads(eng: Eng) -> None:
    """tandem's own control route (run.cpu_split = "phase"); bad counts are refused with the cause."""
    eng.need("tandem")
    eng.need("control")
    try:
        r = httpx.post(eng.control_url + "/set_cpu_threads", json={"threads": 2}, timeout=30)
        assert r.status_code == 200 and r.json() == {"success": True, "threads": 2}
        if eng.backend == "embedded":  # the count its scheduler thread computes with
            assert eng.get("/get_server_info").json()["torch_threads"] == 2
        assert greedy(eng, 4)["meta_info"]["completion_tokens"] == 4  # still serving
        bad = httpx.post(eng.control_url + "/set_cpu_threads", json={"threads": 0}, timeout=30)
        assert bad.status_code == 400 and "threads" in bad.json()["message"]
    finally:
        httpx.post(eng.control_url + "/set_cpu_threads", json={"threads": 1}, timeout=30)


def test_concurrent_requests_are_batched(eng: Eng) -> None:
    n = 32
    running: list[int] = []  # num_running_reqs sampled while *these* requests are in flight

    async def run() -> list[dict]:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=n + 1)) as c:
            async def one(i: int) -> dict:
                r = await c.post(eng.url + "/generate", json={
                    "text": f"request {i}", "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}})
                assert r.status_code == 200, r.text
                return r.json()

            async def sample(stop: asyncio.Event) -> None:
                while not stop.is_set() and eng.control_url is not None:
                    running.append((await c.get(eng.control_url + LOADS_ROUTE)).json()["loads"][0]["num_running_reqs"])
                    await asyncio.sleep(0.01)

            stop = asyncio.Event()
            sampler = asyncio.create_task(sample(stop))
            try:
                return await asyncio.gather(*(one(i) for i in range(n)))
            finally:
                stop.set()
                await sampler

    outs = asyncio.run(run())
    assert all(o["meta_info"]["finish_reason"]["type"] == "length" and len(o["output_ids"]) == 24 for o in outs)
    assert len({o["meta_info"]["id"] for o in outs}) == n
    if eng.control_url is not None:
        # Many of them ran in one batch (not one after the other), seen during this test through this
        # target (the engine's lifetime max_running_batch_seen would also count earlier tests' batches).
        assert max(running, default=0) >= n // 2, running


def test_router_extra_fields_accepted(eng: Eng) -> None:
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 2, "ignore_eos": True, "no_stop_trim": False,
                                                "skip_special_tokens": True, "frequency_penalty": 0.0},
            "return_hidden_states": False, "separate_reasoning": False, "stream_options": None, "unknown": {"x": 1},
            "priority": -3}
    assert len(eng.generate(body)["output_ids"]) == 2
    # sglang-router sends max_tokens on as max_completion_tokens; SGLang 0.5.23's /v1/completions reads
    # max_tokens only (16 when absent), so a real server is asked with max_tokens.
    limit = "max_tokens" if eng.target == "sglang" else "max_completion_tokens"
    r = eng.post("/v1/completions", {"model": "any", "prompt": PROMPT, limit: 3, "ignore_eos": True,
                                     "separate_reasoning": True, "return_hidden_states": False, "whatever": 1})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3


def test_unknown_sampling_params_are_refused(eng: Eng) -> None:
    """SGLang 0.5.23 checks sampling_params against its JSON contract: a field it does not know is a 400 whose
    body is {"error": "unknown field `...`, expected one of ..."}, and so is a value of the wrong JSON type
    (which is why tandem only ever sends the fields of tandem.engine.sampling_params.SGLANG_SAMPLING_FIELDS)."""
    if eng.target == "router":
        pytest.skip("sglang-router 0.3.2 re-serialises sampling_params through its own type (checked on the engines)")
    r = eng.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 2, "brand_new_knob": 1}})
    assert r.status_code == 400, r.text
    assert isinstance(r.json()["error"], str), r.text
    assert error_message(r.json()).startswith("unknown field `brand_new_knob`, expected one of `max_new_tokens`")
    for wrong in ({"max_new_tokens": "many"}, {"max_new_tokens": 2.0}, {"temperature": "0.5"}, {"ignore_eos": 1}):
        r = eng.post("/generate", {"text": PROMPT, "sampling_params": wrong})
        assert r.status_code == 400 and isinstance(r.json()["error"], str), (wrong, r.text)


def test_bad_input_is_400(eng: Eng) -> None:
    cases = [
        {"sampling_params": {"max_new_tokens": 2}},                                   # no text / input_ids
        {"text": "a", "input_ids": [1], "sampling_params": {}},                        # both
        {"text": "a", "sampling_params": {"temperature": -1}},
        {"text": "a", "sampling_params": {"top_p": 0}},
        {"text": "a", "sampling_params": {"max_new_tokens": "many"}},
        {"input_ids": [10 ** 9], "sampling_params": {"max_new_tokens": 1}},           # out of vocabulary
    ]
    if eng.target == "sglang":
        cases = [cases[0], *cases[2:5]]  # SGLang 0.5.23 serves text + input_ids (its input_ids), and an
        # out-of-vocabulary id is not asked of it
    for body in cases:
        r = eng.post("/generate", body)
        if eng.target == "router" and r.status_code == 422:
            continue  # sglang-router type-checks some fields itself and answers 422
        assert r.status_code == 400, (body, r.status_code, r.text)
        assert error_message(r.json()), r.text
    if eng.target != "router":
        # A value SGLang's contract takes but its sampling checks refuse: {"error": {"message": ...}}.
        r = eng.post("/generate", {"text": "a", "sampling_params": {"temperature": -1}})
        assert "temperature" in r.json()["error"]["message"], r.text
    if "tandem" in eng.caps and eng.target == "direct":
        r = httpx.post(eng.url + "/generate", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and "JSON" in r.json()["message"]


# =========================================================================== tests: OpenAI
def test_openai_client(eng: Eng) -> None:
    import openai

    client = openai.OpenAI(base_url=eng.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    model = client.models.list().data[0].id
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                          temperature=0, logprobs=True, top_logprobs=2,
                                          extra_body={"ignore_eos": True})
    ch = chat.choices[0]
    assert ch.finish_reason == "length" and isinstance(ch.message.content, str)
    assert chat.usage.completion_tokens == 5 and chat.usage.prompt_tokens > 0
    assert len(ch.logprobs.content) == 5 and all(len(t.top_logprobs) == 2 for t in ch.logprobs.content)

    comp = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=1,
                                     extra_body={"ignore_eos": True})
    c0 = comp.choices[0]
    assert comp.usage.completion_tokens == 4 and len(c0.logprobs.token_logprobs) == 4
    ref = greedy(eng, 4)
    assert c0.text == ref["text"]
    assert max(abs(a - b[0]) for a, b in zip(c0.logprobs.token_logprobs, ref["meta_info"]["output_token_logprobs"])) < 1e-5

    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                            temperature=0, stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    parts, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            parts.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert finish == "length" and usage is not None and usage.completion_tokens == 6
    assert "".join(parts) == chat_text(client, model, 6)

    two = client.completions.create(model=model, prompt=["a", "b"], max_tokens=2, n=2, extra_body={"ignore_eos": True})
    assert sorted(c.index for c in two.choices) == [0, 1, 2, 3] and two.usage.completion_tokens == 8


def chat_text(client: Any, model: str, n: int) -> str:
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=n,
                                       temperature=0, extra_body={"ignore_eos": True})
    return r.choices[0].message.content


# =========================================================================== tests: control plane
def _start_long(eng: Eng, rid: str, n: int = 4000, temperature: float = 0.0) -> tuple[Any, Any]:
    """A long streaming request running in a thread; returns (thread, result box) once it has a token."""
    import threading

    box: dict[str, Any] = {}
    first = threading.Event()

    def run() -> None:
        body = {"text": PROMPT, "rid": rid, "stream": True, "return_logprob": True,
                "sampling_params": {"max_new_tokens": n, "temperature": temperature, "ignore_eos": True}}
        try:
            with httpx.stream("POST", eng.url + "/generate", json=body, timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        box["last"] = json.loads(line[6:])
                        first.set()
                    elif line == "data: [DONE]":
                        box["done"] = True
        except Exception as err:  # surfaced by the test through the box
            box["error"] = repr(err)
        finally:
            first.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert first.wait(60), "the long request produced no token"
    return t, box


def _finish(t: Any, box: dict, timeout: float = 120) -> dict:
    t.join(timeout)
    assert not t.is_alive(), "request did not finish"
    assert "error" not in box, box.get("error")
    assert box.get("done"), "stream did not end with [DONE]"
    return box["last"]


def test_client_disconnect_aborts(eng: Eng) -> None:
    """A client that goes away frees its slot (SGLang aborts on disconnect), streaming or not."""
    eng.need("control", "tandem")
    if eng.target != "direct":
        pytest.skip("checked on the engine itself")
    for stream in (False, True):
        body = {"text": PROMPT, "stream": stream, "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}
        if stream:
            with httpx.stream("POST", eng.url + "/generate", json=body, timeout=30) as r:
                next(r.iter_lines())  # one chunk, then leave: closing the response drops the connection
        else:
            with pytest.raises(httpx.TimeoutException):
                httpx.post(eng.url + "/generate", json=body, timeout=httpx.Timeout(5, read=0.5))
        deadline = time.time() + 10
        while eng.requests_held() != 0:
            assert time.time() < deadline, f"stream={stream}: the request kept running after the client left"
            time.sleep(0.1)


def test_abort_request(eng: Eng) -> None:
    eng.need("control")
    t, box = _start_long(eng, f"abort-me-{eng.target}")
    r = eng.post("/abort_request", {"rid": f"abort-me-{eng.target}"}, control=True)
    assert r.status_code == 200
    last = _finish(t, box)
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < last["meta_info"]["completion_tokens"] < 4000
    # abort_all
    t, box = _start_long(eng, f"abort-all-{eng.target}")
    assert eng.post("/abort_request", {"abort_all": True}, control=True).status_code == 200
    assert _finish(t, box)["meta_info"]["finish_reason"]["type"] == "abort"


def test_pause_abort_holds_new_requests(eng: Eng) -> None:
    eng.need("control")
    import threading

    t, box = _start_long(eng, f"pause-abort-{eng.target}")
    r = eng.post("/pause_generation", {"mode": "abort"}, control=True)
    assert r.status_code == 200, r.text
    last = _finish(t, box)
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    late: dict[str, Any] = {}

    def submit() -> None:
        late["out"] = eng.generate({"text": "late", "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})

    th = threading.Thread(target=submit, daemon=True)
    th.start()
    th.join(1.5)
    assert th.is_alive(), "a request completed while generation was paused"
    if "tandem" in eng.caps:
        assert eng.load()["paused"] is True
    assert eng.post("/continue_generation", {}, control=True).status_code == 200
    th.join(60)
    assert late["out"]["meta_info"]["finish_reason"]["type"] == "length"


def test_pause_retract_recomputes_exactly(eng: Eng) -> None:
    eng.need("control")
    n = 200
    ref = greedy(eng, n)["output_ids"] if "deterministic" in eng.caps else None
    t, box = _start_long(eng, f"retract-{eng.target}", n=n)
    assert eng.post("/pause_generation", {"mode": "retract"}, control=True).status_code == 200
    load = eng.load()
    if "tandem" in eng.caps:
        assert load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 1
        # Retracted requests hold no KV: the cache can be flushed while paused.
        assert eng.post("/flush_cache", {}, control=True).status_code == 200
    assert eng.post("/continue_generation", {}, control=True).status_code == 200
    last = _finish(t, box)
    assert last["meta_info"]["finish_reason"]["type"] == "length"
    assert len(last["output_ids"]) == n
    if ref is not None:
        assert last["output_ids"] == ref, "recomputing the KV after retract changed the greedy continuation"
    if "tandem" in eng.caps:
        assert last["meta_info"]["num_retractions"] == 1


def test_pause_in_place_keeps_kv(eng: Eng) -> None:
    eng.need("control")
    n = 200
    ref = greedy(eng, n)["output_ids"] if "deterministic" in eng.caps else None
    t, box = _start_long(eng, f"inplace-{eng.target}", n=n)
    assert eng.post("/pause_generation", {"mode": "in_place"}, control=True).status_code == 200
    assert eng.requests_held() == 1
    time.sleep(0.3)
    assert not box.get("done")
    # in_place keeps the running request's KV, so flush_cache must refuse.
    assert eng.post("/flush_cache", {}, control=True).status_code == 400
    assert eng.post("/continue_generation", {}, control=True).status_code == 200
    last = _finish(t, box)
    assert last["meta_info"]["finish_reason"]["type"] == "length" and len(last["output_ids"]) == n
    if ref is not None:
        assert last["output_ids"] == ref


def _perturbed_copy(src: str, dst: Path, scale: float = 0.5) -> Path:
    """An HF directory like the trainer publishes: same config/tokenizer, perturbed safetensors."""
    import torch
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True, exist_ok=True)
    for f in Path(src).iterdir():
        if f.suffix != ".safetensors" and f.is_file():
            shutil.copy(f, dst / f.name)
    g = torch.Generator().manual_seed(1)
    for f in Path(src).glob("*.safetensors"):
        tensors = load_file(str(f))
        out = {k: (v + scale * torch.randn(v.shape, generator=g, dtype=v.dtype) * v.float().std().clamp(min=1e-3))
               .contiguous() for k, v in tensors.items()}
        save_file(out, str(dst / f.name), metadata={"format": "pt"})
    return dst


def test_update_weights_from_disk(eng: Eng, tmp_path: Path) -> None:
    eng.need("control", "hf")
    base = eng.model_path
    before = greedy(eng, 12)
    new_dir = _perturbed_copy(base, tmp_path / "weights_v7")
    try:
        r = eng.post("/update_weights_from_disk", {"model_path": str(new_dir), "weight_version": "7"}, control=True)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["success"] is True and body["num_paused_requests"] == 0
        assert eng.get("/get_model_info", control=True).json()["weight_version"] == "7"
        after = greedy(eng, 12)
        assert after["meta_info"]["weight_version"] == "7"
        assert after["output_ids"] != before["output_ids"] or \
            after["meta_info"]["output_token_logprobs"] != before["meta_info"]["output_token_logprobs"]
        from tandem.model_source import load_tokenizer

        ids = load_tokenizer(base).encode(PROMPT)
        ref = hf_logprobs(str(new_dir), ids, after["output_ids"], 0.0)
        got = [x[0] for x in after["meta_info"]["output_token_logprobs"]]
        assert max(abs(a - b) for a, b in zip(got, ref)) < LOGPROB_TOL

        # A bad path fails and keeps the weights and the version (tandem's engine also names the path; SGLang
        # 0.5.23 says "Failed to get weights iterator: ..." without it, so tandem's SyncError names it itself).
        bad = str(tmp_path / "does_not_exist")
        r = eng.post("/update_weights_from_disk", {"model_path": bad, "weight_version": "8"}, control=True)
        assert r.status_code == 400 and r.json()["success"] is False, r.text
        if "tandem" in eng.caps:
            assert bad in r.json()["message"]
        # A truncated shard fails too, with the old weights still serving. Not asked of SGLang 0.5.23: its
        # rollback re-reads the weights from the path that failed, raises again, and the server exits
        # (seen on CPU). tandem never hands an engine such a directory: a version is complete before it is
        # listed, and a weight agent checks every file's checksum before it loads.
        if "tandem" in eng.caps:
            broken = tmp_path / "broken"
            shutil.copytree(new_dir, broken)
            shard = next(broken.glob("*.safetensors"))
            shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
            r = eng.post("/update_weights_from_disk", {"model_path": str(broken), "weight_version": "9"}, control=True)
            assert r.status_code == 400 and r.json()["success"] is False
            assert eng.get("/get_model_info", control=True).json()["weight_version"] == "7"
            again = greedy(eng, 12)
            assert again["output_ids"] == after["output_ids"] and again["meta_info"]["weight_version"] == "7"
    finally:
        r = eng.post("/update_weights_from_disk", {"model_path": base, "weight_version": "0"}, control=True)
        assert r.status_code == 200, r.text
    assert greedy(eng, 12)["output_ids"] == before["output_ids"]


def test_update_weights_abort_all_and_paused(eng: Eng, tmp_path: Path) -> None:
    eng.need("control", "hf")
    base = eng.model_path
    new_dir = _perturbed_copy(base, tmp_path / "weights_v3", scale=0.2)
    try:
        # abort_all_requests: the in-flight request ends with abort, the swap happens.
        t, box = _start_long(eng, f"upd-abort-{eng.target}")
        r = eng.post("/update_weights_from_disk", {"model_path": str(new_dir), "weight_version": "3",
                                                   "abort_all_requests": True}, control=True)
        assert r.status_code == 200 and r.json()["success"], r.text
        assert _finish(t, box)["meta_info"]["finish_reason"]["type"] == "abort"
        # While paused in place, the update applies at once under the paused request, which then continues
        # on the new weights. Its KV stays, so the default flush_cache fails the call (SGLang 0.5.23: the
        # weights are in, the answer is 400 and num_paused_requests is 0); tandem's continue policy sends
        # flush_cache false (tandem.weights.reload), which succeeds.
        t, box = _start_long(eng, f"upd-paused-{eng.target}", n=300)
        assert eng.post("/pause_generation", {"mode": "in_place"}, control=True).status_code == 200
        r = eng.post("/update_weights_from_disk", {"model_path": base, "weight_version": "4"}, control=True)
        assert r.status_code == 400 and r.json()["success"] is False and r.json()["num_paused_requests"] == 0, r.text
        assert r.json()["message"].startswith("Weights were updated, but the cache was not flushed"), r.text
        r = eng.post("/update_weights_from_disk", {"model_path": base, "weight_version": "4", "flush_cache": False},
                     control=True)
        assert r.status_code == 200 and r.json()["success"] and r.json()["num_paused_requests"] == 0, r.text
        assert eng.post("/continue_generation", {}, control=True).status_code == 200
        last = _finish(t, box)
        assert last["meta_info"]["finish_reason"]["type"] == "length"
        assert last["meta_info"]["weight_version"] == "4"
        # Not paused: SGLang drains first - the running request finishes on the old weights,
        # then the swap happens (the call returns after it).
        t, box = _start_long(eng, f"upd-drain-{eng.target}", n=150)
        r = eng.post("/update_weights_from_disk", {"model_path": str(new_dir), "weight_version": "5"}, control=True)
        assert r.status_code == 200 and r.json()["success"], r.text
        t.join(5)
        assert box.get("done"), "the update returned before the in-flight request drained"
        last = _finish(t, box)
        assert last["meta_info"]["finish_reason"]["type"] == "length"
        assert last["meta_info"]["weight_version"] == "4"
        assert greedy(eng, 2)["meta_info"]["weight_version"] == "5"
    finally:
        eng.post("/continue_generation", {}, control=True)
        r = eng.post("/update_weights_from_disk", {"model_path": base, "weight_version": "0"}, control=True)
        assert r.status_code == 200, r.text


def test_tandem_reload_under_each_policy(eng: Eng, tmp_path: Path) -> None:
    """tandem's own weight-sync client (tandem.weights.reload.reload_engine) against this engine with a request
    in flight: 'continue' pauses it in place and loads with flush_cache false, and the request finishes on the
    new version; 'abort' ends it with abort, then loads."""
    eng.need("control", "hf")
    from tandem.weights.reload import reload_engine

    async def reload(path: Path | str, version: int, policy: str) -> None:
        async with httpx.AsyncClient() as http:
            await reload_engine(http, eng.control_url, path, version, policy, 120.0)

    new_dir = _perturbed_copy(eng.model_path, tmp_path / "weights_v21", scale=0.2)
    try:
        t, box = _start_long(eng, f"tandem-continue-{eng.target}", n=300)
        asyncio.run(reload(new_dir, 21, "continue"))
        last = _finish(t, box)
        assert last["meta_info"]["finish_reason"]["type"] == "length" and len(last["output_ids"]) == 300
        assert last["meta_info"]["weight_version"] == "21"
        assert eng.get("/get_model_info", control=True).json()["weight_version"] == "21"
        t, box = _start_long(eng, f"tandem-abort-{eng.target}")
        asyncio.run(reload(eng.model_path, 22, "abort"))
        assert _finish(t, box)["meta_info"]["finish_reason"]["type"] == "abort"
        assert greedy(eng, 2)["meta_info"]["weight_version"] == "22"
    finally:
        eng.post("/continue_generation", {}, control=True)
        r = eng.post("/update_weights_from_disk", {"model_path": eng.model_path, "weight_version": "0"}, control=True)
        assert r.status_code == 200, r.text


def test_control_routes_need_a_body(eng: Eng) -> None:
    """SGLang 0.5.23's control routes take a JSON body ({} at least): a POST without one is a 400 "Field
    required" and does nothing."""
    eng.need("control")
    try:
        for route in ("/continue_generation", "/pause_generation", "/abort_request"):
            r = httpx.post(eng.control_url + route, timeout=30)
            assert r.status_code == 400 and "Field required" in error_message(r.json()), (route, r.text)
    finally:
        eng.post("/continue_generation", {}, control=True)
    assert greedy(eng, 2)["meta_info"]["completion_tokens"] == 2


def test_get_loads_through_router(eng: Eng) -> None:
    if eng.target != "router":
        pytest.skip("router-only")
    r = eng.get("/get_loads")
    assert r.status_code == 200, r.text
    workers = [w["worker"] for w in r.json()["workers"]]
    assert eng.control_url in workers
    # /flush_cache fans out to every worker; an idle engine accepts it.
    r = eng.post("/flush_cache", {})
    assert r.status_code == 200 and r.json()["workers_flushed"] == 1, r.text


# =========================================================================== tests: memory hand-over (colocation)
def _memory(eng: Eng, route: str, tags: list[str] | None) -> httpx.Response:
    return eng.post(f"/{route}_memory_occupation", {"tags": tags}, control=True)


def test_release_and_resume_memory_occupation(eng: Eng, tmp_path: Path) -> None:
    """SGLang's shapes (200 and `null`; a refusal 400 with {"error": {"message"}}) and semantics: only an
    idle engine releases; a request waits at the door until everything is resumed; weights are resumed,
    then a version loaded, then the KV cache (slime's order), and the engine serves that version."""
    eng.need("control", "hf")
    import threading

    from tandem.model_source import load_tokenizer

    eng.need("release")
    t, box = _start_long(eng, f"busy-{eng.target}", n=400)
    r = _memory(eng, "release", None)
    assert r.status_code == 400 and "idle" in r.json()["error"]["message"], r.text
    assert eng.post("/abort_request", {"abort_all": True}, control=True).status_code == 200
    _finish(t, box)
    r = _memory(eng, "release", ["weights", "bogus"])
    assert r.status_code == 400 and "bogus" in r.json()["error"]["message"], r.text
    new_dir = _perturbed_copy(eng.model_path, tmp_path / "weights_v11", scale=0.3)
    try:
        r = _memory(eng, "release", None)  # none named: every region
        assert r.status_code == 200 and r.json() is None, r.text
        late: dict[str, Any] = {}
        th = threading.Thread(target=lambda: late.update(out=greedy(eng, 8)), daemon=True)
        th.start()
        th.join(1.5)
        assert th.is_alive(), "a request was served while the engine's memory was released"
        # Released weights cannot take a version: SGLang's order resumes them first.
        r = eng.post("/update_weights_from_disk", {"model_path": str(new_dir), "weight_version": "11"}, control=True)
        assert r.status_code == 400 and r.json()["success"] is False, r.text
        assert _memory(eng, "resume", ["weights"]).status_code == 200
        r = eng.post("/update_weights_from_disk", {"model_path": str(new_dir), "weight_version": "11"}, control=True)
        assert r.status_code == 200 and r.json()["success"], r.text
        assert th.is_alive(), "a request was served before the KV cache was resumed"
        assert _memory(eng, "resume", ["kv_cache", "cuda_graph"]).status_code == 200
        th.join(60)
        assert late["out"]["meta_info"]["weight_version"] == "11"
        ids = load_tokenizer(eng.model_path).encode(PROMPT)
        ref = hf_logprobs(str(new_dir), ids, late["out"]["output_ids"], 0.0)
        got = [x[0] for x in late["out"]["meta_info"]["output_token_logprobs"]]
        assert max(abs(a - b) for a, b in zip(got, ref)) < LOGPROB_TOL
    finally:
        _memory(eng, "resume", None)
        r = eng.post("/update_weights_from_disk", {"model_path": eng.model_path, "weight_version": "0"}, control=True)
        assert r.status_code == 200, r.text


def test_resume_without_a_load_serves_the_weights_it_had(eng: Eng) -> None:
    """Released and resumed with no version loaded in between: the engine reads back the version it served
    (SGLang keeps it with --enable-weights-cpu-backup), never generating from storage that holds nothing."""
    eng.need("control", "hf", "deterministic", "release")
    before = greedy(eng, 12)
    assert _memory(eng, "release", ["kv_cache", "weights"]).status_code == 200
    r = _memory(eng, "resume", None)  # none named: every released region
    assert r.status_code == 200 and r.json() is None, r.text
    after = greedy(eng, 12)
    assert after["output_ids"] == before["output_ids"]
    assert after["meta_info"]["output_token_logprobs"] == before["meta_info"]["output_token_logprobs"]


# =========================================================================== tests: mixture of experts
def _hf_topk(model_path: str, ids: list[int]) -> dict[int, Any]:
    """{MoE layer: [len(ids), top_k] expert ids} of one plain HF forward over `ids`."""
    import torch

    from tandem.moe import moe_routers

    hf_logprobs(model_path, ids[:1], ids[1:2], 1.0)  # loads the model into _HF
    model, seen = _HF[model_path], {}
    hooks = [m.register_forward_hook(lambda _m, _a, out, layer=layer: seen.__setitem__(layer, out[2]))
             for layer, m in moe_routers(model).items()]
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    return {layer: t.numpy() for layer, t in seen.items()}


def test_routed_experts(eng: Eng) -> None:
    """SGLang's return_routed_experts: meta_info["routed_experts"], base64 of int32
    [prompt + output - 1 - routed_experts_start_len, num_hidden_layers, top_k], once finished."""
    eng.need("moe")
    import numpy as np

    from tandem.model_source import load_tokenizer
    from tandem.moe import decode_routed_experts

    ids = load_tokenizer(eng.model_path).encode(PROMPT) if eng.model_path else list(range(40, 50))
    body = {"input_ids": [ids, ids[:5]], "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True},
            "return_routed_experts": True}
    outs = eng.generate(body)
    if eng.target == "router":
        # sglang-router re-serialises /generate through its own request type, which has no such field: the
        # reason tandem's rollout client sends these requests to the engines themselves (tandem.rollout.direct).
        assert all("routed_experts" not in out["meta_info"] for out in outs)
        return
    for prompt, out in zip([ids, ids[:5]], outs):
        rows = len(prompt) + len(out["output_ids"]) - 1
        routed = decode_routed_experts(out["meta_info"]["routed_experts"], rows)
        if "hf" in eng.caps:
            ref = _hf_topk(eng.model_path, prompt + out["output_ids"][:-1])
            top_k = next(iter(ref.values())).shape[1]
            routed = routed.reshape(rows, -1, top_k)
            for layer, want in ref.items():
                assert np.array_equal(np.sort(routed[:, layer], -1), np.sort(want, -1)), f"layer {layer}"
    later = eng.generate({**body, "input_ids": ids, "routed_experts_start_len": 3})
    rows = len(ids) + len(later["output_ids"]) - 1
    tail = decode_routed_experts(later["meta_info"]["routed_experts"], rows - 3)
    assert np.array_equal(tail, decode_routed_experts(outs[0]["meta_info"]["routed_experts"], rows)[3:])
    plain = eng.generate({**body, "input_ids": ids, "return_routed_experts": False})
    assert "routed_experts" not in plain["meta_info"]
