"""The config tree: TOML + CLI overrides, fail-fast validation naming the key, generated --help."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pydantic import BaseModel, ValidationError

from tandem.config.base import backend_variants
from tandem.config import REMOVED_KEYS, ConfigError, TandemConfig, build_config, help_rows, load_config
from tandem.config.errors import key_path

REPO = Path(__file__).resolve().parents[1]


def test_defaults_are_the_cpu_run():
    cfg = load_config([], config_file=str(REPO / "config.toml"))
    assert cfg.model.path == "tiny"
    assert cfg.engine.backend == "embedded" and cfg.trainer.backend == "torch"


def test_config_toml_matches_the_typed_defaults():
    """config.toml documents every key; it must say exactly what the models default to."""
    tree = tomllib.loads((REPO / "config.toml").read_text())
    assert TandemConfig.model_validate(tree) == TandemConfig()
    # Keys whose default is None (unset) appear commented out, and so does each backend's own table
    # (only the chosen backend's may be present): every key is in the file, as a value or commented.
    rows = help_rows(TandemConfig)
    own = [row[0] for row in rows if re.match(r"\[\w+\.backend = '\w+'\]", row[3])]
    flat = {row[0] for row in rows if row[2] != "None" and row[0] not in own}
    text = (REPO / "config.toml").read_text()
    for flag in own:
        table, _, key = flag[2:].rpartition(".")
        block = text.split(f"# [{table}]\n", 1)
        assert len(block) == 2 and re.search(rf"^# {key} = ", block[1].split("\n\n")[0], re.M), flag

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
                       "--run-dir", "/tmp/x", "--trainer.loss.eps_clip_high", "0.3", "--rollout.sampling.stop", '["\\n"]'])
    assert cfg.engine.count == 3 and cfg.run.mode == "sync" and cfg.run.steps == 7
    assert cfg.run.run_dir == "/tmp/x"
    assert cfg.rollout.samples_per_prompt == 4 and cfg.trainer.loss.kl_coef == 0.1
    assert cfg.trainer.loss.eps_clip_high == 0.3 and cfg.rollout.sampling.stop == ["\n"]
    assert cfg.effective_staleness == 0


@pytest.mark.parametrize("argv, needle", [
    (["--rollout.foo", "1"], "unknown config key 'rollout.foo'"),
    (["--nosuch.key", "1"], "unknown config key 'nosuch.key'"),
    (["--rollout.staleness.max", "abc"], "'rollout.staleness.max'"),
    (["--engines", "two"], "'engine.count'"),
    (["--mode", "sometimes"], "'run.mode'"),
    (["--engines", "0"], "engine.count"),
    (["--mode", "sync", "--sync.every_k_steps", "2"], "sync.every_k_steps"),
    (["--rollout", "3"], "unknown option '--rollout'"),
    (["--steps"], "needs a value"),
    # ranges declared on the fields
    (["--engines", "0"], "config key 'engine.count': Input should be greater than or equal to 1 (got 0)"),
    (["--engine.backend", "sim", "--engine.sim.time_scale", "0"],
     "config key 'engine.sim.time_scale': Input should be greater than 0 (got 0)"),
    # a backend's own settings exist only for it
    (["--engine.sim.time_scale", "2"], "config key 'engine.sim' is read only with engine.backend = 'sim' "
                                       "(engine.backend is 'embedded')"),
    (["--engine.backend", "vllm"], "config key 'engine.backend': Input should be one of 'embedded', 'sglang', "
                                   "'sim', 'external' (got 'vllm')"),
    # old keys fail naming the new one
    (["--rollout.max_new_tokens", "4"], "config key 'rollout.max_new_tokens' moved: it is "
                                        "'rollout.sampling.max_new_tokens' now"),
    (["--sandbox.memory_mb", "4"], "config key 'sandbox.memory_mb' moved: it is 'environment.args.sandbox.memory_mb' now"),
    (["--engine.sglang_args", "{}"], "config key 'engine.sglang_args' moved: it is 'engine.sglang.args' now"),
    (["--rollout.sampling.top_p", "1.5"], "config key 'rollout.sampling.top_p': Input should be less than or equal to 1 (got 1.5)"),
    (["--router.port", "70000"], "config key 'router.port': Input should be less than or equal to 65535"),
    (["--trainer.loss.dual_clip_c", "1.0"], "config key 'trainer.loss.dual_clip_c': Input should be greater than 1"),
    (["--trainer.betas", "[0.9, 1.0]"], "config key 'trainer.betas', item 1: Input should be less than 1 (got 1.0)"),
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
    """--section.key -> the docstring under that field, read from the source of the models in
    tandem/config/ (not from pydantic): classes with their bases' fields, and a section by backend
    (`EngineConfig = by_backend("embedded", ENGINE_BACKENDS)`) as the fields of all its backends."""
    import ast

    classes, backends, unions = {}, {}, {}
    for module in sorted((REPO / "tandem" / "config").glob("*.py")):
        tree = ast.parse(module.read_text())
        classes.update({node.name: node for node in tree.body if isinstance(node, ast.ClassDef)})
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                backends[target.id] = [v.id for v in node.value.values if isinstance(v, ast.Name)]
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    getattr(node.value.func, "id", "") == "by_backend":
                unions[node.targets[0].id] = node.value.args[1].id

    def own_fields(cls: ast.ClassDef):
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                yield from own_fields(classes[base.id])
        body = cls.body
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and \
                    not ast.unparse(stmt.annotation).startswith("ClassVar"):  # a class's own, not a key
                nxt = body[i + 1] if i + 1 < len(body) else None
                doc = nxt.value.value if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) else ""
                yield stmt, doc

    def fields(cls: ast.ClassDef, prefix: str):
        for stmt, doc in own_fields(cls):
            kind = ast.unparse(stmt.annotation)
            if kind in classes:
                yield from fields(classes[kind], f"{prefix}{stmt.target.id}.")
            elif kind in unions:
                for variant in backends[unions[kind]]:
                    yield from fields(classes[variant], f"{prefix}{stmt.target.id}.")
            else:
                yield f"--{prefix}{stmt.target.id}", " ".join(str(doc).split())

    documented: dict[str, str] = {}
    for flag, doc in fields(classes["TandemConfig"], ""):  # a backend key: every backend's docstring
        documented[flag] = f"{documented[flag]} | {doc}" if flag in documented and doc not in documented[flag] else doc
    return documented


@pytest.mark.e2e
def test_help_lists_every_key_with_its_docstring():
    """`python train.py --help` against the source: every field, its docstring, and nothing else."""
    out = subprocess.run([sys.executable, "train.py", "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    documented = documented_fields()
    assert len(documented) > 100
    for flag, doc in documented.items():
        assert doc, f"{flag} has no docstring in tandem/config/"
        assert f"{flag} (" in text, f"{flag} missing from --help"
        for part in doc.split(" | "):
            assert part in text, f"{flag}: its docstring is not in --help"
    listed = {line.split()[0] for line in out.stdout.splitlines() if line.startswith("  --") and "." in line.split()[0]}
    typed_args = {flag for flag in listed if flag.startswith("--environment.args.")}
    assert listed - typed_args == set(documented), (listed - typed_args) ^ set(documented)
    # the coding environment's typed arguments, each with its docstring
    from tandem.envs.coding.settings import CodingArgs
    assert typed_args == {row[0] for row in help_rows(CodingArgs, "environment.args.")}
    for flag, _, _, doc in help_rows(CodingArgs, "environment.args."):
        assert doc and " ".join(doc.split()) in text, flag
    for short in ("--engines", "--mode", "--steps", "--run-dir", "--config"):
        assert short in text


@pytest.mark.e2e
def test_train_py_help_and_bad_key_exit_codes():
    ok = subprocess.run([sys.executable, "train.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "--rollout.staleness.max" in ok.stdout
    bad = subprocess.run([sys.executable, "train.py", "--rollout.nope", "1"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["error: unknown config key 'rollout.nope'"]


def bounded_fields(model: type[BaseModel] = TandemConfig, prefix: str = ""):
    """(dotted key, a value just outside the range declared on it) for every bound of every field
    (of every backend, under a section by backend)."""
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from bounded_fields(field.annotation, f"{prefix}{name}.")
        for variant in backend_variants(field.annotation).values():
            yield from bounded_fields(variant, f"{prefix}{name}.")
        for constraint in field.metadata:
            for attr, past in (("ge", -1), ("gt", 0), ("le", 1), ("lt", 0)):
                bound = getattr(constraint, attr, None)
                if bound is not None:
                    yield f"{prefix}{name}", bound + past


def tree_with(dotted: str, value) -> dict:
    """{section: {...: {key: value}}}; a key of a backend's own table comes with that backend."""
    *sections, key = dotted.split(".")
    tree = node = {}
    for name in sections:
        node = node.setdefault(name, {})
    node[key] = value
    if len(sections) > 1 and sections[1] in backend_variants(TandemConfig.model_fields[sections[0]].annotation):
        tree[sections[0]]["backend"] = sections[1]
    return tree


BOUNDED = list(dict.fromkeys(bounded_fields()))  # a common key of a section by backend: once


def test_numeric_fields_declare_their_ranges():
    keys = {key for key, _ in BOUNDED}
    assert len(keys) >= 60
    for key in ("run.steps", "engine.count", "rollout.staleness.max", "rollout.sampling.top_p", "trainer.loss.dual_clip_c",
                "router.port", "sync.every_k_steps", "checkpoint.interval", "environment.max_turns",
                "engine.sim.time_scale", "engine.sglang.mem_fraction_static", "trainer.megatron.tensor_parallel"):
        assert key in keys, key


def test_a_value_outside_the_range_names_the_key():
    """One table: every bound of every field, a value just outside it, and what the error said."""
    wrong = {}
    for key, value in BOUNDED:
        try:
            build_config(tree_with(key, value))
            wrong[f"{key}={value!r}"] = "accepted"
        except ConfigError as err:
            if f"config key '{key}': Input should be" not in str(err) or f"(got {value!r})" not in str(err):
                wrong[f"{key}={value!r}"] = str(err)
    assert wrong == {}


def test_help_shows_the_bounds():
    rows = {flag: kind for flag, kind, _, _ in help_rows(TandemConfig)}
    assert rows["--engine.count"] == "int, >= 1"
    assert rows["--rollout.sampling.top_p"] == "float, > 0.0, <= 1.0"
    assert rows["--trainer.loss.dual_clip_c"] == "float | None, > 1.0"
    assert rows["--trainer.betas"] == "tuple[float, float]"
    assert rows["--run.mode"] == "sync|async"


def test_top_k_is_off_or_positive():
    assert build_config(tree_with("rollout.sampling.top_k", -1)).rollout.sampling.top_k == -1
    assert build_config(tree_with("rollout.sampling.top_k", 5)).rollout.sampling.top_k == 5
    with pytest.raises(ConfigError, match=r"config key 'rollout.sampling.top_k': must be -1 \(off\) or at least 1 \(got 0\)"):
        build_config(tree_with("rollout.sampling.top_k", 0))


def test_megatron_gpus_fill_whole_model_replicas():
    def megatron(gpus, tp, pp=1):
        return build_config({"trainer": {"backend": "megatron", "gpus": gpus,
                                         "megatron": {"tensor_parallel": tp, "pipeline_parallel": pp}}})

    assert megatron(4, 2).trainer.gpus == 4 and megatron(6, 1, 3).trainer.gpus == 6
    assert build_config({"trainer": {"gpus": 3}}).trainer.gpus == 3  # only megatron shards the model
    with pytest.raises(ConfigError) as err:
        megatron(6, 2, 2)
    assert str(err.value) == ("config: trainer.gpus (6) must be a multiple of trainer.megatron.tensor_parallel"
                              " x pipeline_parallel (2 x 2 = 4)")
    cfg = megatron(4, 2)
    with pytest.raises(ValidationError, match="trainer.gpus"):  # assignment re-checks the rule
        cfg.trainer.gpus = 3


def test_weights_published_within_staleness_bound():
    def cfg(mode, staleness, every_k):
        return build_config({"run": {"mode": mode}, "rollout": {"staleness": {"max": staleness}},
                             "sync": {"every_k_steps": every_k}})

    assert cfg("async", 1, 2).sync.every_k_steps == 2
    assert cfg("sync", 3, 1).effective_staleness == 0
    with pytest.raises(ConfigError) as err:
        cfg("async", 1, 3)
    assert str(err.value) == ("config: sync.every_k_steps is 3, but with staleness bound 1 (run.mode=async) "
                              "weights must be synced at least every 2 step(s)")
    with pytest.raises(ConfigError, match=r"staleness bound 0 \(run.mode=sync\)"):
        cfg("sync", 3, 2)


def test_list_positions_stay_out_of_the_key():
    """The key named is one a user can type as --section.key; the position comes beside it."""
    assert key_path(("rollout", "sampling", "stop", 0)) == ("rollout.sampling.stop", [0])
    assert key_path(("engine", "sglang", "args", "8")) == ("engine.sglang.args.8", [])  # a dict key, not a position
    with pytest.raises(ConfigError) as err:
        load_config(["--rollout.sampling.stop", "['a', 1]"], config_file=str(REPO / "config.toml"))
    assert str(err.value) == "config key 'rollout.sampling.stop', item 1: Input should be a valid string (got 1)"


@pytest.mark.parametrize("where", ["file", "cli"])
def test_a_removed_key_says_so_and_what_to_do(tmp_path, where):
    toml = tmp_path / "c.toml"
    toml.write_text('[rollout]\nlabel_key = "answer"\n' if where == "file" else "")
    argv = ["--config", str(toml)] + (["--rollout.label_key", "answer"] if where == "cli" else [])
    with pytest.raises(ConfigError) as err:
        load_config(argv)
    assert str(err.value) == f"config key 'rollout.label_key' was removed: {REMOVED_KEYS['rollout.label_key']}"
    assert "delete the key" in str(err.value)


def test_a_saved_config_with_a_removed_key_fails_naming_it():
    """A run's config.json is read in today's names, like any config: an old key is an error
    with what to do, never dropped behind the user's back."""
    saved = TandemConfig().model_dump(mode="json")
    saved["rollout"]["label_key"] = "label"  # config.json of a run started before the key went
    with pytest.raises(ConfigError, match="'rollout.label_key' was removed.*delete the key"):
        load_config([], base_tree=saved)


# --------------------------------------------------------------------------- strict, all at once, near misses
def test_a_toml_file_gets_strict_types(tmp_path):
    toml = tmp_path / "c.toml"
    for text, needle in [('[run]\nsteps = "3"\n', "config key 'run.steps': Input should be a valid integer (got '3')"),
                         ("[run]\nsteps = 3.0\n", "config key 'run.steps': Input should be a valid integer"),
                         ('[trainer]\nlr = "1e-3"\n', "config key 'trainer.lr': Input should be a valid number"),
                         ("[logging]\ntensorboard = 1\n", "config key 'logging.tensorboard': Input should be a valid boolean"),
                         ("[run]\nrun_dir = 1979-05-27\n", "config key 'run.run_dir': a TOML date")]:
        toml.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_config(["--config", str(toml)])
        assert needle in str(err.value), (text, str(err.value))
    toml.write_text("[trainer]\nlr = 1\nbetas = [0.9, 0.95]\n")  # an integer is a number; an array fills a tuple
    cfg = load_config(["--config", str(toml)])
    assert cfg.trainer.lr == 1.0 and cfg.trainer.betas == (0.9, 0.95)


def test_every_config_error_at_once_with_a_suggestion_for_near_misses(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("[run]\nstpes = 3\nlr = 0.1\n[rollout]\nsamples_per_promt = 4\n[rollout.sampling]\ntop_p = 2.0\n"
                    "[trainer.los]\nkl_coef = 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_config(["--config", str(toml), "--engines", "0"])
    lines = str(err.value).splitlines()
    assert lines[0] == "6 problems in the config:"
    assert set(lines[1:]) == {
        "  - unknown config key 'run.stpes' (did you mean 'run.steps'?)",
        "  - unknown config key 'run.lr' (did you mean 'trainer.lr'?)",
        "  - unknown config key 'rollout.samples_per_promt' (did you mean 'rollout.samples_per_prompt'?)",
        "  - unknown config key 'trainer.los.kl_coef' (did you mean 'trainer.loss.kl_coef'?)",
        "  - config key 'rollout.sampling.top_p': Input should be less than or equal to 1 (got 2.0)",
        "  - config key 'engine.count': Input should be greater than or equal to 1 (got 0)",
    }


def test_a_union_key_is_named_once():
    with pytest.raises(ConfigError) as err:
        load_config(["--run.keep_rollouts", "some"], config_file=str(REPO / "config.toml"))
    assert str(err.value) == "config key 'run.keep_rollouts': Input should be a valid integer or 'all' (got 'some')"


def test_paths_in_a_toml_file_are_relative_to_it(tmp_path, monkeypatch):
    from tandem.orchestrator.launcher import absolutize_paths

    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "mine.jsonl").write_text('{"prompt": "a"}\n')
    (project / "run.toml").write_text('[data]\npath = "data/mine.jsonl"\n[engine]\nbackend = "sim"\n'
                                      '[engine.sim]\nprofile = "profiles/engine/qwen3_14b_h100.toml"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(["--config", str(project / "run.toml")])
    absolutize_paths(cfg)
    assert cfg.data.path == str(project / "data" / "mine.jsonl")
    assert cfg.engine.sim.profile == str(REPO / "profiles" / "engine" / "qwen3_14b_h100.toml"), "a shipped file"
    cfg = load_config(["--config", str(project / "run.toml"), "--data.path", "here.jsonl"])
    absolutize_paths(cfg)
    assert cfg.data.path == str(elsewhere / "here.jsonl"), "the command line means the current directory"
    (project / "run.toml").write_text('[data]\npath = "missing.jsonl"\n')
    cfg = load_config(["--config", str(project / "run.toml")])
    assert cfg.data.path == str(project / "missing.jsonl"), "a missing file is named where it was looked for"


def test_the_cache_is_the_users_wherever_tandem_runs(tmp_path, monkeypatch):
    from tandem.orchestrator.launcher import absolutize_paths

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for cwd in (tmp_path / "a", tmp_path / "b"):
        cwd.mkdir()
        monkeypatch.chdir(cwd)
        cfg = load_config([], config_file=str(REPO / "config.toml"))
        absolutize_paths(cfg)
        assert cfg.run.cache_dir == str(tmp_path / "xdg" / "tandem")
    assert not (tmp_path / "a" / ".cache").exists() and not (tmp_path / "b" / ".cache").exists()


def test_a_bad_jsonl_line_is_named_by_its_line_and_datasets_stays_quiet(tmp_path, capfd):
    from tandem.rollout import load_dataset_rows

    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a"}\n\n{"prompt": \n{"nope": 1}\n{"prompt": "b"}\n')
    ds = load_dataset_rows(str(data), "prompt")
    assert [r["prompt"] for r in ds.rows] == ["a", "b"]
    assert ds.skipped_examples == ["line 3: not JSON (Expecting value)", "line 4: missing field 'prompt'"]
    out, err = capfd.readouterr()
    assert "ArrowInvalid" not in out + err and "Generating" not in out + err
