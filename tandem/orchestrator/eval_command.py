"""`tandem eval RUN_DIR [--version N ... | --all] [--data PATH]`: evaluate a run's weight versions
after (or during) the run, with the run's own config, on engines this command starts.

The held-out prompts, the rollout function or environment, the reward and the sampling settings are
the run's (config.json); `--data` evaluates another held-out file instead. A version's weights are
its published directory (weights/step_V) or, once pruned by sync.keep_last, the checkpoint that
holds it (checkpoints/step_N/hf); version 0 is the starting model. With greedy decoding
(eval.temperature = 0) a version's figures equal the run's own evaluation of it (eval.jsonl).

Rows go to RUN_DIR/eval_offline.jsonl (one per version; `--out` elsewhere); each version's samples
to RUN_DIR/eval_offline/vV.json, the engines' logs and views to RUN_DIR/eval_offline/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tandem import checkpoint
from tandem.auth import bearer_headers
from tandem.config import ConfigError, TandemConfig, config_from_json
from tandem.eval.heldout import with_held_out
from tandem.eval.in_run import write_samples
from tandem.eval.measure import evaluate
from tandem.model_source import load_tokenizer, resolve_model_path
from tandem.orchestrator import exit_status
from tandem.orchestrator.cluster import start_engines, start_router
from tandem.orchestrator.launcher import rollout_of_config
from tandem.paths import PROJECT_ROOT
from tandem.placement import plan_placement, visible_gpu_count
from tandem.rollout import (EngineClient, RolloutContext, load_dataset_rows, load_reward_fn,
                            sampling_params_from_config)
from tandem.supervisor import Supervisor
from tandem.weights.publish import published_versions, version_dir
from tandem.weights.reload import reload_engines

SCRATCH = "eval_offline"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tandem eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/<run>)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", type=int, action="append", metavar="N",
                       help="a weight version to evaluate (repeat for several; 0 = the starting model)")
    which.add_argument("--all", action="store_true", help="every version the run still holds, and 0")
    parser.add_argument("--data", metavar="PATH", help="held-out prompts to evaluate on instead of the run's own")
    parser.add_argument("--out", metavar="PATH", help=f"rows to write (default: RUN_DIR/{SCRATCH}.jsonl)")
    return parser.parse_args(argv)


def run_config(run_dir: Path, data: str | None) -> TandemConfig:
    path = run_dir / "config.json"
    if not path.exists():
        raise ConfigError(f"{run_dir}: no config.json (is it a tandem run directory?)")
    tree = json.loads(path.read_text())
    if data:
        tree["eval"] = {**tree.get("eval", {}), "enabled": True, "data_path": data, "holdout_fraction": 0.0}
    tree["run"]["run_dir"] = str(run_dir / SCRATCH)  # the engines' logs and views; the run's own stay
    cfg = TandemConfig.model_validate(tree)
    if not cfg.eval.enabled:
        raise ConfigError(f"{run_dir}: the run had no held-out prompts (eval.enabled = false); pass --data PATH")
    if cfg.trainer.lora.enabled or cfg.sync.encoding == "delta" or cfg.engine.backend == "external":
        raise ConfigError("tandem eval loads whole published versions into engines it starts: runs with "
                          "trainer.lora, sync.encoding = 'delta' or engine.backend = 'external' are not supported")
    return cfg


def version_weights(run_dir: Path, cfg: TandemConfig) -> dict[int, str]:
    """{version: the directory holding its whole weights} for every version the run still holds."""
    found = {}
    for step in checkpoint.complete_steps(run_dir):
        final = checkpoint.final_dir(run_dir, step)
        state = json.loads((final / "orchestrator.json").read_text())
        found[int(state["weight_version"])] = str(final / "hf")
    root = cfg.sync.url or None
    for v in published_versions(run_dir, root):
        found[v] = str(version_dir(run_dir, v, root))
    return dict(sorted(found.items()))


def chosen(args: argparse.Namespace, held: dict[int, str]) -> list[int]:
    if args.all:
        return [0, *held]
    missing = [v for v in args.version if v != 0 and v not in held]
    if missing:
        raise ConfigError(f"--version {missing[0]}: the run holds versions {sorted(held) or 'none'} (and 0, the "
                          f"starting model); older ones were pruned (sync.keep_last, checkpoint.keep_last)")
    return sorted(set(args.version))


async def evaluate_versions(cfg: TandemConfig, engines: dict[str, str], router_url: str, model_path: str,
                            versions: list[int], held: dict[int, str], rows: list[dict]) -> list[dict]:
    """Each version loaded into every engine in turn, then evaluated as the run evaluates it."""
    client = EngineClient(router_url, cfg.rollout.client.concurrency, cfg.rollout.client.request_timeout_s,
                          headers=bearer_headers(cfg.engine.api_key_env))
    rollout_fn = rollout_of_config(cfg)  # a harness's: the run's harness, on an endpoint of its own
    executor = ThreadPoolExecutor(max_workers=cfg.rollout.client.concurrency + 16, thread_name_prefix="eval")
    ctx = RolloutContext(cfg, load_tokenizer(model_path, cfg.model.trust_remote_code), client, executor,
                         load_reward_fn(cfg.rollout.reward), sampling_params_from_config(cfg))
    out = []
    try:
        for version in versions:
            if version:
                await reload_engines(list(engines.values()), held[version], version,
                                     timeout_s=cfg.sync.reload_timeout_s)
            client.weight_version = version
            outcome = await evaluate(ctx, rollout_fn, rows, -1, version)
            row = {k: v for k, v in outcome.row.items() if k != "step"}
            write_samples(Path(cfg.run.run_dir) / f"v{version}.json", outcome)
            print(f"tandem eval: v{version} " + " ".join(f"{k}={row[k]:.4g}" for k in
                                                      ("eval/reward_mean", "eval/pass@1", "eval/pass@k") if k in row),
                  flush=True)
            out.append(row)
    finally:
        if (close_rollout := getattr(rollout_fn, "aclose", None)) is not None:
            await close_rollout()
        await client.close()
        executor.shutdown(wait=False, cancel_futures=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 evaluated, 2 a bad run directory, version or data, 1 an engine failure."""
    args = parse_args(argv)
    run_dir = Path(args.run_dir).expanduser().resolve()
    sup = None
    try:
        cfg = run_config(run_dir, args.data)
        held = version_weights(run_dir, cfg)
        versions = chosen(args, held)
        rows = with_held_out(cfg, load_dataset_rows(cfg.data.path, cfg.data.prompt_key)).held_out
        scratch = Path(cfg.run.run_dir)
        shutil.rmtree(scratch, ignore_errors=True)
        sup = Supervisor(scratch, PROJECT_ROOT)
        model_path = resolve_model_path(cfg)
        engines = start_engines(cfg, sup, plan_placement(cfg, visible_gpu_count()), scratch, model_path)
        router_url = start_router(cfg, sup, engines)
        results = asyncio.run(evaluate_versions(cfg, engines, router_url, model_path, versions, held, rows))
    except exit_status.EXPECTED as err:
        return exit_status.report(err)
    finally:
        if sup is not None:
            sup.shutdown()
    out = Path(args.out).expanduser() if args.out else run_dir / f"{SCRATCH}.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in results))
    print(f"tandem eval: {len(results)} version(s) -> {out}")
    return 0
