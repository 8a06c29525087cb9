"""One typed config tree for the whole run.

config.toml maps 1:1 onto `TandemConfig`. Every field carries a docstring, which is
also what `python train.py --help` prints. Any key can be overridden on the command
line as `--section.key value`; a few shorthands (`--engines`, `--mode`, ...) map onto
keys. Unknown keys and bad values fail at once with the dotted key in the message.

The package: sections / agent_sections / schema (the models, their bounds and rules),
loading (TOML + overrides -> TandemConfig), command_line (argv and --help), errors (ConfigError),
renamed (keys and plug-in modules tandem no longer has: errors that name the new ones). Everything public is re-exported here.
"""

from tandem.config.agent_sections import AgentConfig, EnvironmentConfig, SandboxConfig
from tandem.config.command_line import LAUNCHER_OPTIONS, SHORTHANDS, help_rows, help_text, parse_cli
from tandem.config.errors import ConfigError
from tandem.config.loading import DEFAULT_CONFIG_FILE, build_config, config_from_json, load_config
from tandem.config.renamed import REMOVED_KEYS, RENAMED_MODULES
from tandem.config.schema import TandemConfig
from tandem.config.engine_sections import EngineConfig, RouterConfig, SimEngineConfig
from tandem.config.sections import (CheckpointConfig, FaultsConfig, LoggingConfig, LossConfig, MegatronConfig,
                                    ModelConfig, RolloutConfig, RunConfig, Section, SimTrainerConfig, SyncConfig,
                                    TinyModelConfig, TrainerConfig)

__all__ = [
    "AgentConfig", "CheckpointConfig", "ConfigError", "DEFAULT_CONFIG_FILE", "EngineConfig", "EnvironmentConfig", "FaultsConfig",
    "LAUNCHER_OPTIONS", "LoggingConfig", "LossConfig", "MegatronConfig", "ModelConfig", "REMOVED_KEYS",
    "RolloutConfig", "RouterConfig", "RunConfig", "SHORTHANDS", "SandboxConfig", "Section", "SimEngineConfig",
    "SimTrainerConfig", "SyncConfig", "TandemConfig", "TinyModelConfig", "TrainerConfig", "build_config",
    "config_from_json", "help_rows", "help_text", "load_config", "parse_cli", "RENAMED_MODULES",
]
