"""`tandem inspect RUN_DIR`: one self-contained HTML page of a run (tandem/inspect/__main__.py)."""
