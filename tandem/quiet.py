"""Other libraries' progress bars and advisory warnings, off unless `--verbose`.

datasets ("Generating train split"), transformers and huggingface_hub ("Loading weights",
"Writing model shards") draw progress bars, and transformers prints advisory warnings, on every
run; tandem says what it is loading itself. They read these variables when they are imported,
so the launcher sets them first, and every child inherits them with the launcher's environment.
A variable the user set is left as it is.
"""

from __future__ import annotations

import logging
import os

QUIET_ENV = {
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TANDEM_QUIET": "1",
}
"""What the launcher puts in its (and so its children's) environment when not verbose."""


def quiet_libraries(verbose: bool) -> None:
    """Set QUIET_ENV (unless verbose), and apply it to the libraries already imported."""
    if verbose:
        return
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    _apply_to_loaded()


def quiet() -> bool:
    """This process was started quiet (the launcher's children read it from their environment)."""
    return os.environ.get("TANDEM_QUIET") == "1"


def _apply_to_loaded() -> None:
    import sys

    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()
        logging.getLogger("datasets").setLevel(logging.ERROR)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


class ProbeNoise(logging.Filter):
    """uvicorn logs 'Invalid HTTP request received.' at WARNING for every connection that does not
    speak HTTP/1.1; sglang-router opens two such (an HTTP/2 preface probing for gRPC) each time it
    registers an engine. Quiet engines log it at DEBUG: it is the router's probe, not a fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Invalid HTTP request received"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True
