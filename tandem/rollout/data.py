"""Prompt data: a JSONL or parquet dataset checked row by row, and the cursor that walks it in
seeded epochs (its state is checkpointed, so a resume draws the same prompts next)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path


class DataError(ValueError):
    pass


@dataclass
class Dataset:
    """Rows of the prompt dataset, with the count of rows that were skipped as malformed."""
    rows: list[dict]
    skipped: int
    skipped_examples: list[str]
    held_out: list[dict] = field(default_factory=list)
    """Rows kept for evaluation ([eval]), never trained on (tandem.eval.heldout)."""


def _row_problem(row: dict, prompt_key: str) -> str | None:
    if prompt_key not in row or row[prompt_key] is None:
        return f"missing field '{prompt_key}'"
    prompt = row[prompt_key]
    if isinstance(prompt, str):
        return None if prompt else "empty prompt"
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
        return None
    return f"field '{prompt_key}' is neither a string nor a list of chat messages"


def _read_jsonl_tolerant(path: Path) -> tuple[list[dict], list[int], list[str]]:
    """JSONL where a bad line is reported, not fatal (datasets would reject the whole file):
    (rows, the 1-based line of each, the problems)."""
    rows, lines, bad = [], [], []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            bad.append(f"line {lineno}: not JSON ({err.msg})")
            continue
        if not isinstance(row, dict):
            bad.append(f"line {lineno}: not a JSON object")
            continue
        rows.append(row)
        lines.append(lineno)
    return rows, lines, bad


def _fill_missing_keys(rows: list[dict]) -> list[dict]:
    """Every row with every key some row has (None where it lacks one), as `datasets` gives a
    JSONL file's rows: a plug-in reading row.get("answer") sees the same in both formats."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return [{k: row.get(k) for k in keys} for row in rows]


def load_dataset_rows(path: str, prompt_key: str) -> Dataset:
    """Load local JSONL (read here) or parquet (with `datasets`); malformed rows are skipped and
    counted, each named by its line in a JSONL file (1-based, as an editor shows it) or its row in a
    parquet one. JSONL skips `datasets` (and pandas, pyarrow: seconds of imports) so that preflight
    answers before anything heavy loads."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"dataset file '{path}' does not exist (data.path)")
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".json"):
        rows, lines, bad = _read_jsonl_tolerant(p)
        where = [f"line {n}" for n in lines]
        rows = _fill_missing_keys(rows)
    elif suffix == ".parquet":
        import datasets

        rows = [dict(r) for r in datasets.load_dataset("parquet", data_files=str(p), split="train")]
        where, bad = [f"row {i + 1}" for i in range(len(rows))], []
    else:
        raise DataError(f"dataset file '{path}' must be .jsonl, .json or .parquet (data.path)")
    good = []
    for i, row in enumerate(rows):
        problem = _row_problem(row, prompt_key)
        if problem:
            bad.append(f"{where[i]}: {problem}")
        else:
            good.append({**row, "_index": i})
    if not good:
        raise DataError(f"dataset '{path}' has no usable rows (prompt field '{prompt_key}'); "
                        f"{len(bad)} malformed, e.g. {bad[:3]}")
    return Dataset(good, len(bad), bad[:10])


class PromptCursor:
    """Deterministic, resumable walk over the dataset: seeded shuffle per epoch."""

    def __init__(self, n: int, seed: int, shuffle: bool, epoch: int = 0, position: int = 0):
        self.n, self.seed, self.shuffle = n, seed, shuffle
        self.epoch, self.position = epoch, position
        self._order = self._epoch_order(epoch)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next(self) -> int:
        if self.position >= self.n:
            self.epoch, self.position = self.epoch + 1, 0
            self._order = self._epoch_order(self.epoch)
        idx = self._order[self.position]
        self.position += 1
        return idx

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "shuffle": self.shuffle, "n": self.n}


# ----------------------------------------------------------------------------- engine client
