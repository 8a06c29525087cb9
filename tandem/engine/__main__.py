"""`python -m tandem.engine --run-config R/views/engine.json --port P --name engine0`

Starts one SGLang-API engine process on 127.0.0.1:P with the backend named by
engine.backend ("embedded": tandem's HF-model engine; "sim": the latency-model engine).
engine.backend = "sglang" runs real SGLang servers, which the launcher starts itself.

`python -m tandem.engine serve --host 0.0.0.0 --port 30000 [--api-key-env VAR] [--model.path M ...]`

Starts one engine on its own, for a run on another host (engine.backend = "external"): the
config comes from config.toml (or --config FILE) and `--section.key value` overrides, as for
train.py; with --api-key-env, every route but /health wants SGLang's bearer key.

Torch intra-op threads: --torch-threads, else $TANDEM_TORCH_THREADS, else
cpu_count // (engine.count + 1) (at least 1), so N engines plus a trainer on a small box do
not oversubscribe the cores (oversubscribed OpenMP spinning costs 10-50x on a busy CPU).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import logging.config
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from tandem import registry
from tandem.auth import MissingApiKey, api_key_from_env
from tandem.config import ENGINE_BACKENDS, ENGINE_VIEW, ConfigError, EngineCommon, child_view, load_config, read_view
from tandem.config.views import EngineView
from tandem.engine.http import build_app
from tandem.model_source import resolve_model_path
from tandem.quiet import quiet


def _log_config(level: str) -> dict[str, Any]:
    """uvicorn and tandem loggers, all to stdout (the launcher captures stdout per child)."""
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"

    handler = {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stdout",
               **({"filters": ["probe_noise"]} if quiet() else {})}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": fmt}},
        "filters": {"probe_noise": {"()": "tandem.quiet.ProbeNoise"}},
        "handlers": {"stdout": handler},
        "loggers": {
            "uvicorn": {"handlers": ["stdout"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"handlers": ["stdout"], "level": level.upper(), "propagate": False},
            "uvicorn.access": {"handlers": ["stdout"], "level": "WARNING", "propagate": False},
            "tandem": {"handlers": ["stdout"], "level": level.upper(), "propagate": False},
        },
    }


def default_torch_threads(engine_count: int) -> int:
    return max(1, (os.cpu_count() or 1) // (engine_count + 1))


def served_backends() -> list[str]:
    """The engine backends this server runs (their config model names a `core`)."""
    return sorted(name for name, model in ENGINE_BACKENDS.items() if model.core is not None)


def _fail(name: str, message: str, code: int = 2) -> None:
    print(f"tandem.engine[{name}]: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tandem.engine", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-config", required=True, help="the run's resolved config.json")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", default="engine0", help="engine name (logs, server_info, sampling seed)")
    ap.add_argument("--host", default="127.0.0.1", help="loopback address to bind (non-loopback is refused)")
    ap.add_argument("--torch-threads", type=int, default=None)
    ap.add_argument("--log-level", default="info")
    return ap


def _check_loopback(name: str, host: str) -> None:
    try:
        if not ipaddress.ip_address(host).is_loopback:
            _fail(name, f"--host {host} is not a loopback address; engines bind to 127.0.0.1 only")
    except ValueError:
        _fail(name, f"--host {host!r} is not an IP address")


def _load_run_config(name: str, path: str) -> EngineView:
    """The run config, refused early (before torch is imported) when this process cannot serve it."""
    try:
        cfg = read_view(path, ENGINE_VIEW)
    except Exception as err:  # missing file, bad JSON, invalid values
        _fail(name, f"cannot read run config {path!r}: {err}")

    backend = cfg.engine.backend
    if type(cfg.engine).core is None:
        _fail(name, f"engine.backend = {backend!r} is not served by `python -m tandem.engine` "
                    f"(choose one of {served_backends()}; 'sglang' servers are launched directly)")

    mp = cfg.model.path
    if mp != "tiny" and (os.path.isabs(mp) or mp.startswith((".", "~"))) and not os.path.isdir(os.path.expanduser(mp)):
        _fail(name, f"cannot load model from {mp!r}: no such directory")
    return cfg


@dataclass
class LoadedCore:
    core: Any
    backend: str
    model_path: str
    torch_threads: int
    started_at: float
    """perf_counter() when loading the model began (the startup log reports the load time)."""


def make_core(args: argparse.Namespace, cfg: EngineView) -> LoadedCore:
    """The configured backend's core with its model loaded; exits with one error line if it cannot."""
    name = args.name
    threads = args.torch_threads or int(os.environ.get("TANDEM_TORCH_THREADS", "0")) or \
        default_torch_threads(cfg.engine.count)
    import torch

    torch.set_num_threads(threads)

    t0 = time.perf_counter()
    try:
        model_path = resolve_model_path(cfg)
    except Exception as err:
        _fail(name, f"cannot build/resolve model {cfg.model.path!r}: {err}")
    core_cls = registry.load(type(cfg.engine).core, "engine.backend")
    try:
        core = core_cls.from_config(cfg, model_path=model_path, name=name)
    except Exception as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        _fail(name, f"cannot load model from {model_path!r}: {type(err).__name__}: {reason}")
    return LoadedCore(core, cfg.engine.backend, model_path, threads, t0)


def serve(loaded: LoadedCore, args: argparse.Namespace, api_key: str | None = None) -> None:
    """Serve SGLang's HTTP API from the core until the process is stopped."""
    app = build_app(loaded.core, name=args.name, api_key=api_key)
    logging.getLogger("tandem.engine").info(
        "%s: %s backend, model %s loaded in %.1fs, torch threads %d; serving on http://%s:%d",
        args.name, loaded.backend, loaded.model_path, time.perf_counter() - loaded.started_at,
        loaded.torch_threads, args.host, args.port)

    import uvicorn

    uvicorn.run(app, host=args.host, port=args.port, log_config=_log_config(args.log_level),
                access_log=False, timeout_keep_alive=60, lifespan="on")


def build_serve_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tandem.engine serve",
                                 description="Serve one engine on its own, for a run elsewhere (engine.backend = "
                                             "'external'). Other --section.key value options override config.toml.")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: reachable from other hosts)")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--backend", choices=served_backends(), default="embedded")
    ap.add_argument("--name", default="engine0", help="engine name (logs, server_info, sampling seed)")
    ap.add_argument("--api-key-env", default="", help="environment variable holding the API key clients must send")
    ap.add_argument("--torch-threads", type=int, default=None)
    ap.add_argument("--log-level", default="info")
    return ap


def _standalone_config(args: argparse.Namespace, overrides: list[str]) -> EngineView:
    try:
        cfg = load_config(overrides)
    except ConfigError as err:
        _fail(args.name, str(err))
    view = child_view(cfg, ENGINE_VIEW).model_dump(mode="json")
    if cfg.engine.backend != args.backend:
        # the trainer's config may say "external": this process is the engine, with the common settings
        view["engine"] = {k: v for k, v in view["engine"].items() if k in EngineCommon.model_fields}
    view["engine"].update(backend=args.backend, count=1)
    return ENGINE_VIEW.model_validate(view)


def _prepare_process(log_level: str) -> None:
    # No downloads at run time: hub ids resolve from the local cache or fail at once.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.config.dictConfig(_log_config(log_level))


def serve_standalone(argv: list[str]) -> None:
    args, overrides = build_serve_parser().parse_known_args(argv)
    try:
        api_key = api_key_from_env(args.api_key_env)
    except MissingApiKey as err:
        _fail(args.name, str(err))
    try:
        if not ipaddress.ip_address(args.host).is_loopback and not api_key:
            print(f"tandem.engine[{args.name}]: warning: serving on {args.host} without --api-key-env: anyone who "
                  f"reaches this port can generate and replace the weights", file=sys.stderr, flush=True)
    except ValueError:
        _fail(args.name, f"--host {args.host!r} is not an IP address")
    cfg = _standalone_config(args, overrides)
    _prepare_process(args.log_level)
    serve(make_core(args, cfg), args, api_key)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        serve_standalone(argv[1:])
        return
    args = build_parser().parse_args(argv)
    _check_loopback(args.name, args.host)
    cfg = _load_run_config(args.name, args.run_config)
    _prepare_process(args.log_level)
    serve(make_core(args, cfg), args)


if __name__ == "__main__":
    main()
