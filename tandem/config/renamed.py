"""Names tandem no longer has, each with the one to use instead: config keys and plug-in modules.

Nothing here translates an old name into a new one: a config file, command line or saved
config.json that still uses one fails with its message, so what a run does is always what its
config says in today's names.
"""

from __future__ import annotations

REMOVED_KEYS: dict[str, str] = {
    "rollout.label_key": (
        "nothing read it: the reward plug-in receives the whole dataset row and reads its label "
        "field itself (the bundled rewards read row['label']); delete the key"),
    **{f"agent.{key}": (f"the episode limits now apply to every environment: set environment.{key} instead "
                        f"(the coding agent runs on the shared environment loop)")
       for key in ("max_turns", "max_context_tokens", "min_turn_tokens", "wall_time_s", "chat_template_kwargs")},
}
"""Dotted key -> why it went and what to do; the message of the error that names it."""

RENAMED_MODULES: dict[str, str] = {
    "rollout": "tandem.rollout (e.g. 'tandem.rollout:single_turn')",
    "reward": "tandem.envs.echo (echo_reward, exact_match_reward) or tandem.envs.coding (swe_reward)",
    "tandem.rewards": "tandem.envs.echo (echo_reward, exact_match_reward) or tandem.envs.coding (swe_reward)",
    "tandem.agent": "tandem.envs.coding",
    "tandem.grading": "tandem.envs.coding",
    "tandem.env.verifiers_env": "tandem.envs.verifiers_env",
    "tandem.env.openenv_env": "tandem.envs.openenv_env",
    "tandem.sim.workload": "tandem.lab.sim.workload",
}
"""Plug-in module a config named before the layout of 0.1 -> where that plug-in is now. The
top-level scripts `rollout` and `reward` are entry points to read, not config names: importing
them depends on the directory tandem is started from."""


def removed_key_message(dotted: str) -> str | None:
    """The error for a key that was removed, or None when `dotted` was never removed."""
    why = REMOVED_KEYS.get(dotted)
    return None if why is None else f"config key '{dotted}' was removed: {why}"


def renamed_module_message(module: str) -> str | None:
    """The error for a plug-in module that moved, or None when `module` never did."""
    now = RENAMED_MODULES.get(module)
    return None if now is None else f"module '{module}' was renamed: name {now} instead"
