"""Which config keys the suite sets to a non-default value: a static reading of tests/ (test_config_coverage.py).

The keys: every leaf of `TandemConfig`, each backend's own sub-table included ([engine.sim], [trainer.megatron],
...), and the typed arguments of the bundled environments (environment.args.*, registry.ENVIRONMENTS).

A key counts as set when a file under tests/ (Python read as its syntax tree, TOML and JSON parsed), or a
configs/*.toml that a test names, sets it in one of the ways a test can:
- a command-line option in a list, tuple or string: `"--trainer.loss.tis", "true"`, `"--steps=3"`, a shorthand
  (`--engines`, `--mode`, ...) or a flag (`--rehearse`);
- a nested or dotted dict literal from the root: `{"trainer": {"loss": {"tis": True}}}`, `{"run.steps": 3}`;
- a section model built with the key as a keyword: `LossConfig(tis=True)`, `SandboxConfig(memory_mb=64)`;
- a keyword to a helper that forwards its **kwargs into the tree (`harness_cfg(tmp, harness_command=...)` building
  {"rollout": rollout}), defined in the same file or in a helper module (tests/_*.py);
- an attribute assignment, `cfg.trainer.loss.tis = True` (or `monkeypatch.setattr(cfg.run, "steps", 3)`): its
  chain of attribute names must end with the key's full path, or with at least its last two components;
- a TOML table in a string literal or a .toml file: `[trainer.loss]` then `tis = true`.
A literal value equal to the key's default does not count; a value the reading cannot know (a variable, a call,
an f-string) counts, since a test passes it on purpose. This is a static reading: it proves that some test
gives the key a non-default value, not that the test checks its effect; the mutants do that part.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
import tomllib
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel

from tandem import registry
from tandem.config import SHORTHANDS, TandemConfig
from tandem.config.base import backend_variants
from tandem.config.command_line import FLAGS, _parse_value

UNKNOWN = object()
"""A value the static reading cannot know: counted as non-default."""


# --------------------------------------------------------------------------- the keys
def schema_keys() -> tuple[dict[str, Any], dict[str, list[tuple[str, ...]]]]:
    """({dotted key: its default}, {section model's class name: the paths it sits at})."""
    keys: dict[str, Any] = {}
    models: dict[str, list[tuple[str, ...]]] = {}
    _walk(TandemConfig, (), keys, models)
    for env in registry.ENVIRONMENTS.values():
        if env.args:
            _walk(registry.load(env.args), ("environment", "args"), keys, models)
    return keys, models


def _walk(model: type[BaseModel], prefix: tuple[str, ...], keys: dict, models: dict) -> None:
    models.setdefault(model.__name__, []).append(prefix)
    for name, field in model.model_fields.items():
        sub = field.annotation
        variants = backend_variants(sub)
        for variant in variants.values():
            _walk(variant, (*prefix, name), keys, models)
        if variants:
            continue
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            _walk(sub, (*prefix, name), keys, models)
            continue
        dotted = ".".join((*prefix, name))
        if dotted not in keys:  # a common key of a section by backend: the default backend's default
            keys[dotted] = field.get_default(call_default_factory=True)


# --------------------------------------------------------------------------- what the tests set
def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


def _flatten(tree: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) of every entry of a nested dict, dotted keys split; a dict value is also a value."""
    if not isinstance(tree, dict):
        return
    for key, value in tree.items():
        if not isinstance(key, str):
            continue
        path = (*prefix, *key.split("."))
        yield path, value
        yield from _flatten(value, path)


def _dict_literal(node: ast.Dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for k, v in zip(node.keys, node.values):
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            continue
        path = (*prefix, *k.value.split("."))
        yield path, _literal(v)
        if isinstance(v, ast.Dict):
            yield from _dict_literal(v, path)


def _cli(tokens: list[Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Options in a token sequence (str for a literal, UNKNOWN for anything else)."""
    for i, token in enumerate(tokens):
        if not isinstance(token, str) or not token.startswith("--"):
            continue
        name, eq, inline = token.partition("=")
        if name in FLAGS:
            key, value = FLAGS[name]
            yield tuple(key.split(".")), value
            continue
        key = SHORTHANDS.get(name) or (name[2:] if "." in name else None)
        if key is None:
            continue
        text = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else UNKNOWN)
        yield tuple(key.split(".")), _parse_value(text) if isinstance(text, str) and text else UNKNOWN


def _token(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        head = str(node.values[0].value)  # f"--run.run_dir={tmp}": the option is known, its value is not
        return head if "=" in head else UNKNOWN
    return UNKNOWN


def _toml(text: str) -> Iterator[tuple[tuple[str, ...], Any]]:
    if "=" not in text or "\n" not in text:
        return
    try:
        tree = tomllib.loads(textwrap.dedent(text))
    except tomllib.TOMLDecodeError:
        return
    yield from _flatten(tree)


def _dict_nodes(node: ast.Dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], ast.AST]]:
    """(path, value node) of a nested dict literal; a `**spread` entry sits at its dict's own path."""
    for k, v in zip(node.keys, node.values):
        if k is None:
            yield prefix, v
        elif isinstance(k, ast.Constant) and isinstance(k.value, str):
            path = (*prefix, *k.value.split("."))
            yield path, v
            if isinstance(v, ast.Dict):
                yield from _dict_nodes(v, path)


def _forwarders(tree: ast.AST, models: dict[str, list[tuple[str, ...]]]) -> dict[str, list[tuple[str, ...]]]:
    """{a helper's name: the config paths its **kwargs land at}: `def run(tmp, **loss)` building
    {"trainer": {"loss": loss}}, or `def policy(**kw)` building AutoscaleConfig(**{**base, **kw}) (the
    keywords of a dict(...) it spreads there too); its callers' keywords then set keys under those paths."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.args.kwarg is None:
            continue
        kw = fn.args.kwarg.arg
        is_kw = lambda n: isinstance(n, ast.Name) and n.id == kw  # noqa: E731
        lands = []
        for node in ast.walk(fn):
            if isinstance(node, ast.Dict):
                lands += [path for path, value in _dict_nodes(node) if path and is_kw(value)]
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                spread = [k.value for k in node.keywords if k.arg is None]
                if any(is_kw(v) or isinstance(v, ast.Dict) and any(is_kw(x) for _, x in _dict_nodes(v))
                       for v in spread):
                    lands += models.get(name, [])
        if lands:
            out[fn.name] = lands
    return out


def _forwarded_defaults(tree: ast.AST, forwards: dict[str, list[tuple[str, ...]]]) -> Iterator[tuple[tuple, Any]]:
    """The keywords of a dict(...) inside a forwarding helper (`base = dict(min=1, ...)`, spread beside its
    **kwargs): they land where the kwargs do."""
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in forwards:
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
                    for prefix in forwards[fn.name]:
                        yield from (((*prefix, k.arg), _literal(k.value)) for k in node.keywords if k.arg)


def _chain(node: ast.AST) -> tuple[str, ...]:
    """`a.b.c` -> ("b", "c"): the attribute names after the root object."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return tuple(reversed(names))


class Settings:
    """Everything a set of files sets: exact paths from the root, and attribute chains (suffixes)."""

    def __init__(self, models: dict[str, list[tuple[str, ...]]]):
        self.models = models
        named: dict[str, set[tuple[str, ...]]] = {}
        for prefixes in models.values():
            for prefix in prefixes:
                if prefix:
                    named.setdefault(prefix[-1], set()).add(prefix)
        self.sections = {name: next(iter(p)) for name, p in named.items() if len(p) == 1}
        """A section's name -> its path, where the name is unique (sandbox -> environment.args.sandbox)."""
        self.exact: list[tuple[tuple[str, ...], Any, str]] = []
        self.chains: list[tuple[tuple[str, ...], Any, str]] = []
        self.shared_forwards: dict[str, list[tuple[str, ...]]] = {}
        """Forwarding helpers of the suite's helper modules (tests/_*.py), which other files import and call."""

    def read_helpers(self, paths: list[Path]) -> None:
        for path in paths:
            if path.suffix == ".py" and path.name.startswith("_"):
                try:
                    self.shared_forwards.update(_forwarders(ast.parse(path.read_text(errors="replace")), self.models))
                except SyntaxError:
                    continue

    def read(self, path: Path, where: str) -> None:
        text = path.read_text(errors="replace")
        if path.suffix == ".py":
            try:
                self._python(ast.parse(text), where)
            except SyntaxError:
                return
        elif path.suffix == ".toml":
            self.exact += [(p, v, where) for p, v in _toml(text + "\n")]
        elif path.suffix == ".json":
            try:
                self.exact += [(p, v, where) for p, v in _flatten(json.loads(text))]
            except ValueError:
                return

    def _python(self, tree: ast.AST, where: str) -> None:
        self.forwards = {**self.shared_forwards, **_forwarders(tree, self.models)}  # a file's own name wins
        self.exact += [(p, v, where) for p, v in _forwarded_defaults(tree, self.forwards)]
        for node in ast.walk(tree):
            if isinstance(node, (ast.List, ast.Tuple)):
                tokens = [_token(e) for e in node.elts]
                self.exact += [(p, v, where) for p, v in _cli(tokens)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if " --" in node.value or node.value.startswith("--") and len(node.value.split()) > 1:
                    self.exact += [(p, v, where) for p, v in _cli(node.value.split())]
                self.exact += [(p, v, where) for p, v in _toml(node.value)]
            elif isinstance(node, ast.Dict):
                self.exact += [(p, v, where) for p, v in _dict_literal(node)]
            elif isinstance(node, ast.Call):
                self._call(node, where)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = UNKNOWN if isinstance(node, ast.AugAssign) or node.value is None else _literal(node.value)
                self.chains += [(_chain(t), value, where) for t in targets if isinstance(t, ast.Attribute)]

    def _call(self, node: ast.Call, where: str) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        for prefix in [*self.models.get(name, []), *self.forwards.get(name, [])]:  # LossConfig(tis=True)
            for kw in node.keywords:
                if kw.arg is None:
                    continue
                self.exact.append(((*prefix, kw.arg), _literal(kw.value), where))
                if isinstance(kw.value, ast.Dict):
                    self.exact += [(p, v, where) for p, v in _dict_literal(kw.value, (*prefix, kw.arg))]
        for kw in node.keywords:  # a section's table given to a helper: lora_tree(tmp, trainer={"lr": 0.1})
            if kw.arg in self.sections and isinstance(kw.value, ast.Dict):
                self.exact += [(p, v, where) for p, v in _dict_literal(kw.value, self.sections[kw.arg])]
        if len(node.args) >= 2 and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and "." in node.args[0].value:  # a helper given a dotted key and its value: tree_with("a.b", 5)
            self.exact.append((tuple(node.args[0].value.split(".")), _literal(node.args[1]), where))
        if name == "setattr" and len(node.args) == 3 and isinstance(node.args[1], ast.Constant):
            chain = (*_chain(node.args[0]), str(node.args[1].value))  # monkeypatch.setattr(cfg.run, "steps", 3)
            self.chains.append((chain, _literal(node.args[2]), where))

    def setters(self, key: str, default: Any) -> list[str]:
        """Where `key` is set to something other than `default` (file names, sorted)."""
        path = tuple(key.split("."))
        found = {where for p, v, where in self.exact if p == path and _differs(v, default)}
        found |= {where for chain, v, where in self.chains if _chain_sets(chain, path) and _differs(v, default)}
        return sorted(found)


def _chain_sets(chain: tuple[str, ...], path: tuple[str, ...]) -> bool:
    if chain[-len(path):] == path:
        return True
    return len(chain) >= 2 and path[-len(chain):] == chain


def _differs(value: Any, default: Any) -> bool:
    if value is UNKNOWN:
        return True
    norm = lambda v: list(v) if isinstance(v, tuple) else v  # noqa: E731 - TOML and JSON have no tuples
    try:
        return norm(value) != norm(default)
    except Exception:  # an odd default that cannot compare: a set value is a set value
        return True


SELF = ("_config_keys.py", "test_config_coverage.py")
"""The reading and its test: their key names (the exceptions, a planted example) set nothing."""
CONFIG_NAME = re.compile(r"configs/([A-Za-z0-9_.-]+\.toml)")


def test_files(tests_dir: Path) -> list[Path]:
    """The files whose settings count: tests/ (helpers and fixtures too), and the configs/*.toml they name."""
    files = [p for p in sorted(tests_dir.rglob("*")) if p.suffix in (".py", ".toml", ".json") and p.is_file()
             and "__pycache__" not in p.parts and p.name not in SELF]
    named = {m for p in files if p.suffix == ".py" for m in CONFIG_NAME.findall(p.read_text(errors="replace"))}
    configs = tests_dir.parent / "configs"
    return files + [configs / name for name in sorted(named) if (configs / name).is_file()]


def coverage(tests_dir: Path) -> dict[str, list[str]]:
    """{every config key: the files that set it off its default ([] for none)}."""
    keys, models = schema_keys()
    settings = Settings(models)
    settings.read_helpers(test_files(tests_dir))
    for path in test_files(tests_dir):
        settings.read(path, path.name if path.parent == tests_dir else str(path.relative_to(tests_dir.parent)))
    return {key: settings.setters(key, default) for key, default in keys.items()}
