"""Bring the node up: engines, sglang-router in front of them, the trainer.

All of them start at once (the router registers each engine as soon as it answers /health),
and each is health-gated on its own budget (tandem.orchestrator.startup); once all are up
`endpoints.json` tells outside clients where they live. `start_engines` and `start_router`
are the same steps one at a time, for tools that want engines without a run.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tandem import registry
from tandem.config import ConfigError, TandemConfig, view_path, write_views
from tandem.auth import bearer_headers
from tandem.placement import Placement, plan_placement, visible_gpu_count
from tandem.orchestrator.startup import Pending, StartupStatus, wait_all
from tandem.supervisor import Child, ChildFailed, Supervisor
from tandem.ports import free_port, port_is_free


@dataclass
class Cluster:
    router_url: str
    engines: dict[str, str]
    """engine name -> base URL"""
    trainer: Child
    placement: Placement
    start_weights: tuple[str, int] | None = None
    """(path, version) the trainer published at start-up for external engines to converge on."""


def _pick_port(configured: int, key: str) -> int:
    if configured == 0:
        return free_port()
    if not port_is_free(configured):
        raise ConfigError(f"{key} = {configured}: port {configured} on 127.0.0.1 is already in use")
    return configured


def engine_command(cfg: TandemConfig, name: str, port: int, run_dir: Path, model_path: str) -> list[str]:
    """tandem's own engine server for the backends it serves (given its view of the config), else
    the backend's own command."""
    if (command := type(cfg.engine).launch_command) is not None:
        return registry.load(command, "engine.backend")(cfg, port=port, model_path=model_path)
    view = view_path(run_dir, "engine")
    return [sys.executable, "-m", registry.ENGINE_SERVER, "--run-config", str(view), "--port", str(port),
            "--name", name]


def trainer_command(cfg: TandemConfig, run_dir: Path) -> list[str]:
    """The trainer process, given its view of the config."""
    view = view_path(run_dir, "trainer")
    if (launch := type(cfg.trainer).launch_command) is not None:
        return registry.load(launch, "trainer.backend")(cfg, str(view))
    return [sys.executable, "-m", "tandem.trainer", "--run-config", str(view)]


def router_ready(router_url: str, n_engines: int):
    """The router is up and has registered every engine."""
    def probe() -> bool:
        r = httpx.get(f"{router_url}/workers", timeout=2.0)
        if r.status_code != 200:
            return False
        body = r.json()
        workers = body.get("workers", body) if isinstance(body, dict) else body
        return isinstance(workers, list) and len(workers) >= n_engines
    return probe


def engine_pending(cfg: TandemConfig, child: Child) -> Pending:
    return Pending(child, Supervisor.http_ok(f"{child.url}/health"), "healthy (GET /health)",
                   cfg.engine.startup_timeout_s, "engine.startup_timeout_s")


def start_engines(cfg: TandemConfig, sup: Supervisor, placement: Placement, run_dir: Path,
                  model_path: str) -> dict[str, str]:
    """Start the engines and wait until every one is healthy."""
    write_views(cfg, run_dir)
    engines, children = launch_engines(cfg, sup, placement, run_dir, model_path)
    wait_all(sup, [engine_pending(cfg, child) for child in children])
    return engines


def launch_engines(cfg: TandemConfig, sup: Supervisor, placement: Placement, run_dir: Path,
                   model_path: str) -> tuple[dict[str, str], list[Child]]:
    """Start the engine processes (no waiting): {name: url} and their children."""
    engines: dict[str, str] = {}
    children: list[Child] = []
    for i in range(cfg.engine.count):
        name = f"engine{i}"
        port = _pick_port(cfg.engine.base_port + i if cfg.engine.base_port else 0, f"engine.base_port (+{i})")
        url = f"http://127.0.0.1:{port}"
        children.append(sup.start(name, engine_command(cfg, name, port, run_dir, model_path),
                                  env=placement.engine_env(i), url=url, role="engine",
                                  # With restarts allowed, the engine doctor handles a dead engine.
                                  critical=cfg.faults.max_engine_restarts == 0))
        engines[name] = url
    return engines, children


def external_engines(cfg: TandemConfig) -> dict[str, str]:
    """engine.backend = 'external': engines someone else started. Health-gate each (GET /health,
    within engine.startup_timeout_s) and check it takes the API key; start and kill nothing."""
    headers = bearer_headers(cfg.engine.api_key_env)
    engines = {f"engine{i}": url for i, url in enumerate(cfg.engine.external.urls)}
    deadline = time.monotonic() + cfg.engine.startup_timeout_s
    for name, url in engines.items():
        probe = Supervisor.http_ok(f"{url}/health")
        while not _answers(probe):
            if time.monotonic() > deadline:
                raise ChildFailed(f"external {name} at {url} did not answer GET /health within "
                                  f"{cfg.engine.startup_timeout_s:.0f}s (engine.startup_timeout_s); is it running, "
                                  f"and reachable from this host?")
            time.sleep(0.5)
        answer = httpx.get(f"{url}/model_info", headers=headers, timeout=10.0)
        if answer.status_code == 404:
            answer = httpx.get(f"{url}/get_model_info", headers=headers, timeout=10.0)
        if answer.status_code in (401, 403):
            raise ConfigError(f"engine.external.urls: {url} refused the API key (HTTP {answer.status_code}); "
                              + (f"check ${cfg.engine.api_key_env}" if cfg.engine.api_key_env
                                 else "it requires one: set engine.api_key_env"))
        if answer.status_code != 200:
            raise ChildFailed(f"external {name} at {url} answered GET /model_info with HTTP {answer.status_code}")
    return engines


def _answers(probe) -> bool:
    try:
        return probe()
    except httpx.HTTPError:
        return False


def router_command(cfg: TandemConfig, port: int, worker_urls: list[str], prometheus_port: int) -> list[str]:
    """sglang-router on loopback only (its Prometheus exporter too), in front of the engines."""
    return [
        sys.executable, "-m", "sglang_router.launch_router",
        "--host", "127.0.0.1", "--port", str(port),
        "--worker-urls", *worker_urls,
        "--policy", cfg.router.policy,
        *(["--assignment-mode", cfg.router.assignment_mode] if cfg.router.policy == "manual" else []),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus_port),
        "--health-check-interval-secs", str(cfg.router.health_check_interval_s),
        # Started beside engines that are still loading: look for them every second, not every 30.
        "--worker-startup-check-interval", "1",
        "--request-timeout-secs", str(int(cfg.rollout.client.request_timeout_s)),
        "--shutdown-grace-period-secs", "0",  # stopped only at the run's end: nobody waits on what it forwards
        "--log-level", "warn",
    ]  # no --api-key: the router forwards each client's Authorization header to the engines


def start_router(cfg: TandemConfig, sup: Supervisor, engines: dict[str, str]) -> str:
    """Start the router in front of running engines and wait until it routes to all of them."""
    child = launch_router(cfg, sup, engines)
    wait_all(sup, [router_pending(cfg, child, len(engines), [])])
    return child.served_url


ROUTER_STOP_GRACE_S = 0.5
"""SIGTERM to SIGKILL for the router (Supervisor's Child.stop_grace_s)."""


def launch_router(cfg: TandemConfig, sup: Supervisor, engines: dict[str, str]) -> Child:
    port = _pick_port(cfg.router.port, "router.port")
    cmd = router_command(cfg, port, list(engines.values()), free_port())
    # The router outlives its SIGTERM by seconds while it holds requests (measured 5 s, the whole grace, on every
    # Ctrl-C of a run: bench/ctrl_c.py), even with no shutdown grace of its own; at the end of a run whatever it
    # still forwards was abandoned by the loop already, so it gets 0.5 s.
    return sup.start("router", cmd, url=f"http://127.0.0.1:{port}", role="router", stop_grace_s=ROUTER_STOP_GRACE_S)


def router_pending(cfg: TandemConfig, child: Child, n_engines: int, engines: list[Pending]) -> Pending:
    return Pending(child, router_ready(child.served_url, n_engines), f"routing to all {n_engines} engine(s)",
                   cfg.router.startup_timeout_s, "router.startup_timeout_s", after=engines)


def launch_trainer(cfg: TandemConfig, sup: Supervisor, placement: Placement, run_dir: Path,
                   extra_args: list[str]) -> Child:
    return sup.start("trainer", trainer_command(cfg, run_dir) + extra_args, env=placement.trainer_env(),
                     role="trainer")


def trainer_pending(cfg: TandemConfig, child: Child, run_dir: Path) -> Pending:
    return Pending(child, (run_dir / "trainer" / "ready.json").exists, "ready (trainer/ready.json)",
                   cfg.trainer.startup_timeout_s, "trainer.startup_timeout_s")


def write_endpoints(run_dir: Path, router_url: str, engines: dict[str, str], placement: Placement,
                    external: bool = False) -> Path:
    payload = {
        "router": router_url,
        "engines": [{"name": n, "url": u, "role": "rollout",
                     "device": "external" if external else placement.engine_device(i)}
                    for i, (n, u) in enumerate(engines.items())],
        "trainer": {"devices": placement.trainer_devices()},
    }
    path = run_dir / "endpoints.json"
    path.write_text(json.dumps(payload, indent=2))
    return path


def check_configured_ports(cfg: TandemConfig) -> None:
    """Fail before anything starts when a port the user pinned is taken."""
    if cfg.router.port:
        _pick_port(cfg.router.port, "router.port")
    if cfg.engine.base_port and cfg.engine.backend != "external":
        for i in range(cfg.engine.count):
            _pick_port(cfg.engine.base_port + i, "engine.base_port")


def start_cluster(cfg: TandemConfig, sup: Supervisor, run_dir: Path, model_path: str,
                  trainer_args: list[str] | None = None, status: StartupStatus | None = None) -> Cluster:
    """Start the engines, the router and the trainer together; return once every one is ready."""
    check_configured_ports(cfg)
    write_views(cfg, run_dir)  # once: every child started now, or later by the autoscaler, reads its own
    placement = plan_placement(cfg, visible_gpu_count())
    external = cfg.engine.backend == "external"
    trainer = launch_trainer(cfg, sup, placement, run_dir, trainer_args or [])
    pending = [trainer_pending(cfg, trainer, run_dir)]
    if external:  # someone else's engines: gated (and their API key checked) while the trainer loads
        engines = external_engines(cfg)
    else:
        engines, children = launch_engines(cfg, sup, placement, run_dir, model_path)
        pending = [engine_pending(cfg, child) for child in children] + pending
    router = launch_router(cfg, sup, engines)
    pending.append(router_pending(cfg, router, len(engines), [p for p in pending if p.child.role == "engine"]))
    wait_all(sup, pending, status)
    router_url = router.served_url
    write_endpoints(run_dir, router_url, engines, placement, external)
    ready = json.loads((run_dir / "trainer" / "ready.json").read_text())
    start_weights = (ready["weights_path"], int(ready["weight_version"])) if "weights_path" in ready else None
    return Cluster(router_url, engines, trainer, placement, start_weights)
