"""The SGLang engine command, checked against SGLang's real server arguments.

tandem/engine/sglang_server_args.txt was extracted from the pinned SGLang wheel's source
(scripts/extract_sglang_server_args.py); SGLang itself is not installed on CPU machines.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tandem.config import ConfigError, SglangEngineSettings, build_config
from tandem.engine import sglang_launch as sl
from tandem.placement import plan_placement

ROOT = Path(__file__).resolve().parents[1]


def cfg_with(sglang_args=None, **engine):
    own = {k: engine.pop(k) for k in list(engine) if k in SglangEngineSettings.model_fields}
    return build_config({"engine": {"backend": "sglang", "count": 3, "sglang": {"args": sglang_args or {}, **own},
                                    **engine},
                         "trainer": {"backend": "megatron"}, "model": {"dtype": "bfloat16"}})


def check_against_sglang(cmd: list[str]) -> None:
    """Every flag is a real SGLang flag, and value-taking flags are followed by a value."""
    _, flags = sl.load_server_args()
    args = cmd[cmd.index("sglang.launch_server") + 1:]
    for i, a in enumerate(args):
        if not a.startswith("--"):
            continue
        base = a if a in flags else "--" + a[len("--no-"):] if a.startswith("--no-") else a
        assert base in flags, f"{a} is not an SGLang {sl.load_server_args()[0]} server argument"
        kind = flags[base]
        if a.startswith("--no-") and a not in flags:
            assert kind == "bool_optional", a
        nxt = args[i + 1] if i + 1 < len(args) else None
        if kind in ("value", "list"):
            assert nxt is not None and not nxt.startswith("--"), f"{a} needs a value"
        else:
            assert nxt is None or nxt.startswith("--"), f"{a} is a flag but is followed by {nxt!r}"


def test_the_argument_list_is_sglangs_and_matches_the_pin():
    version, flags = sl.load_server_args()
    assert len(flags) > 300  # the whole ServerArgs surface, not a hand-written subset
    for flag, kind in {"--model-path": "value", "--host": "value", "--port": "value", "--tp-size": "value",
                       "--mem-fraction-static": "value", "--weight-version": "value", "--dtype": "value",
                       "--max-running-requests": "value", "--random-seed": "value",
                       "--trust-remote-code": "flag", "--disable-radix-cache": "flag"}.items():
        assert flags.get(flag) == kind, flag
    assert "--weight-version" in flags and "--tp" not in flags  # the real spellings
    pin = re.search(r"^sglang==(\S+)", (ROOT / "requirements-sglang.txt").read_text(), re.M)
    assert pin and pin.group(1) == version, "re-extract sglang_server_args.txt after moving the SGLang pin"


def test_default_command(monkeypatch):
    monkeypatch.delenv(sl.PYTHON_ENV, raising=False)
    cfg = cfg_with(mem_fraction_static=0.8)
    cmd = sl.sglang_command(cfg, port=31001, model_path="/runs/r/weights/step_000004", weight_version=4)
    check_against_sglang(cmd)
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    pairs = dict(zip(cmd[3::2], cmd[4::2]))
    assert pairs["--model-path"] == "/runs/r/weights/step_000004"
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "31001"
    assert pairs["--tp-size"] == "1" and pairs["--weight-version"] == "4"
    assert pairs["--mem-fraction-static"] == "0.8" and pairs["--dtype"] == "bfloat16"
    assert "--trust-remote-code" not in cmd
    # The rollout's step priority orders the queue; preemption stays off (the sim does not model it).
    assert cmd[-2:] == ["--enable-priority-scheduling", "--disable-priority-preemption"]
    fifo = sl.sglang_command(cfg_with(priority_scheduling=False), port=1, model_path="m")
    assert not any("priority" in a for a in fifo)


def test_passthrough_of_any_sglang_argument():
    cfg = cfg_with({"context_length": 32768, "disable-radix-cache": True, "--chunked-prefill-size": 4096,
                    "enable_tp_lm_head_all_to_all": False, "skip_server_warmup": False,
                    "json_model_override_args": {"rope_theta": 1e6}, "lora_paths": ["a=/x", "b=/y"]})
    cmd = sl.sglang_command(cfg, port=1, model_path="m")
    check_against_sglang(cmd)
    tail = cmd[cmd.index("--disable-priority-preemption") + 1:]
    assert tail == ["--context-length", "32768", "--disable-radix-cache", "--chunked-prefill-size", "4096",
                    "--no-enable-tp-lm-head-all-to-all", "--json-model-override-args", '{"rope_theta": 1000000.0}',
                    "--lora-paths", "a=/x", "b=/y"]  # a false store_true flag is SGLang's default: omitted


@pytest.mark.parametrize("args,message", [
    ({"context_lenght": 10}, r"'engine.sglang.args.context_lenght'.*SGLang 0\.\d+\.\d+ has no server argument --context-lenght"),
    ({"tp_size": 2}, r"--tp-size is managed by tandem.*one GPU per engine"),
    ({"mem_fraction_static": 0.5}, r"set engine.sglang.mem_fraction_static instead"),
    ({"enable_priority_scheduling": True}, r"set engine.priority_scheduling instead"),
    ({"disable_radix_cache": "yes"}, r"on/off flag; use true or false"),
    ({"context_length": True}, r"takes a value, not true/false"),
    ({"context_length": None}, r"a value is required"),
])
def test_bad_sglang_args_fail_with_the_key_named(args, message):
    with pytest.raises(ConfigError, match=message):
        sl.sglang_command(cfg_with(args), port=1, model_path="m")


def test_engine_interpreter_and_gpu_pinning(monkeypatch):
    monkeypatch.setenv(sl.PYTHON_ENV, "/opt/sglang-venv/bin/python")
    cfg = cfg_with()
    assert sl.sglang_command(cfg, port=1, model_path="m")[0] == "/opt/sglang-venv/bin/python"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    placement = plan_placement(cfg, visible_gpus=8)  # 4 trainer GPUs + 3 engines
    assert [placement.engine_env(i)["CUDA_VISIBLE_DEVICES"] for i in range(3)] == ["4", "5", "6"]
    with pytest.raises(ConfigError, match="engine.sglang.mem_fraction_static': Input should be less than 1"):
        cfg_with(mem_fraction_static=1.0)


def test_extractor_follows_sglangs_registration_rules():
    """The AST rules on a miniature in SGLang 0.5's style (the real file is what ships)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("extract", ROOT / "scripts" / "extract_sglang_server_args.py")
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    fields = '''
class Serving(msgspec.Struct):
    host: A[str, "The host."] = "127.0.0.1"
    tp_size: A[int, Arg(help="tp", aliases=["--tensor-parallel-size"])] = 1
    skip_warmup: A[bool, "skip"] = False
    lora_paths: A[Optional[List[str]], Arg(help="x", action=LoRAPathAction)] = None
    cuda_graph_max_bs: A[Optional[List[int]], "sizes"] = None
    json_args: A[Optional[List[str]], Arg(help="j", type_parser=json.loads)] = None
    tp_a2a: A[bool, Arg(help="b", action=argparse.BooleanOptionalAction)] = True
    hidden: A[bool, Arg(no_cli=True)] = False
    weird: A[str, Arg(help="w", cli_name="--the-weird-one")] = ""
    not_cli: int = 3
'''
    manual = '''
def add_cli_args(parser):
    parser.add_argument("--config", type=str)
    parser.add_argument("--disable-cuda-graph", action=DeprecatedStoreTrueAction)
'''
    flags = ex.extract({"sglang/srt/arg_groups/fields/serving.py": fields, "sglang/srt/server_args.py": manual})
    assert flags == {"--host": "value", "--tp-size": "value", "--tensor-parallel-size": "value",
                     "--skip-warmup": "flag", "--lora-paths": "list", "--cuda-graph-max-bs": "list",
                     "--json-args": "value", "--tp-a2a": "bool_optional", "--the-weird-one": "value",
                     "--config": "value", "--disable-cuda-graph": "flag"}


def test_routed_experts_flag_only_with_routing_replay_or_record():
    """SGLang records routed experts (--enable-return-routed-experts, its real on/off flag) exactly when
    trainer.moe asks for them; engine.sglang.args cannot set it behind tandem's back."""
    _, flags = sl.load_server_args()
    assert flags["--enable-return-routed-experts"] == "flag"
    plain = sl.sglang_command(cfg_with(), port=1, model_path="m")
    assert "--enable-return-routed-experts" not in plain
    for moe in ({"routing_replay": True}, {"record_routing": True}):
        cfg = build_config({"engine": {"backend": "sglang", "count": 1}, "model": {"path": "/m", "dtype": "bfloat16"},
                            "trainer": {"moe": moe}})
        cmd = sl.sglang_command(cfg, port=1, model_path="m")
        check_against_sglang(cmd)
        assert cmd.count("--enable-return-routed-experts") == 1
    with pytest.raises(ConfigError, match=r"--enable-return-routed-experts is managed by tandem; set trainer.moe"):
        sl.sglang_command(cfg_with({"enable_return_routed_experts": True}), port=1, model_path="m")


def test_sglang_on_a_cpu_machine(monkeypatch):
    """engine.sglang.device = "cpu": SGLang's CPU engine (its flag and its switch variable, a KV pool capped at
    engine.max_total_tokens), no GPU asked for, engine.sglang.env on top; colocation (CUDA-only) refused."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = build_config({"engine": {"backend": "sglang", "count": 2, "max_total_tokens": 16384,
                                   "sglang": {"device": "cpu", "env": {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"}}},
                        "model": {"dtype": "float32"}, "run": {"mode": "async"}})
    cmd = sl.sglang_command(cfg, port=31001, model_path="/m")
    check_against_sglang(cmd)
    pairs = dict(zip(cmd[3::2], cmd[4::2]))
    assert pairs["--device"] == "cpu" and pairs["--max-total-tokens"] == "16384" and pairs["--dtype"] == "float32"
    gpu_cmd = sl.sglang_command(cfg_with(), port=31001, model_path="/m")
    assert "--device" not in gpu_cmd and "--max-total-tokens" not in gpu_cmd  # a GPU's pool is SGLang's to size
    placement = plan_placement(cfg, visible_gpus=0)  # on a GPU node's config this refuses: no GPU for the engines
    assert placement.engine_gpus == [None, None] and not placement.engines_on_gpu
    for i in range(2):
        env = placement.engine_env(i)
        assert env["SGLANG_USE_CPU_ENGINE"] == "1" and env["SGLANG_CPU_OMP_THREADS_BIND"] == "0|1"
        assert env["CUDA_VISIBLE_DEVICES"] == "" and env["OMP_NUM_THREADS"] == str(placement.cpu_threads)
    with pytest.raises(ConfigError, match="need 3 GPU"):
        plan_placement(cfg_with(), visible_gpus=0)
    assert "SGLANG_USE_CPU_ENGINE" not in plan_placement(cfg_with(), visible_gpus=8).engine_env(0)
    with pytest.raises(ConfigError, match="engine.sglang.device = 'cpu'.*need CUDA"):
        build_config({"engine": {"backend": "sglang", "count": 1, "sglang": {"device": "cpu"}},
                      "run": {"colocate": True, "mode": "sync"}})
    with pytest.raises(ConfigError, match="--device is managed by tandem; set engine.sglang.device"):
        sl.sglang_command(cfg_with({"device": "cpu"}), port=1, model_path="m")
