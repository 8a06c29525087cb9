"""The config tree: TOML + CLI overrides, fail-fast validation naming the key, generated --help."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tandem.config import ConfigError, TandemConfig, _help_rows, load_config

REPO = Path(__file__).resolve().parents[1]


def test_defaults_are_the_cpu_run():
    cfg = load_config([], config_file=str(REPO / "config.toml"))
    assert cfg.model.path == "tiny"
    assert cfg.engine.backend == "embedded" and cfg.trainer.backend == "torch"


def test_config_toml_matches_the_typed_defaults():
    """config.toml documents every key; it must say exactly what the models default to."""
    tree = tomllib.loads((REPO / "config.toml").read_text())
    assert TandemConfig.model_validate(tree) == TandemConfig()
    # Keys whose default is None (unset) appear commented out.
    flat = {row[0] for row in _help_rows(TandemConfig) if row[2] != "None"}

    def keys(node, prefix=""):
        for k, v in node.items():
            if isinstance(v, dict) and f"--{prefix}{k}" not in flat:
                yield from keys(v, f"{prefix}{k}.")
            else:
                yield f"--{prefix}{k}"

    assert set(keys(tree)) == flat


def test_cli_overrides_and_shorthands(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[rollout]\nsamples_per_prompt = 4\n[trainer.loss]\nkl_coef = 0.1\n')
    cfg = load_config(["--config", str(toml), "--engines", "3", "--mode", "sync", "--steps=7",
                       "--run-dir", "/tmp/x", "--trainer.loss.eps_clip_high", "0.3", "--rollout.stop", '["\\n"]'])
    assert cfg.engine.count == 3 and cfg.run.mode == "sync" and cfg.run.steps == 7
    assert cfg.run.run_dir == "/tmp/x"
    assert cfg.rollout.samples_per_prompt == 4 and cfg.trainer.loss.kl_coef == 0.1
    assert cfg.trainer.loss.eps_clip_high == 0.3 and cfg.rollout.stop == ["\n"]
    assert cfg.effective_staleness == 0


@pytest.mark.parametrize("argv, needle", [
    (["--rollout.foo", "1"], "unknown config key 'rollout.foo'"),
    (["--nosuch.key", "1"], "unknown config key 'nosuch.key'"),
    (["--rollout.max_staleness", "abc"], "'rollout.max_staleness'"),
    (["--engines", "two"], "'engine.count'"),
    (["--mode", "sometimes"], "'run.mode'"),
    (["--engines", "0"], "engine.count"),
    (["--mode", "sync", "--sync.every_k_steps", "2"], "sync.every_k_steps"),
    (["--rollout", "3"], "unknown option '--rollout'"),
    (["--steps"], "needs a value"),
])
def test_bad_input_names_the_key(argv, needle):
    with pytest.raises(ConfigError) as err:
        load_config(argv, config_file=str(REPO / "config.toml"))
    assert needle in str(err.value)


def test_unknown_key_in_file_is_named(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("[engine]\ncuont = 2\n")
    with pytest.raises(ConfigError, match="unknown config key 'engine.cuont'"):
        load_config(["--config", str(toml)])


def documented_fields() -> dict[str, str]:
    """--section.key -> the docstring under that field, read from tandem/config.py's source (not from pydantic)."""
    import ast

    tree = ast.parse((REPO / "tandem" / "config.py").read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}

    def fields(cls: ast.ClassDef, prefix: str):
        body = cls.body
        for i, stmt in enumerate(body):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            nxt = body[i + 1] if i + 1 < len(body) else None
            doc = nxt.value.value if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) else ""
            kind = ast.unparse(stmt.annotation)
            if kind in classes:
                yield from fields(classes[kind], f"{prefix}{stmt.target.id}.")
            else:
                yield f"--{prefix}{stmt.target.id}", " ".join(str(doc).split())

    return dict(fields(classes["TandemConfig"], ""))


def test_help_lists_every_key_with_its_docstring():
    """`python train.py --help` against the source: every field, its docstring, and nothing else."""
    out = subprocess.run([sys.executable, "train.py", "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    documented = documented_fields()
    assert len(documented) > 100
    for flag, doc in documented.items():
        assert doc, f"{flag} has no docstring in tandem/config.py"
        assert f"{flag} (" in text, f"{flag} missing from --help"
        assert doc in text, f"{flag}: its docstring is not in --help"
    listed = {line.split()[0] for line in out.stdout.splitlines() if line.startswith("  --") and "." in line.split()[0]}
    assert listed == set(documented), listed ^ set(documented)
    for short in ("--engines", "--mode", "--steps", "--run-dir", "--config"):
        assert short in text


def test_train_py_help_and_bad_key_exit_codes():
    ok = subprocess.run([sys.executable, "train.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "--rollout.max_staleness" in ok.stdout
    bad = subprocess.run([sys.executable, "train.py", "--rollout.nope", "1"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["error: unknown config key 'rollout.nope'"]
