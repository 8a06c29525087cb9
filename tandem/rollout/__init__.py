"""Rollout: data, the engine client, plug-in loading, and the default single-turn rollout.

Everything is token-in, token-out: prompts are tokenized once here, engines receive
`input_ids`, and samples keep exactly the `output_ids` and logprobs the engine returned,
so the trainer trains on the tokens that were sampled.

Plug-ins:
- a rollout function  `async def fn(ctx: RolloutContext, row: dict, group_size: int) -> list[Sample]`
- a reward function   `def fn(sample: Sample, row: dict) -> float | (float, dict)` (may be async)
named in config as 'package.module:function' or 'path/to/file.py:function'.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import importlib.util
import inspect
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiohttp

from tandem.config import TandemConfig
from tandem.errors import RunFatal
from tandem.sample import Sample


# ----------------------------------------------------------------------------- plug-ins
class PluginError(ValueError):
    pass


def load_plugin(spec: str, what: str) -> Callable:
    """Resolve 'pkg.module:fn' or 'path/to/file.py:fn' to the function."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"{what} '{spec}' must look like 'module:function' or 'file.py:function'")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            if not path.exists():
                raise PluginError(f"{what} '{spec}': file {path} does not exist")
            mod_spec = importlib.util.spec_from_file_location(f"tandem_plugin_{path.stem}", path)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as err:
        raise PluginError(f"{what} '{spec}': cannot import {module_name}: {err}") from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise PluginError(f"{what} '{spec}': {module_name} has no function {attr}")
    return fn


# ----------------------------------------------------------------------------- data
class DataError(ValueError):
    pass


@dataclass
class Dataset:
    """Rows of the prompt dataset, with the count of rows that were skipped as malformed."""
    rows: list[dict]
    skipped: int
    skipped_examples: list[str]


def _row_problem(row: dict, prompt_key: str) -> str | None:
    if prompt_key not in row or row[prompt_key] is None:
        return f"missing field '{prompt_key}'"
    prompt = row[prompt_key]
    if isinstance(prompt, str):
        return None if prompt else "empty prompt"
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
        return None
    return f"field '{prompt_key}' is neither a string nor a list of chat messages"


def _read_jsonl_tolerant(path: Path) -> tuple[list[dict], list[str]]:
    """JSONL where a bad line is reported, not fatal (datasets would reject the whole file)."""
    rows, bad = [], []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            bad.append(f"line {lineno}: not JSON ({err.msg})")
            continue
        if not isinstance(row, dict):
            bad.append(f"line {lineno}: not a JSON object")
            continue
        rows.append(row)
    return rows, bad


def load_dataset_rows(path: str, prompt_key: str) -> Dataset:
    """Load local JSONL or parquet with `datasets`; malformed rows are skipped and counted."""
    import datasets

    p = Path(path)
    if not p.exists():
        raise DataError(f"dataset file '{path}' does not exist (rollout.data_path)")
    suffix = p.suffix.lower()
    bad: list[str] = []
    if suffix in (".jsonl", ".json"):
        try:
            ds = datasets.load_dataset("json", data_files=str(p), split="train")
            rows = [dict(r) for r in ds]
        except Exception:
            # One broken line makes the whole file unreadable for `datasets`; fall back to
            # a line-by-line read so the broken rows are skipped and reported instead.
            rows, bad = _read_jsonl_tolerant(p)
    elif suffix == ".parquet":
        ds = datasets.load_dataset("parquet", data_files=str(p), split="train")
        rows = [dict(r) for r in ds]
    else:
        raise DataError(f"dataset file '{path}' must be .jsonl, .json or .parquet (rollout.data_path)")
    good = []
    for i, row in enumerate(rows):
        problem = _row_problem(row, prompt_key)
        if problem:
            bad.append(f"row {i}: {problem}")
        else:
            good.append({**row, "_index": i})
    if not good:
        raise DataError(f"dataset '{path}' has no usable rows (prompt field '{prompt_key}'); "
                        f"{len(bad)} malformed, e.g. {bad[:3]}")
    return Dataset(good, len(bad), bad[:10])


class PromptCursor:
    """Deterministic, resumable walk over the dataset: seeded shuffle per epoch."""

    def __init__(self, n: int, seed: int, shuffle: bool, epoch: int = 0, position: int = 0):
        self.n, self.seed, self.shuffle = n, seed, shuffle
        self.epoch, self.position = epoch, position
        self._order = self._epoch_order(epoch)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next(self) -> int:
        if self.position >= self.n:
            self.epoch, self.position = self.epoch + 1, 0
            self._order = self._epoch_order(self.epoch)
        idx = self._order[self.position]
        self.position += 1
        return idx

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "shuffle": self.shuffle, "n": self.n}


# ----------------------------------------------------------------------------- engine client
class RolloutAborted(RuntimeError):
    """The engine aborted the request (a weight update with policy 'abort'); the group is regenerated."""


class GenerationError(RuntimeError):
    pass


REQUEST_PRIORITY: contextvars.ContextVar[int | None] = contextvars.ContextVar("tandem_request_priority",
                                                                             default=None)
"""SGLang request priority of the generate calls made in this task. The rollout producer sets it
to -step in each group's task (larger = served first), so engines that schedule by priority
(engine.priority_scheduling) finish the step the trainer waits on before the next one's."""

ROUTING_KEY_HEADER = "x-smg-routing-key"
"""sglang-router's session header: its 'manual' policy pins every request with one key to one worker."""


class EngineClient:
    """Async client for SGLang's /generate through the router, with the drain gate.

    All generation goes through `generate`, so the orchestrator can count requests in
    flight and close a gate in front of new ones: that is how 'drain, then sync' works.
    """

    def __init__(self, base_url: str, concurrency: int, timeout_s: float, retries: int = 8):
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.retries = retries
        self._sem = asyncio.Semaphore(concurrency)
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.in_flight = 0
        self.retried = 0
        """Requests that failed once (e.g. their engine died) and were sent again."""
        self.generated_tokens = 0
        self.weight_version = 0
        """Version every engine is known to serve; set by weight sync before the gate reopens."""
        # aiohttp, not httpx: httpx's pool bookkeeping scans every pooled connection on each
        # request, which at hundreds of concurrent rollouts cost the orchestrator as much CPU
        # as the engines themselves (measured by bench/trl_compare.py's profile).
        self._concurrency = concurrency
        self._http: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:  # created inside the running event loop, as aiohttp requires
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._concurrency + 8),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self._http

    def close_gate(self) -> None:
        self._open.clear()

    def open_gate(self) -> None:
        self._open.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def generate(self, input_ids: list[int], sampling_params: dict, return_logprob: bool = True,
                       routing_key: str | None = None) -> dict:
        """One /generate call. `routing_key` names the session (one agent trajectory): with
        router.policy = 'manual' every call with the same key lands on the same engine."""
        async with self._sem:
            await self._open.wait()
            self.in_flight += 1
            self._idle.clear()
            start_version = self.weight_version
            payload = {"input_ids": input_ids, "sampling_params": sampling_params, "return_logprob": return_logprob}
            if (priority := REQUEST_PRIORITY.get()) is not None:
                payload["priority"] = priority
            try:
                out = await self._post_with_retry(payload, routing_key)
            finally:
                self.in_flight -= 1
                if self.in_flight == 0:
                    self._idle.set()
        meta = out.setdefault("meta_info", {})
        # An engine reports the version it finished on; with in-place updates earlier tokens
        # may be older. Staleness must count the oldest, so keep the smaller of the two.
        meta["engine_weight_version"] = meta.get("weight_version")
        try:
            meta["weight_version"] = str(min(int(meta.get("weight_version", start_version)), start_version))
        except (TypeError, ValueError):
            meta["weight_version"] = str(start_version)
        finish = meta.get("finish_reason") or {}
        if isinstance(finish, dict) and finish.get("type") == "abort":
            raise RolloutAborted(finish.get("message", "aborted by engine"))
        self.generated_tokens += len(out.get("output_ids", []))
        return out

    async def _post_with_retry(self, payload: dict, routing_key: str | None = None) -> dict:
        last: Exception | None = None
        headers = {ROUTING_KEY_HEADER: routing_key} if routing_key else None
        for attempt in range(self.retries + 1):
            try:
                async with self._session().post(f"{self.base_url}/generate", json=payload, headers=headers) as resp:
                    if resp.status == 200:
                        return await resp.json()
                    text = await resp.text()
                last = GenerationError(f"/generate answered HTTP {resp.status}: {text[:300]}")
                if resp.status < 500:
                    break
            except (aiohttp.ClientError, asyncio.TimeoutError) as err:
                last = GenerationError(f"/generate transport error: {err!r}")
            if attempt < self.retries:
                self.retried += 1
                await asyncio.sleep(min(2.0, 0.2 * 2**attempt))
        raise last  # type: ignore[misc]


# ----------------------------------------------------------------------------- context
@dataclass
class RolloutContext:
    cfg: TandemConfig
    tokenizer: Any
    engine: EngineClient
    executor: ThreadPoolExecutor
    reward_fn: Callable
    sampling_params: dict = field(default_factory=dict)

    async def score(self, sample: Sample, row: dict) -> None:
        """Run the reward plug-in with a timeout; a failure scores 0 with the reason, never raises."""
        sample.reward, sample.reward_info = await score_sample(
            self.reward_fn, sample, row, self.cfg.rollout.reward_timeout_s, self.executor)

    async def run_blocking(self, fn: Callable, *args) -> Any:
        """Blocking work (sandboxes, graders) runs on the rollout pool, never the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)


async def score_sample(reward_fn: Callable, sample: Sample, row: dict, timeout_s: float,
                       executor: ThreadPoolExecutor | None) -> tuple[float, dict]:
    start = time.monotonic()
    try:
        if inspect.iscoroutinefunction(reward_fn):
            result = await asyncio.wait_for(reward_fn(sample, row), timeout_s)
        else:
            loop = asyncio.get_running_loop()
            result = await asyncio.wait_for(loop.run_in_executor(executor, reward_fn, sample, row), timeout_s)
    except asyncio.TimeoutError:
        return 0.0, {"reason": f"timeout: reward took longer than {timeout_s}s", "reward_time": timeout_s}
    except RunFatal:  # the plug-in asks to stop the run (e.g. a sandbox that keeps failing)
        raise
    except Exception as err:  # a broken reward must not crash the run
        return 0.0, {"reason": f"error: {type(err).__name__}: {err}", "reward_time": time.monotonic() - start}
    reward, info = (result if isinstance(result, tuple) else (result, {}))
    try:
        reward = float(reward)
    except (TypeError, ValueError):
        return 0.0, {"reason": f"error: reward function returned {reward!r}, not a number"}
    return reward, {**dict(info), "reward_time": time.monotonic() - start}


def sampling_params_from_config(cfg: TandemConfig) -> dict:
    r = cfg.rollout
    params = {"temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k, "max_new_tokens": r.max_new_tokens}
    if r.stop:
        params["stop"] = list(r.stop)
    return params


def encode_prompt(tokenizer, prompt: str | list[dict], apply_chat_template: bool) -> list[int]:
    if isinstance(prompt, list):
        return list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False))
    if apply_chat_template:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=False))
    return tokenizer(prompt, add_special_tokens=False)["input_ids"]


def sample_from_output(prompt_ids: list[int], out: dict, tokenizer) -> Sample:
    """Turn one /generate answer into a Sample, keeping the engine's ids and logprobs verbatim."""
    meta = out.get("meta_info", {})
    ids = list(out["output_ids"])
    lps = [float(t[0]) for t in meta.get("output_token_logprobs", [])]
    if len(lps) != len(ids):
        raise GenerationError(f"engine returned {len(ids)} output ids but {len(lps)} logprobs")
    sample = Sample(prompt_ids=list(prompt_ids), weight_version=int(meta.get("weight_version", 0) or 0))
    sample.append_model_tokens(ids, lps)
    finish = meta.get("finish_reason") or {}
    sample.finish_reason = finish.get("type", "") if isinstance(finish, dict) else str(finish)
    sample.response_text = out.get("text", "")
    # The version the engine finished on: above weight_version, the sample spans a weight update
    # (partial_rollout = "continue"); "drain" and "abort" never produce such a sample.
    sample.metadata["finish_weight_version"] = int(meta.get("engine_weight_version") or sample.weight_version)
    return sample


# ----------------------------------------------------------------------------- default rollout
async def single_turn(ctx: RolloutContext, row: dict, group_size: int) -> list[Sample]:
    """One prompt, G independent completions, each scored by the reward plug-in."""
    prompt_ids = encode_prompt(ctx.tokenizer, row[ctx.cfg.rollout.prompt_key], ctx.cfg.rollout.apply_chat_template)

    async def one() -> Sample:
        out = await ctx.engine.generate(prompt_ids, dict(ctx.sampling_params))
        sample = sample_from_output(prompt_ids, out, ctx.tokenizer)
        await ctx.score(sample, row)
        return sample

    return list(await asyncio.gather(*(one() for _ in range(group_size))))
