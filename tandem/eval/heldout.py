"""The held-out prompts a run evaluates on: eval.data_path, or eval.holdout_fraction of the
training data split off by a seeded draw (those rows are then never trained on).

The split depends on the data and eval.split_seed only, so a resumed run, `tandem eval` and a
second run with another run.seed all hold out the same prompts.
"""

from __future__ import annotations

import math
import random

from tandem.config import TandemConfig
from tandem.rollout import DataError, Dataset, load_dataset_rows


def split_rows(rows: list[dict], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows): ceil(fraction * n) rows drawn by `seed`, each list in file order."""
    held = set(random.Random(seed).sample(range(len(rows)), math.ceil(fraction * len(rows))))
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]


def with_held_out(cfg: TandemConfig, dataset: Dataset) -> Dataset:
    """The training dataset, less any held-out rows, with the held-out rows (capped at
    eval.max_prompts) as its `held_out`; without eval.enabled, `dataset`. Bad data raises
    DataError naming the eval key."""
    ev = cfg.eval
    if not ev.enabled:
        return dataset
    if ev.data_path:
        try:
            rows = load_dataset_rows(ev.data_path, cfg.data.prompt_key).rows
        except DataError as err:
            raise DataError(f"eval.data_path: {str(err).replace(' (data.path)', '')}") from None
        train = dataset
    else:
        kept, rows = split_rows(dataset.rows, ev.holdout_fraction, ev.split_seed)
        if not kept:
            raise DataError(f"eval.holdout_fraction = {ev.holdout_fraction} holds out all {len(dataset.rows)} "
                            f"row(s) of {cfg.data.path}: nothing is left to train on; lower it")
        train = Dataset(kept, dataset.skipped, dataset.skipped_examples)
    return Dataset(train.rows, train.skipped, train.skipped_examples, rows[: ev.max_prompts] if ev.max_prompts else rows)
