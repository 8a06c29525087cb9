"""Names tandem no longer has, each with the one to use instead: config keys and plug-in modules.

Nothing here translates an old name into a new one at run time: a config file, command line or saved
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


_SPLIT_ROLLOUT = {
    **{f"rollout.{k}": f"data.{n}" for k, n in (("data_path", "path"), ("prompt_key", "prompt_key"),
                                               ("apply_chat_template", "apply_chat_template"), ("shuffle", "shuffle"))},
    **{f"rollout.{k}": f"rollout.sampling.{k}" for k in ("max_new_tokens", "temperature", "top_p", "top_k", "stop")},
    **{f"rollout.{k}": f"rollout.client.{k}" for k in ("concurrency", "group_request", "request_timeout_s")},
    **{f"rollout.{k}": f"rollout.staleness.{n}" for k, n in (
        ("max_staleness", "max"), ("staleness_by", "measured_by"), ("request_priority", "request_priority"),
        ("admission_hold", "admission_hold"), ("partial_rollout", "partial_rollout"))},
    "rollout.environment": "environment.name",
}

MOVED_KEYS: dict[str, str] = {
    **_SPLIT_ROLLOUT,
    "engine.device": "engine.embedded.device",
    "engine.admission_window_ms": "engine.embedded.admission_window_ms",
    "engine.mem_fraction_static": "engine.sglang.mem_fraction_static",
    "engine.sglang_args": "engine.sglang.args",
    "engine.urls": "engine.external.urls",
}
"""Dotted key -> the key that holds its setting now ([rollout] split by concern, backend settings
in their backend's sub-table)."""

MOVED_TABLES: dict[str, str] = {
    "agent": "environment.args.agent",
    "sandbox": "environment.args.sandbox",
}
"""Table -> where its keys are now: the coding agent's settings are its environment's arguments."""


def removed_key_message(dotted: str) -> str | None:
    """The error for a key that was removed or moved, or None when `dotted` never was."""
    why = REMOVED_KEYS.get(dotted)
    if why is not None:
        return f"config key '{dotted}' was removed: {why}"
    now = MOVED_KEYS.get(dotted)
    table, _, rest = dotted.partition(".")
    if now is None and table in MOVED_TABLES:
        now = f"{MOVED_TABLES[table]}.{rest}" if rest else MOVED_TABLES[table]
    return None if now is None else f"config key '{dotted}' moved: it is '{now}' now"


def renamed_module_message(module: str) -> str | None:
    """The error for a plug-in module that moved, or None when `module` never did."""
    now = RENAMED_MODULES.get(module)
    return None if now is None else f"module '{module}' was renamed: name {now} instead"
