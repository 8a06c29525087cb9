"""deploy/skypilot/: the SkyPilot job-group manifests, read by SkyPilot's own loader, offline.

`sky jobs launch FILE` parses a job group with sky.utils.dag_utils: is_job_group_yaml(FILE)
(header with `execution: parallel`), then load_job_group_from_yaml(FILE, env_overrides,
secrets_overrides), which checks the header and builds every task with Task.from_yaml_config:
the task and resources JSON schemas (sky/utils/schemas.py, unknown keys rejected with a
"did you mean") plus SkyPilot's own checks. load_dag_from_yaml does the same detection for one
path, so a header typo that stops the file being a job group is seen the way the CLI sees it.
None of this needs credentials, a network or an API server (launch-time checks such as the
accelerator catalog and volume lookup do, and are not run here).

Unknown *header* keys are only logged by SkyPilot 0.14.1 ("These will be ignored"), so the
structural checks below (primary task, termination delay, in-group networking) are what
catches a misspelt header key.

The run scripts are also executed, with the interpreters and curl replaced by stubs that
record their argv: the trainer's command line goes through tandem's own config loader, the
weight agent's through its argument parser, and SGLang's flags are checked against the
argument list of the pinned SGLang (tandem/engine/sglang_server_args.txt).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy" / "skypilot"
VOLUME_SPEC = DEPLOY / "weights-volume.yaml"
MANIFESTS = {"jobgroup-volume.yaml": "volume", "jobgroup-bucket.yaml": "bucket"}
GROUP_NAMES = {"volume": "tandem-volume", "bucket": "tandem-bucket"}
ENGINES = ["engine0", "engine1", "engine2"]
ENGINE_PORT = 30000
TRAINER_GPUS = 4
API_KEY_ENV = "TANDEM_ENGINE_API_KEY"


@pytest.fixture(scope="module")
def sky(tmp_path_factory):
    """SkyPilot's loaders, imported with HOME in a temporary directory.

    sky reads ~/.sky/config.yaml and writes ~/.sky (user hash, locks) from import on; a fresh
    HOME keeps the developer's SkyPilot config out of the test and the test out of ~.
    """
    home = tmp_path_factory.mktemp("skyhome")
    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(home))
    mp.setenv("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
    for var in ("SKYPILOT_CONFIG", "SKYPILOT_GLOBAL_CONFIG", "SKYPILOT_PROJECT_CONFIG"):
        mp.delenv(var, raising=False)
    try:
        pytest.importorskip("sky")
        from sky.utils import common_utils, dag_utils, schemas, yaml_utils
        from sky.volumes import volume as volume_lib

        yield SimpleNamespace(dag_utils=dag_utils, common_utils=common_utils, schemas=schemas,
                              yaml_utils=yaml_utils, volume_lib=volume_lib)
    finally:
        mp.undo()


@pytest.fixture
def offline(monkeypatch):
    """Any connection attempt fails the test: the loaders must not reach for a network."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _tasks(dag) -> dict:
    return {task.name: task for task in dag.tasks}


def _accelerators(task) -> dict:
    (resources,) = list(task.resources)
    return dict(resources.accelerators or {})


def _cloud(task) -> str:
    (resources,) = list(task.resources)
    return str(resources.cloud)


def check_structure(dag, variant: str) -> None:
    """What tandem needs of a job group; AssertionError names the first thing wrong."""
    assert dag.is_job_group(), "not a job group (header must say execution: parallel)"
    assert dag.name == GROUP_NAMES[variant]
    assert dag.primary_tasks == ["trainer"], f"primary_tasks is {dag.primary_tasks!r}"
    assert dag.termination_delay == "30s", f"termination_delay is {dag.termination_delay!r}"
    assert dag.inter_connection is True, "engines are reached by hostname: inter_connection must be true"
    tasks = _tasks(dag)
    assert list(tasks) == ["trainer", *ENGINES]
    assert _accelerators(tasks["trainer"]) == {"H100": TRAINER_GPUS}
    for name in ENGINES:
        assert _accelerators(tasks[name]) == {"H100": 1}, name
    for task in tasks.values():
        # In-group hostnames resolve only on one Kubernetes cluster (SkyPilot 0.14.1).
        assert _cloud(task) == "Kubernetes", (task.name, _cloud(task))
        assert task.num_nodes == 1, task.name
        assert task.workdir == ".", task.name
        assert "MODEL" in task.envs, task.name
        # The key is never written into the file: a bare name is a secret passed at launch.
        assert API_KEY_ENV in {ref.name for ref in task.managed_secret_refs}, task.name
        assert API_KEY_ENV not in (task.secrets or {}), task.name
    trainer_run = tasks["trainer"].run
    for name in ENGINES:
        assert f"{name}-0.${{SKYPILOT_JOBGROUP_NAME}}:{ENGINE_PORT}" in trainer_run, name
    assert "--engine.backend external" in trainer_run
    assert len(re.findall(r"engine\d+-0\.\$\{SKYPILOT_JOBGROUP_NAME\}", trainer_run)) == len(ENGINES), \
        "the trainer names an engine that is not in the group"
    assert "WEIGHTS_URL" in tasks["trainer"].envs
    if variant == "volume":
        (mount,) = tasks["trainer"].volumes
        assert tasks["trainer"].envs["WEIGHTS_URL"].startswith(mount + "/")
        for task in tasks.values():
            assert task.volumes == tasks["trainer"].volumes, f"{task.name} must mount the volume where the trainer does"
    else:
        assert tasks["trainer"].envs["WEIGHTS_URL"].startswith("s3://")
        for task in tasks.values():
            assert not task.volumes, task.name
        for name in ENGINES:
            assert tasks[name].envs["WEIGHTS_URL"] == tasks["trainer"].envs["WEIGHTS_URL"], name


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_manifest_loads_as_a_job_group(sky, offline, monkeypatch, manifest):
    monkeypatch.chdir(REPO)  # `sky jobs launch` runs from the repository root (workdir: .)
    path = str(DEPLOY / manifest)
    assert sky.dag_utils.is_job_group_yaml(path)
    dag = sky.dag_utils.load_job_group_from_yaml(path)
    check_structure(dag, MANIFESTS[manifest])
    for task in dag.tasks:
        task.validate_name()
        task.validate_run()
        task.expand_and_validate_workdir()
        assert Path(task.workdir) == REPO

    # `--secret NAME=VALUE` (or a bare `--secret NAME` from the local environment) reaches every task.
    secrets = [(ref.name, "launch-value") for ref in _tasks(dag)["trainer"].managed_secret_refs]
    dag = sky.dag_utils.load_job_group_from_yaml(path, env_overrides=[("WEIGHTS_URL", "s3://other/run2")],
                                                 secrets_overrides=secrets)
    for task in dag.tasks:
        assert not task.managed_secret_refs, task.name
        assert task.secrets[API_KEY_ENV].get_secret_value() == "launch-value"
        assert task.envs["WEIGHTS_URL"] == "s3://other/run2"


def test_volume_manifest_uses_the_volume_spec(sky, offline):
    spec = sky.yaml_utils.read_yaml(str(VOLUME_SPEC))
    dag = sky.dag_utils.load_job_group_from_yaml(str(DEPLOY / "jobgroup-volume.yaml"))
    for task in dag.tasks:
        assert set(task.volumes.values()) == {spec["name"]}, task.name


def load_volume(sky, config: dict):
    """`sky volumes apply FILE` without the API server: Volume.from_yaml_config (schema-checks the
    fields it knows) and the client-side validate(). from_yaml_config passes only the fields it
    knows on, so the raw file is also checked against the volume schema, which rejects unknown keys."""
    sky.common_utils.validate_schema(config, sky.schemas.get_volume_schema(), "Invalid volume YAML: ")
    volume = sky.volume_lib.Volume.from_yaml_config(config)
    volume.validate()
    return volume


def test_volume_spec_is_a_read_write_many_pvc(sky, offline):
    volume = load_volume(sky, sky.yaml_utils.read_yaml(str(VOLUME_SPEC)))
    assert volume.type == "k8s-pvc"
    assert volume.cloud == "kubernetes"
    assert volume.config["access_mode"] == "ReadWriteMany"  # trainer and engines mount it at once
    assert int(volume.size) >= 100  # GiB: several full checkpoints of a 14B model


# (manifest, key as written at the start of a YAML line, misspelling, which occurrence, what catches it)
# "sky": SkyPilot's loader raises. "structure": SkyPilot 0.14.1 only logs unknown header keys, so
# check_structure is what fails; either counts.
MISSPELLINGS = [
    ("resources", "resorces", 0, "sky"),
    ("accelerators", "accelerator", 0, "sky"),
    ("accelerators", "accelerator", -1, "sky"),  # the last engine
    ("infra", "infar", -1, "sky"),
    ("cpus", "cpu", 0, "sky"),
    ("envs", "env", 0, "sky"),
    ("secrets", "secret", -1, "sky"),
    ("setup", "setpu", 0, "sky"),
    ("run", "rnu", -1, "sky"),
    ("workdir", "work_dir", 0, "sky"),
    ("execution", "executon", 0, "sky"),  # no longer a job group: the header is read as a task
    ("primary_tasks", "primary_task", 0, "structure"),
    ("termination_delay", "termination_dely", 0, "structure"),
    ("inter_connection", "interconnection", 0, "structure"),
]


def misspell(text: str, key: str, typo: str, occurrence: int) -> str:
    keys = list(re.finditer(rf"^(\s*){re.escape(key)}:", text, flags=re.MULTILINE))
    assert keys, f"{key}: not in the manifest"
    m = keys[occurrence]
    return text[:m.start()] + m.group(1) + typo + ":" + text[m.end():]


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
@pytest.mark.parametrize("key,typo,occurrence,caught_by", MISSPELLINGS,
                         ids=[f"{k}->{t}@{o}" for k, t, o, _ in MISSPELLINGS])
def test_a_misspelt_field_is_refused(sky, offline, tmp_path, manifest, key, typo, occurrence, caught_by):
    path = tmp_path / manifest
    path.write_text(misspell((DEPLOY / manifest).read_text(), key, typo, occurrence))
    if caught_by == "sky":
        with pytest.raises(ValueError):
            sky.dag_utils.load_dag_from_yaml(str(path))
        return
    try:
        dag = sky.dag_utils.load_dag_from_yaml(str(path))
    except ValueError:
        return  # a SkyPilot that refuses unknown header keys
    with pytest.raises(AssertionError):
        check_structure(dag, MANIFESTS[manifest])


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
@pytest.mark.parametrize("mistake", ["primary_tasks: [trainr]", "termination_delay: 30sec"])
def test_a_wrong_header_value_is_refused(sky, offline, tmp_path, manifest, mistake):
    key = mistake.split(":")[0]
    text = re.sub(rf"^{key}:.*$", mistake, (DEPLOY / manifest).read_text(), count=1, flags=re.MULTILINE)
    path = tmp_path / manifest
    path.write_text(text)
    with pytest.raises(ValueError):
        sky.dag_utils.load_job_group_from_yaml(str(path))


@pytest.mark.parametrize("key,change", [("size", "sise"), ("type", "typ"), ("use_existing", "use_exisiting"),
                                        ("access_mode", "ReadWriteMny")])
def test_a_misspelt_volume_field_is_refused(sky, offline, key, change):
    config = sky.yaml_utils.read_yaml(str(VOLUME_SPEC))
    config.setdefault("use_existing", False)
    if key == "access_mode":
        config["config"][key] = change  # a value typo: ReadWriteMany is an enum
    else:
        config[change] = config.pop(key)
    with pytest.raises(ValueError):
        load_volume(sky, config)


# ---- the run scripts, executed against stubs ----

STUB = """#!/bin/sh
f=$(mktemp "{log}/call.XXXXXX")
printf '%s\\0' "{name}" "$@" > "$f"
exit 0
"""


def run_script(task, group: str, tmp: Path) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run a task's `run` with the task's envs, its secrets set, $SKYPILOT_JOBGROUP_NAME, and
    curl / .venv/bin/python / .venv-sglang/bin/python replaced by stubs; returns every stub call."""
    log = tmp / "calls"
    log.mkdir(parents=True)
    for rel in ("bin/curl", ".venv/bin/python", ".venv-sglang/bin/python"):
        stub = tmp / rel
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(STUB.format(log=log, name=rel))
        stub.chmod(0o755)
    env = {"PATH": f"{tmp / 'bin'}:/usr/bin:/bin", "HOME": str(tmp), "SKYPILOT_JOBGROUP_NAME": group,
           **task.envs, **{ref.name: f"secret-{ref.name}" for ref in task.managed_secret_refs}}
    # capture_output waits for every process holding the pipes, background ones included.
    proc = subprocess.run([shutil.which("bash") or "/bin/bash", "-c", task.run], cwd=tmp, env=env, check=False,
                          capture_output=True, text=True, timeout=60)
    calls = []
    for f in sorted(log.iterdir()):
        argv = f.read_bytes().split(b"\0")[:-1]
        calls.append([a.decode() for a in argv])
    return proc, calls


def _value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} given {argv.count(flag)} times"
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_trainer_command_is_a_valid_tandem_command(sky, offline, tmp_path, monkeypatch, manifest):
    variant = MANIFESTS[manifest]
    dag = sky.dag_utils.load_job_group_from_yaml(str(DEPLOY / manifest))
    trainer = _tasks(dag)["trainer"]
    proc, calls = run_script(trainer, dag.name, tmp_path)
    assert proc.returncode == 0, proc.stderr
    urls = [f"http://{name}-0.{dag.name}:{ENGINE_PORT}" for name in ENGINES]
    health = [argv[-1] for argv in calls if argv[0] == "bin/curl"]
    assert sorted(health) == sorted(f"{url}/health" for url in urls)
    (train,) = [argv for argv in calls if argv[0] == ".venv/bin/python"]
    assert train[1] == "train.py"
    args = train[2:]
    # engine.external.urls is a TOML array literal on the command line, as tandem parses it.
    assert tomllib.loads("urls = " + _value(args, "--engine.external.urls"))["urls"] == urls
    assert _value(args, "--sync.url") == trainer.envs["WEIGHTS_URL"]

    from tandem.config.loading import load_config

    monkeypatch.chdir(REPO)
    cfg = load_config(args)
    assert cfg.engine.backend == "external"
    assert cfg.engine.external.urls == urls and cfg.engine.count == len(ENGINES)
    assert cfg.engine.api_key_env == API_KEY_ENV
    assert cfg.sync.url == trainer.envs["WEIGHTS_URL"]
    assert cfg.sync.reload_by == ("orchestrator" if variant == "volume" else "agent")
    assert cfg.trainer.gpus == TRAINER_GPUS


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_engine_commands(sky, offline, tmp_path, manifest):
    from tandem.engine.sglang_launch import load_server_args
    from tandem.weights.__main__ import build_parser

    variant = MANIFESTS[manifest]
    _, sglang_flags = load_server_args()
    dag = sky.dag_utils.load_job_group_from_yaml(str(DEPLOY / manifest))
    for name in ENGINES:
        task = _tasks(dag)[name]
        proc, calls = run_script(task, dag.name, tmp_path / name)
        (server,) = [argv for argv in calls if argv[0] == ".venv-sglang/bin/python"]
        assert server[1:3] == ["-m", "sglang.launch_server"]
        args = server[3:]
        for arg in args:
            if arg.startswith("--"):
                assert arg in sglang_flags, f"{name}: SGLang has no {arg}"
        assert _value(args, "--host") == "0.0.0.0"
        assert _value(args, "--port") == str(ENGINE_PORT)
        assert _value(args, "--model-path") == task.envs["MODEL"]
        assert _value(args, "--api-key") == f"secret-{API_KEY_ENV}"
        assert _value(args, "--tp-size") == "1"
        agents = [argv for argv in calls if argv[0] == ".venv/bin/python"]
        if variant == "volume":
            assert proc.returncode == 0, proc.stderr
            assert agents == [], "the shared volume needs no weight agent"
            continue
        # Bucket: a weight agent beside the engine; the script ends (non-zero) once either exits.
        assert proc.returncode != 0
        (agent,) = agents
        assert agent[1:3] == ["-m", "tandem.weights"]
        parsed = build_parser().parse_args(agent[3:])
        assert parsed.command == "agent"
        assert parsed.source == task.envs["WEIGHTS_URL"]
        assert parsed.engine == f"http://127.0.0.1:{ENGINE_PORT}"
        assert parsed.api_key_env == API_KEY_ENV
        assert not parsed.local_dir.startswith("/mnt/")
