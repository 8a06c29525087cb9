"""The part of the config tree each child process receives.

The launcher keeps the whole tree (run_dir/config.json, what --resume reads); each child gets
only the sections it reads, written beside it as run_dir/views/NAME.json and validated here
as its view's model. A child that reached for another section (the trainer reading the
reward plug-in, an engine reading the sandbox) fails with an AttributeError in its own tests
instead of quietly coupling to it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from tandem.config.base import Section, section_model
from tandem.config.engine_sections import EmbeddedEngineConfig, EngineConfig
from tandem.config.rollout_sections import SamplingConfig, StalenessConfig
from tandem.config.schema import DerivedSettings, TandemConfig
from tandem.config.sections import CheckpointConfig, ModelConfig, RunConfig, SyncConfig
from tandem.config.trainer_sections import LoraConfig, TorchTrainerConfig, TrainerConfig


class TrainerRolloutView(Section):
    sampling: SamplingConfig = SamplingConfig()
    """The trainer scores with the engines' temperature."""
    staleness: StalenessConfig = StalenessConfig()
    """A published version tells the engines what to do with requests in flight; adapters are kept for S versions."""


class TrainerView(DerivedSettings, Section):
    """What the trainer process reads: python -m tandem.trainer --run-config run_dir/views/trainer.json."""
    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    trainer: TrainerConfig = TorchTrainerConfig()
    sync: SyncConfig = SyncConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    rollout: TrainerRolloutView = TrainerRolloutView()
    engine: EngineConfig = EmbeddedEngineConfig()
    """Which engines load the weights (none to publish to when external), and the sim's time scale."""


class EngineTrainerView(Section):
    lora: LoraConfig = LoraConfig()
    """The adapters an engine must be able to load."""


class EngineRolloutView(Section):
    staleness: StalenessConfig = StalenessConfig()
    """How many adapter versions an engine keeps loaded."""


class EngineView(DerivedSettings, Section):
    """What an engine process reads: python -m tandem.engine --run-config run_dir/views/engine.json."""
    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EmbeddedEngineConfig()
    trainer: EngineTrainerView = EngineTrainerView()
    rollout: EngineRolloutView = EngineRolloutView()


TRAINER_VIEW, ENGINE_VIEW = TrainerView, EngineView
View = TypeVar("View", bound=BaseModel)
TrainerSide = TandemConfig | TrainerView
"""What code shared by the trainer and the launcher reads: the trainer's view, or the whole tree."""
EngineSide = TandemConfig | EngineView
"""What an engine core reads: an engine process's view, or the whole tree where the lab runs engines in-process."""
AnyView = TandemConfig | TrainerView | EngineView
"""What code every process shares reads (run, model): the whole tree or either child's view."""
VIEWS: dict[str, type[BaseModel]] = {"trainer": TrainerView, "engine": EngineView}
"""Child name -> the model of its view."""


def _prune(model: type[BaseModel], tree: dict[str, Any]) -> dict[str, Any]:
    """`tree` (a whole config, dumped) cut down to the fields of `model`."""
    kept = {}
    for name, field in model.model_fields.items():
        if name not in tree:
            continue
        sub = section_model(field.annotation, tree[name])
        # a view's own section types (TrainerRolloutView) prune; the config's sections travel whole
        own_view = sub is not None and sub.__module__ == __name__
        kept[name] = _prune(sub, tree[name]) if sub is not None and own_view else tree[name]
    return kept


def child_view(cfg: TandemConfig, view: type[View]) -> View:
    """The view of `cfg` a child of that kind receives."""
    return view.model_validate(_prune(view, cfg.model_dump(mode="json")))


def write_views(cfg: TandemConfig, run_dir: str | os.PathLike) -> dict[str, Path]:
    """run_dir/views/NAME.json for every child kind; {name: path}."""
    paths = {}
    for name, view in VIEWS.items():
        paths[name] = view_path(run_dir, name)
        paths[name].parent.mkdir(parents=True, exist_ok=True)
        paths[name].write_text(json.dumps(child_view(cfg, view).model_dump(mode="json"), indent=2))
    return paths


def view_path(run_dir: str | os.PathLike, name: str) -> Path:
    """Where the launcher writes the view of child kind `name` (a key of VIEWS)."""
    return Path(run_dir) / "views" / f"{name}.json"


def read_view(path: str | os.PathLike, view: type[View]) -> View:
    """A child's view, as the launcher wrote it."""
    return view.model_validate_json(Path(path).read_text())
