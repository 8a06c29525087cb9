"""The GPU check scripts build valid configs: they run only where a GPU is lent, so a config change that
breaks them (a moved key, another backend's table) must fail here, on every machine, not there."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("cuda,sglang,moe", [(False, False, False), (True, True, False), (True, False, True),
                                              (True, True, True)])
def test_gpu_check_builds_its_configs(tmp_path, cuda, sglang, moe):
    cfg = _script("gpu_check").check_config(tmp_path, 3, cuda, sglang, moe)
    assert cfg.engine.backend == ("sglang" if sglang else "embedded") and cfg.trainer.backend == "megatron"
    assert (cfg.model.tiny.num_experts > 0) == moe == cfg.trainer.moe.wants_routing


def test_gpu_memory_builds_a_config_for_every_variant(tmp_path):
    gpu_memory = _script("gpu_memory")
    for name, variant in gpu_memory.variants(gpu_memory.CPU_TOKENS).items():
        for cuda in (False, True):
            cfg = gpu_memory.trainer_config(tmp_path, variant, cuda)
            assert cfg.trainer.backend == "megatron", name
