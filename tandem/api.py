"""tandem from Python: the launcher's own run, with the config, the data and the plug-ins given as objects.

    import tandem

    def reward(sample, row):
        return float(row["answer"] in sample.response_text)

    rows = [{"prompt": f"Say {d}", "answer": str(d)} for d in range(10)]
    result = tandem.train(dataset=rows, reward=reward, steps=2, engines=1, run_dir="runs/python")
    print(result.run_dir, result.metrics["reward_mean"])

`train` builds the config from the same typed models as config.toml (a TandemConfig, or the defaults)
with keyword overrides validated as strictly as the command line's, checks it (preflight: nothing
starts on a problem), runs the same engines, router, trainer and loop as `tandem train`, and returns
the run's summary. What stops a run raises: ConfigError (exit 2's cause), the failure of a child,
KeyboardInterrupt; every process it started is stopped first.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tandem.config import ConfigError, TandemConfig, build_config
from tandem.orchestrator.launcher import check_inputs, start_run
from tandem.orchestrator.hooks import NO_HOOKS, RunHooks
from tandem.paths import cache_root

SHORTHANDS = {"steps": "run.steps", "engines": "engine.count", "mode": "run.mode", "model": "model.path",
              "run_dir": "run.run_dir", "seed": "run.seed"}
"""Keyword -> config key, as the command line's shorthands (--steps, --engines, ...)."""


@dataclass
class RunSummary:
    run_dir: Path
    steps: int
    """Steps trained (the last metrics row's step)."""
    metrics: dict[str, Any]
    """The last step's row of metrics.jsonl (reward_mean, loss, ...; docs/metrics.md)."""
    history: list[dict[str, Any]]
    """Every step's row, in order."""


def configure(config: TandemConfig | None = None, **overrides: Any) -> TandemConfig:
    """`config` (or the typed models' defaults, which config.toml is written from) with `overrides`:
    a shorthand (steps=, engines=, mode=, model=, run_dir=, seed=), a section as a dict
    (trainer={"lr": 1e-6}), or a dotted key (**{"trainer.lr": 1e-6}); validated strictly, every
    problem named by its key (ConfigError)."""
    tree = config.model_dump() if config is not None else {}
    for key, value in overrides.items():
        dotted = SHORTHANDS.get(key, key)
        if isinstance(value, dict) and "." not in dotted:
            _merge(tree.setdefault(dotted, {}), value)
        else:
            *sections, leaf = dotted.split(".")
            node = tree
            for section in sections:
                node = node.setdefault(section, {})
            node[leaf] = value
    return build_config(tree)


def _merge(into: dict, new: dict) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def plugin_name(fn: Callable) -> str:
    """The 'module:function' a function given as an object is recorded under in the run's config."""
    return f"{fn.__module__}:{fn.__qualname__}"


def dataset_file(rows: list[dict], cfg: TandemConfig) -> str:
    """Rows given as a list, written once as JSONL under the cache (named by their content): the run
    reads them like any data.path, and its config.json names a file that a resume finds again."""
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ConfigError("dataset: give a list of rows (dicts), or a path to a JSONL or parquet file")
    text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    path = cache_root(cfg.run.cache_dir) / "datasets" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return str(path)


def train(config: TandemConfig | None = None, *, dataset: list[dict] | str | None = None,
          reward: Callable | str | None = None, rollout: Callable | str | None = None, overwrite: bool = False,
          hooks: RunHooks = NO_HOOKS, **overrides: Any) -> RunSummary:
    """Train as `tandem train` would, and return the run's summary.

    dataset: a list of rows (each with the prompt under data.prompt_key, "prompt" by default) or a
    path; reward: `fn(sample, row) -> float | (float, dict)`, sync or async, or a 'module:function'
    string; rollout: `async fn(ctx, row, group_size) -> list[Sample]` or a string (docs/environments.md);
    overrides: see `configure`. A run dir that holds a run is refused unless overwrite=True."""
    named = {"rollout.reward": reward, "rollout.function": rollout}
    for key, given in named.items():
        if given is not None:
            overrides[key] = given if isinstance(given, str) else plugin_name(given)
    cfg = configure(config, **overrides)
    if isinstance(dataset, list):
        cfg.data.path = dataset_file(dataset, cfg)
    elif dataset is not None:
        cfg.data.path = str(dataset)
    start_run(cfg, overwrite=overwrite, hooks=hooks, load_inputs=functools.partial(
        check_inputs, reward=reward if callable(reward) else None, rollout=rollout if callable(rollout) else None))
    run_dir = Path(cfg.run.run_dir).expanduser().resolve()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return RunSummary(run_dir, rows[-1]["step"] if rows else 0, rows[-1] if rows else {}, rows)
