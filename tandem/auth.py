"""SGLang's `--api-key`: every route but /health* and /metrics wants `Authorization: Bearer <key>`.

tandem keeps the key out of config files and command lines that land in run directories: a
config names the environment variable that holds it (`engine.api_key_env`).
"""

from __future__ import annotations

import hmac
import os
from typing import Any


class MissingApiKey(ValueError):
    """The configured environment variable holding the API key is not set."""


def api_key_from_env(variable: str) -> str | None:
    """The key in `variable`; None when no variable is configured."""
    if not variable:
        return None
    key = os.environ.get(variable)
    if not key:
        raise MissingApiKey(f"the engine API key is read from ${variable}, which is not set")
    return key


def bearer_headers(variable: str) -> dict[str, str]:
    key = api_key_from_env(variable)
    return {"Authorization": f"Bearer {key}"} if key else {}


def add_api_key_middleware(app: Any, api_key: str) -> None:
    """Refuse unauthenticated requests the way SGLang's server does (401, {"error": "Unauthorized"})."""
    from fastapi.responses import JSONResponse

    expected = f"Bearer {api_key}".encode()

    @app.middleware("http")
    async def authenticate(request, call_next):
        path = request.url.path
        if request.method == "OPTIONS" or path.startswith(("/health", "/metrics")):
            return await call_next(request)
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return await call_next(request)
