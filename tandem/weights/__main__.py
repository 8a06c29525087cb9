"""`python -m tandem.weights agent --source URL --local-dir DIR --engine URL`: the weight agent
beside one engine (see tandem/weights/agent.py). Credentials for the store come from the
environment as fsspec reads them (AWS_ACCESS_KEY_ID, …); --storage-options takes the rest."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from tandem.auth import MissingApiKey, bearer_headers
from tandem.weights.agent import WeightAgent
from tandem.weights.store import WeightStore


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tandem.weights", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    agent = sub.add_parser("agent", help="download each new weight version, verify it, load it into the engine")
    agent.add_argument("--source", required=True, help="the trainer's sync.url (s3://…, gs://…, or a path)")
    agent.add_argument("--local-dir", required=True, help="host-local directory the engine loads versions from")
    agent.add_argument("--engine", required=True, help="the engine's base URL, e.g. http://127.0.0.1:30000")
    agent.add_argument("--api-key-env", default="", help="environment variable holding the engine's API key")
    agent.add_argument("--storage-options", default="{}", help="JSON object passed to fsspec "
                       "(e.g. '{\"endpoint_url\": \"http://minio:9000\"}')")
    agent.add_argument("--poll-interval-s", type=float, default=1.0, help="how often to look for a new version")
    agent.add_argument("--keep-last", type=int, default=2, help="versions kept on local disk")
    agent.add_argument("--reload-timeout-s", type=float, default=300.0, help="timeout of one engine reload")
    agent.add_argument("--partial-rollout", choices=["drain", "abort", "continue"], default=None,
                       help="override the policy the trainer wrote into each version's manifest")
    return ap


async def run_agent(args: argparse.Namespace) -> None:
    import httpx

    try:
        options = json.loads(args.storage_options)
    except json.JSONDecodeError as err:
        raise SystemExit(f"error: --storage-options is not a JSON object: {err}") from None
    try:
        headers = bearer_headers(args.api_key_env)
    except MissingApiKey as err:
        raise SystemExit(f"error: --api-key-env: {err}") from None
    store = WeightStore(args.source, options)
    async with httpx.AsyncClient(headers=headers) as http:
        agent = WeightAgent(store, Path(args.local_dir), args.engine, http, keep_last=args.keep_last,
                            reload_timeout_s=args.reload_timeout_s, policy=args.partial_rollout)
        print(f"tandem.weights agent: watching {args.source} for {args.engine}; local copies in {args.local_dir}",
              file=sys.stderr, flush=True)
        await agent.run(args.poll_interval_s)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(run_agent(args))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
