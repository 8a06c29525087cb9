"""From config.toml (or a saved tree) plus command-line overrides to a validated TandemConfig.

Unknown keys fail before validation, naming the whole dotted key the user typed (or, for
a removed key, why it went and what to do); bad values fail with pydantic's reason, also
naming the key. Both surface as one ConfigError.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tandem.config.base import backend_variants, section_model, variant_only_keys
from tandem.config.command_line import help_rows, help_text, parse_cli
from tandem.config.errors import ConfigError, validation_problems
from tandem.config.renamed import removed_key_message
from tandem.config.schema import TandemConfig
from tandem.paths import PROJECT_ROOT

DEFAULT_CONFIG_FILE = "config.toml"


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"config key '{dotted}': '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _unknown_keys(model: type[BaseModel], tree: dict, prefix: str = "") -> list[str]:
    """One problem per unknown key (its full dotted path, and the key it probably meant), removing
    each from `tree` so the rest is still validated and every problem reported at once. Under a
    section by backend, the keys of the backend the tree chose are known; another backend's
    sub-table is named as such."""
    problems = []
    for key, value in list(tree.items()):
        dotted = f"{prefix}{key}"
        field = model.model_fields.get(key)
        if field is None:
            del tree[key]
            problems += [removed_key_message(leaf) or removed_key_message(dotted) or _unknown(leaf)
                         for leaf in _leaves(dotted, value)]
            continue
        sub = section_model(field.annotation, value)
        if sub is None:
            continue
        if not isinstance(value, dict):
            del tree[key]
            problems.append(f"config key '{dotted}' is a section; got the value {value!r}")
            continue
        variants = backend_variants(field.annotation)
        if variants and value.get("backend", sub.model_fields["backend"].default) not in variants:
            continue  # a bad backend is reported as that key's bad value
        problems += _other_backends_keys(variants, sub, value, dotted)
        problems += _unknown_keys(sub, value, dotted + ".")
    return problems


def _other_backends_keys(variants: dict[str, type[BaseModel]], chosen: type[BaseModel], tree: dict,
                         dotted: str) -> list[str]:
    """Another backend's sub-table under a section by backend: named with the backend it belongs to."""
    problems = []
    for key, owner in variant_only_keys(variants).items():
        if key in tree and key not in chosen.model_fields:
            del tree[key]
            backend = chosen.model_fields["backend"].default
            problems.append(f"config key '{dotted}.{key}' is read only with {dotted}.backend = '{owner}' "
                            f"({dotted}.backend is '{backend}'): set {dotted}.backend or remove [{dotted}.{key}]")
    return problems


def _leaves(dotted: str, value: Any) -> list[str]:
    """The full dotted keys the user typed under `dotted`."""
    if isinstance(value, dict) and value:
        return [leaf for key, sub in value.items() for leaf in _leaves(f"{dotted}.{key}", sub)]
    return [dotted]


def _unknown(dotted: str) -> str:
    guess = suggest(dotted)
    return f"unknown config key '{dotted}'" + (f" (did you mean '{guess}'?)" if guess else "")


OTHER_TRAINERS_NAMES = {"learning_rate": "lr", "max_steps": "steps", "num_generations": "samples_per_prompt",
                        "n_samples_per_prompt": "samples_per_prompt", "output_dir": "run_dir",
                        "max_completion_length": "max_new_tokens", "max_tokens": "max_new_tokens", "beta": "kl_coef",
                        "model_name_or_path": "path", "num_engines": "count"}
"""A setting's name in other trainers (TRL, slime, prime-rl) -> tandem's, for the did-you-mean."""


def suggest(dotted: str) -> str | None:
    """The known key a misspelt one most likely meant: a near name in the same section, else the
    same name in another section (`run.lr` -> `trainer.lr`); a name other trainers use is read as
    tandem's name for it first (`trainer.learning_rate` -> `trainer.lr`)."""
    known = [flag[2:] for flag, *_ in help_rows(TandemConfig)]
    section, _, name = dotted.rpartition(".")
    siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == section]
    name = OTHER_TRAINERS_NAMES.get(name, name)
    close = difflib.get_close_matches(name, siblings, n=1, cutoff=0.75)
    if close:
        return f"{section}.{close[0]}"
    same_name = [k for k in known if k.rpartition(".")[2] == name]
    return same_name[0] if len(same_name) == 1 else None


def _not_json(tree: Any, prefix: str = "") -> list[str]:
    """TOML values that have no JSON form (dates and times): no config key takes one."""
    if isinstance(tree, dict):
        return [p for key, value in tree.items() for p in _not_json(value, f"{prefix}{key}.")]
    if isinstance(tree, (list, tuple)):  # tuples: a tree dumped from a config (a rehearsal's)
        return [p for value in tree for p in _not_json(value, prefix)]
    if tree is None or isinstance(tree, (str, int, float, bool)):
        return []
    return [f"config key '{prefix[:-1]}': a TOML {type(tree).__name__} is not a value any key takes (got {tree!r})"]


def build_config(tree: dict) -> TandemConfig:
    """Validate a config tree strictly (a string is not a number, a float not an integer), reporting
    every unknown key and bad value in one ConfigError."""
    return validate_section(TandemConfig, tree)


def validate_section(model: type[BaseModel], tree: dict, prefix: str = "") -> Any:
    """`tree` validated strictly as `model`, whose keys are named `prefix` + key in the errors (a
    plug-in's typed arguments: validate_section(CodingArgs, cfg.environment.args, "environment.args.")).
    Every problem is reported at once, in one ConfigError."""
    tree = copy.deepcopy(tree)
    problems = _unknown_keys(model, tree, prefix)
    unwritable = _not_json(tree, prefix)
    problems += unwritable
    validated = None
    if not unwritable:
        try:
            # JSON mode: strict, yet TOML's arrays still fill tuples and its integers floats.
            validated = model.model_validate_json(json.dumps(tree), strict=True)
        except ValidationError as err:
            problems += validation_problems(err, model, prefix)
    if not problems:
        return validated
    raise ConfigError(problems[0] if len(problems) == 1 else
                      f"{len(problems)} problems in the config:\n" + "\n".join(f"  - {p}" for p in problems))


def _read_toml(path: str) -> dict[str, Any]:
    if not Path(path).exists():
        raise ConfigError(f"config file '{path}' does not exist")
    try:
        return tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file '{path}' is not valid TOML: {err}") from None


INPUT_PATH_KEYS = ("data.path", "engine.sim.profile", "engine.sim.workload", "environment.args.agent.prompt_file",
                   "environment.args.sandbox.python", "model.path")
"""Keys naming files a run reads. Relative ones in a TOML file mean the file's own directory; on the
command line, the current one (the launcher's absolutize_paths). What a run writes (run.run_dir,
run.cache_dir, environment.args.sandbox.root_dir, sync.url) is relative to the current directory wherever it is written."""


PLUGIN_SPEC_KEYS = ("rollout.function", "rollout.reward", "environment.name")
"""Keys naming a plug-in, 'module:name' or 'file.py:name'. A relative file.py in a TOML file means
the file's own directory when the file is there (else the current one, as before, and as on the
command line), like data.path: a config and its plug-ins travel together."""


def _node_of(tree: dict, dotted: str) -> tuple[dict | None, str]:
    *sections, key = dotted.split(".")
    node: Any = tree
    for name in sections:
        node = node.get(name) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), key


def resolve_plugin_files(tree: dict, base: Path) -> None:
    """'file.py:name' plug-ins of a TOML file's tree, relative to `base` (its directory) where the file is."""
    for dotted in PLUGIN_SPEC_KEYS:
        node, key = _node_of(tree, dotted)
        if node is None:
            continue
        value = node.get(key)
        file, sep, name = value.rpartition(":") if isinstance(value, str) else ("", "", "")
        if sep and file.endswith(".py") and not Path(file).expanduser().is_absolute() and (base / file).is_file():
            node[key] = f"{base / file}:{name}"


def resolve_file_paths(tree: dict, base: Path) -> None:
    """Make the relative input paths of a TOML file's tree absolute against `base`, its directory.
    A path that is not there but is one of the project's shipped files (data/, profiles/) is the
    shipped one, so the bundled configs work from anywhere; model.path and the sandbox's python only
    when they name something there (else a hub id, or a program looked up on PATH). The
    environment's paths are the coding environment's (its prompt file and sandbox interpreter)."""
    resolve_plugin_files(tree, base)
    for dotted in INPUT_PATH_KEYS:
        node, key = _node_of(tree, dotted)
        if node is None:
            continue
        value = node.get(key)
        if not isinstance(value, str) or not value or Path(value).expanduser().is_absolute():
            continue
        here, shipped = base / value, PROJECT_ROOT / value
        if here.exists():
            node[key] = str(here)
        elif shipped.exists():
            node[key] = str(shipped)
        elif dotted not in ("model.path", "environment.args.sandbox.python"):
            node[key] = str(here)  # a missing file is reported where it was looked for


def load_config(argv: list[str] | None = None, *, config_file: str | None = None,
                base_tree: dict | None = None) -> TandemConfig:
    """Load config.toml (or --config FILE, or a given base tree), apply CLI overrides, validate."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cli_file, overrides, want_help = parse_cli(argv)
    if want_help:
        print(help_text())
        raise SystemExit(0)
    if base_tree is not None and cli_file:
        raise ConfigError("--config cannot be combined with --resume (the run's own config.json is used)")
    tree: dict[str, Any] = dict(base_tree or {})
    path = cli_file or config_file
    if base_tree is not None:
        path = None
    elif path is None and Path(DEFAULT_CONFIG_FILE).exists():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        tree = _read_toml(path)
        resolve_file_paths(tree, Path(path).resolve().parent)
    for dotted, value in overrides.items():
        _set_dotted(tree, dotted, value)
    return build_config(tree)


def config_from_json(path: str | os.PathLike) -> TandemConfig:
    """Children read the launcher's resolved config, so every process sees the same values."""
    return TandemConfig.model_validate_json(Path(path).read_text())
