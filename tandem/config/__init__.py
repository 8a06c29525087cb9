"""One typed config tree for the whole run.

config.toml maps 1:1 onto `TandemConfig`. Every field carries a docstring, which is
also what `python train.py --help` prints. Any key can be overridden on the command
line as `--section.key value`; a few shorthands (`--engines`, `--mode`, ...) map onto
keys. Unknown keys and bad values fail at once with the dotted key in the message.
[engine] and [trainer] are by backend: a backend's own settings exist only when it is chosen.

The package: sections / rollout_sections / engine_sections / trainer_sections /
environment_section / schema (the models, their bounds and rules), views (the part of the
tree each child process receives), loading (TOML + overrides -> TandemConfig), command_line
(argv and --help), errors (ConfigError), renamed (keys and plug-in modules tandem no longer
has: errors that name the new ones). Everything public is re-exported here.
"""

from tandem.config.command_line import LAUNCHER_OPTIONS, SHORTHANDS, help_rows, help_text, parse_cli
from tandem.config.engine_sections import (ENGINE_BACKENDS, EmbeddedEngineConfig, EmbeddedEngineSettings, EngineCommon,
                                           EngineConfig, ExternalEngineConfig, ExternalEngineSettings, RouterConfig,
                                           SglangEngineConfig, SglangEngineSettings, SimEngineConfig,
                                           SimEngineSettings)
from tandem.config.environment_section import EnvironmentConfig
from tandem.config.eval_section import AlarmsConfig, EvalConfig
from tandem.config.errors import ConfigError
from tandem.config.loading import DEFAULT_CONFIG_FILE, build_config, config_from_json, load_config, validate_section
from tandem.config.renamed import MOVED_KEYS, REMOVED_KEYS, RENAMED_MODULES
from tandem.config.rollout_sections import ClientConfig, DataConfig, RolloutConfig, SamplingConfig, StalenessConfig
from tandem.config.schema import TandemConfig
from tandem.config.sections import (CheckpointConfig, FaultsConfig, LoggingConfig, ModelConfig, RunConfig, Section,
                                    SyncConfig, TinyModelConfig)
from tandem.config.trainer_sections import (TRAINER_BACKENDS, LossConfig, MegatronSettings, MegatronTrainerConfig,
                                            SimTrainerConfig, SimTrainerSettings, TorchTrainerConfig, TrainerCommon,
                                            TrainerConfig)
from tandem.config.views import ENGINE_VIEW, TRAINER_VIEW, VIEWS, child_view, read_view, view_path, write_views

__all__ = [
    "AlarmsConfig", "EvalConfig", "CheckpointConfig", "ClientConfig", "ConfigError", "DEFAULT_CONFIG_FILE", "DataConfig", "ENGINE_BACKENDS",
    "ENGINE_VIEW", "EmbeddedEngineConfig", "EmbeddedEngineSettings", "EngineCommon", "ExternalEngineSettings",
    "SglangEngineSettings", "EngineConfig", "EnvironmentConfig", "ExternalEngineConfig",
    "FaultsConfig", "LAUNCHER_OPTIONS", "LoggingConfig", "LossConfig", "MOVED_KEYS", "MegatronSettings",
    "MegatronTrainerConfig", "ModelConfig", "REMOVED_KEYS", "RENAMED_MODULES", "RolloutConfig", "RouterConfig",
    "RunConfig", "SHORTHANDS", "SamplingConfig", "Section", "SglangEngineConfig", "SimEngineConfig",
    "SimEngineSettings", "SimTrainerConfig", "SimTrainerSettings", "StalenessConfig", "SyncConfig", "TRAINER_BACKENDS",
    "TRAINER_VIEW", "TandemConfig", "TinyModelConfig", "TorchTrainerConfig", "TrainerCommon", "TrainerConfig",
    "VIEWS", "build_config", "child_view", "config_from_json", "read_view", "view_path", "help_rows", "help_text", "load_config", "parse_cli",
    "validate_section", "write_views",
]
