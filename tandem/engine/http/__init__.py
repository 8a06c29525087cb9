"""SGLang's HTTP API (native + OpenAI-compatible) over any `EngineCore`.

Field names, response shapes and status codes follow SGLang's http_server.py / io_struct.py.
Streams are SSE `data: {json}\\n\\n` chunks ending with `data: [DONE]\\n\\n`. Bad input answers
400 in the shape SGLang 0.5.23 gives that error on that route (common.invalid_request_response).

The routes live in one module per concern (native: /generate, health and info; control: weights,
pause, cache, abort; openai: /v1/*). Handlers are plain module-level functions that find the core
at `request.app.state.core`, so `build_app` only wires them together.
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from tandem.engine.core import EngineCore, InvalidRequest
from tandem.auth import add_api_key_middleware
from tandem.engine.http import control, native, openai
from tandem.engine.http.common import ClientGone, error_response, invalid_request_response

__all__ = ["build_app"]

log = logging.getLogger(__name__)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The core runs exactly as long as the app serves."""
    core: EngineCore = app.state.core
    await core.start()
    log.info("%s: %s core started (model %s, weight_version %s)", app.state.engine_name, core.backend,
             core.model_path, core.weight_version)
    try:
        yield
    finally:
        await core.shutdown()


async def _bad_request(request: Request, exc: InvalidRequest) -> Response:
    return invalid_request_response(request.url.path, exc)


async def _client_gone(_: Request, exc: ClientGone) -> Response:
    return Response(status_code=499)  # nobody reads it; nginx's "client closed request"


async def _bad_validation(_: Request, exc: RequestValidationError) -> Response:
    return error_response(f"invalid request: {exc.errors()}", 400)


def build_app(core: EngineCore, *, name: str = "engine", api_key: str | None = None) -> FastAPI:
    """A FastAPI app serving SGLang's HTTP API from `core` (started/stopped with the app); with
    `api_key`, SGLang's bearer-key check on every route but /health*."""
    app = FastAPI(title=f"tandem engine {name}", lifespan=_lifespan, openapi_url=None, docs_url=None,
                  redoc_url=None)
    app.state.core = core
    app.state.engine_name = name
    app.state.created = int(time.time())  # /v1/models' "created"
    # Starlette types a handler as taking any Exception, though it calls each with its own class only.
    app.add_exception_handler(InvalidRequest, _bad_request)  # type: ignore[arg-type]
    app.add_exception_handler(ClientGone, _client_gone)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _bad_validation)  # type: ignore[arg-type]
    for module in (native, control, openai):
        app.include_router(module.router)
    if api_key:
        add_api_key_middleware(app, api_key)
    return app
