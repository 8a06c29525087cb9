"""tandem: single-node, all-in-one RL post-training for LLM agents.

`tandem.train(...)` runs training from Python (tandem/api.py); it is loaded on first use, so that
`import tandem.something` costs none of the launcher's imports.
"""

from tandem import registry as _registry

PYTHON_API = {"train": "tandem.api:train", "configure": "tandem.api:configure", "RunSummary": "tandem.api:RunSummary",
              "TandemConfig": "tandem.config:TandemConfig"}
"""tandem.NAME -> where it lives."""


def __getattr__(name: str):
    if name in PYTHON_API:
        return _registry.load(PYTHON_API[name])
    raise AttributeError(f"module 'tandem' has no attribute {name!r}")
