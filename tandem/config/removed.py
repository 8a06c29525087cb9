"""Config keys tandem no longer has, each with what to do instead.

A config file or command line that still sets one fails with its message. A run's saved
config.json (the base of `--resume`) holds every key of the version that wrote it, so
`without_removed_keys` drops the removed ones from such a tree before it is validated.
"""

from __future__ import annotations

import copy

REMOVED_KEYS: dict[str, str] = {
    "rollout.label_key": (
        "nothing read it: the reward plug-in receives the whole dataset row and reads its label "
        "field itself (the bundled rewards read row['label']); delete the key"),
    **{f"agent.{key}": (f"the episode limits now apply to every environment: set environment.{key} instead "
                        f"(the coding agent runs on the shared environment loop)")
       for key in ("max_turns", "max_context_tokens", "min_turn_tokens", "wall_time_s", "chat_template_kwargs")},
}
"""Dotted key -> why it went and what to do; the message of the error that names it."""


def removed_key_message(dotted: str) -> str | None:
    """The error for a key that was removed, or None when `dotted` was never removed."""
    why = REMOVED_KEYS.get(dotted)
    return None if why is None else f"config key '{dotted}' was removed: {why}"


def without_removed_keys(tree: dict) -> dict:
    """A copy of a saved config tree without the keys in REMOVED_KEYS."""
    tree = copy.deepcopy(tree)
    for dotted in REMOVED_KEYS:
        *sections, key = dotted.split(".")
        node = tree
        for name in sections:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(key, None)
    return tree
