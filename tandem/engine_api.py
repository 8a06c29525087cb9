"""What tandem's clients read of SGLang's HTTP answers: an engine's load, and the message of an error.

Load: SGLang 0.5.23 answers `GET /v1/loads` with {timestamp, version, accelerator, num_accelerators, loads: [one
entry per DP rank: num_running_reqs, num_waiting_reqs, num_used_tokens, max_total_num_tokens, token_usage,
...]} and no longer serves `/get_load` (404). SGLang releases from before /v1/loads answer only `/get_load`,
a list of {num_reqs (running and waiting together), num_waiting_reqs, num_tokens, max_total_num_tokens} per
rank. An external engine (engine.backend = "external") can be either, so an engine that answers 404 on
/v1/loads is asked at /get_load from then on; every engine tandem starts itself speaks /v1/loads.

Errors: SGLang 0.5.23 answers a 400 in one of three shapes, by where the request failed: {"error": "<text>"}
(a /generate body that breaks its JSON contract, e.g. an unknown sampling parameter), {"error": {"message":
...}} (a ValueError on a native route, e.g. a negative temperature), and {"object": "error", "message": ...}
(a body that fails validation, and every OpenAI route). `error_message` reads any of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

LOADS_ROUTE = "/v1/loads"
LEGACY_LOAD_ROUTE = "/get_load"

_legacy_engines: set[str] = set()
"""Base URLs that answered 404 on /v1/loads: asked at /get_load instead (older SGLang releases)."""


@dataclass(frozen=True)
class EngineLoad:
    waiting: int
    running: int
    kv_usage: float
    """Fraction of the KV pool in use (0 when the engine does not say)."""

    @property
    def requests(self) -> int:
        return self.waiting + self.running


def _entries(payload: Any) -> list[dict]:
    """The per-rank entries of either answer."""
    if isinstance(payload, dict) and isinstance(payload.get("loads"), list):
        payload = payload["loads"]
    return [e for e in (payload if isinstance(payload, list) else [payload]) if isinstance(e, dict)]


def _count(entry: dict, key: str) -> int:
    return int(entry.get(key, 0) or 0)


def parse_load(payload: Any) -> EngineLoad:
    """The load in a /v1/loads answer (SGLang 0.5.23) or a /get_load one (older), summed over DP ranks."""
    waiting = running = used = capacity = 0
    for e in _entries(payload):
        w = _count(e, "num_waiting_reqs")
        waiting += w
        # /get_load's num_reqs counts the running and the waiting requests together.
        running += _count(e, "num_running_reqs") if "num_running_reqs" in e else max(0, _count(e, "num_reqs") - w)
        used += _count(e, "num_used_tokens") if "num_used_tokens" in e else _count(e, "num_tokens")
        capacity += _count(e, "max_total_num_tokens")
    return EngineLoad(waiting, running, used / capacity if capacity else 0.0)


async def read_load(http: httpx.AsyncClient, base_url: str, timeout_s: float = 5.0) -> EngineLoad | None:
    """The engine's load, or None when it answers with an error status. Transport errors and a body that is
    not JSON raise (httpx.HTTPError, ValueError): each caller knows what a silent engine means to it."""
    base_url = base_url.rstrip("/")
    if base_url not in _legacy_engines:
        resp = await http.get(base_url + LOADS_ROUTE, timeout=timeout_s)
        if resp.status_code != 404:
            return parse_load(resp.json()) if resp.status_code == 200 else None
        _legacy_engines.add(base_url)
    resp = await http.get(base_url + LEGACY_LOAD_ROUTE, timeout=timeout_s)
    if resp.status_code == 404:  # neither route: another server took the address; ask anew next time
        _legacy_engines.discard(base_url)
    return parse_load(resp.json()) if resp.status_code == 200 else None


def error_message(body: Any) -> str:
    """The message of an SGLang error answer (a parsed body, or its text), in any of its three shapes; the
    text itself when it is none of them."""
    if isinstance(body, (str, bytes)):
        try:
            body = json.loads(body)
        except ValueError:
            return body.decode(errors="replace") if isinstance(body, bytes) else body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return body["message"]
    return json.dumps(body)


__all__ = ["EngineLoad", "LEGACY_LOAD_ROUTE", "LOADS_ROUTE", "error_message", "parse_load", "read_load"]
