"""Where the project's shipped files live (data/, profiles/, configs/): beside the package in a
checkout or an editable install (`pip install -e .`), which is how tandem is installed."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
