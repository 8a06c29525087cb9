"""Where the project's shipped files live (data/, profiles/, configs/): beside the package in a
checkout or an editable install (`pip install -e .`), which is how tandem is installed; and where
what tandem builds for itself is cached: the user's cache directory, not the working directory."""

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME/tandem, else ~/.cache/tandem: the same wherever tandem is run from."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "tandem"


def cache_root(configured: str) -> Path:
    """run.cache_dir as a directory: the one configured, or (empty) the user's cache directory."""
    return Path(configured).expanduser().resolve() if configured else user_cache_dir()
