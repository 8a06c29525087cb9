"""What tandem's clients read of SGLang 0.5.23's answers, and send it, checked without a server: load reports
(/v1/loads, and /get_load from older releases), the three shapes of an error, and the sampling fields tandem
sends. The answers below are the real server's (SGLang 0.5.23 on this CPU, tiny Qwen3), trimmed."""

from __future__ import annotations

import asyncio

import httpx

from tandem.config import build_config
from tandem.engine.sampling_params import SGLANG_SAMPLING_FIELDS
from tandem.engine_api import LEGACY_LOAD_ROUTE, LOADS_ROUTE, EngineLoad, error_message, parse_load, read_load
from tandem.rollout import sampling_params_from_config

V1_LOADS = {  # GET /v1/loads, 0.5.23 (two requests running, one waiting)
    "timestamp": "2026-12-06T06:17:41.881978+00:00", "version": "0.5.23", "accelerator": None, "num_accelerators": 1,
    "loads": [{"timestamp": 1796537861.88, "dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1,
               "num_waiting_uncached_tokens": 7, "num_used_tokens": 4096, "num_total_tokens": 4103,
               "max_total_num_tokens": 16384, "max_running_requests": 64, "token_usage": 0.25,
               "memory": {"weight_gb": 0.007, "kv_cache_gb": 0.008, "graph_gb": 0.0, "token_capacity": 16384},
               "queues": {"waiting": 1, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0}}]}
GET_LOAD = [{"dp_rank": 0, "num_reqs": 3, "num_waiting_reqs": 1, "num_tokens": 4096, "max_total_num_tokens": 16384}]
"""GET /get_load of a release from before /v1/loads: num_reqs counts running and waiting together."""


def test_both_load_answers_read_alike():
    assert parse_load(V1_LOADS) == parse_load(GET_LOAD) == EngineLoad(waiting=1, running=2, kv_usage=0.25)
    assert parse_load(V1_LOADS).requests == 3
    two_ranks = {"loads": [V1_LOADS["loads"][0], {**V1_LOADS["loads"][0], "num_running_reqs": 0}]}
    assert parse_load(two_ranks) == EngineLoad(waiting=2, running=2, kv_usage=0.25)
    assert parse_load({"error": "x"}) == EngineLoad(0, 0, 0.0)


def _server(routes: dict[str, object], asked: list[str]) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        body = routes.get(request.url.path)
        return httpx.Response(404, json={"detail": "Not Found"}) if body is None else httpx.Response(200, json=body)
    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


def test_an_engine_is_asked_at_v1_loads_and_an_older_one_at_get_load_from_then_on():
    async def reads(routes: dict[str, object], url: str) -> tuple[list[EngineLoad | None], list[str]]:
        asked: list[str] = []
        async with _server(routes, asked) as http:
            return [await read_load(http, url) for _ in range(3)], asked

    loads, asked = asyncio.run(reads({LOADS_ROUTE: V1_LOADS}, "http://current:1"))
    assert loads == [parse_load(V1_LOADS)] * 3 and asked == [LOADS_ROUTE] * 3
    loads, asked = asyncio.run(reads({LEGACY_LOAD_ROUTE: GET_LOAD}, "http://older:1"))
    assert loads == [parse_load(GET_LOAD)] * 3
    assert asked == [LOADS_ROUTE, LEGACY_LOAD_ROUTE, LEGACY_LOAD_ROUTE, LEGACY_LOAD_ROUTE]  # the 404 once
    loads, asked = asyncio.run(reads({}, "http://neither:1"))
    assert loads == [None] * 3 and asked.count(LOADS_ROUTE) == 3  # never settled on the old route


def test_every_shape_of_an_sglang_error_gives_its_message():
    contract = {"error": "unknown field `brand_new_knob`, expected one of `max_new_tokens`, `stop`"}
    value_error = {"error": {"message": "temperature must be non-negative, got -1.0."}}
    validation = {"object": "error", "message": "1 validation error: Field required", "type": "Bad Request",
                  "param": None, "code": 400}
    assert error_message(contract).startswith("unknown field `brand_new_knob`")
    assert error_message(value_error) == "temperature must be non-negative, got -1.0."
    assert error_message(validation) == "1 validation error: Field required"
    assert error_message('{"error": {"message": "as text"}}') == "as text"
    assert error_message("Internal Server Error") == "Internal Server Error"


def test_tandem_sends_only_sampling_fields_sglang_knows():
    """SGLang 0.5.23 refuses a sampling field it does not know; every one tandem's config can produce is its."""
    cfg = build_config({"rollout": {"sampling": {"stop": ["\n"], "top_k": 5, "temperature": 0.7}}})
    sent = sampling_params_from_config(cfg)
    assert set(sent) <= set(SGLANG_SAMPLING_FIELDS) and sent["stop"] == ["\n"]
