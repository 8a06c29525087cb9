"""What the inspector shows, read from a run directory: metrics.jsonl, queue.jsonl, the kept
rollouts/step_N.json files, the evaluations (eval.jsonl, eval/step_N.json) and the run's
config.json (for its tokenizer).

Everything here is data: the page (tandem/inspect/page.py) embeds it as JSON and its script
renders every string as text, never as markup (a sample's text is the policy's, an adversary's).
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.metric_groups import metric_group, numeric
from tandem.model_source import build_byte_tokenizer, load_tokenizer

STEP_FILE = re.compile(r"step_(\d+)\.json$")
SAMPLE_FIELDS = ("prompt_ids", "response_ids", "loss_mask", "rollout_logprobs", "token_versions", "weight_version",
                 "finish_reason", "reward", "advantage", "group_id", "prompt_index", "reward_info", "metadata")


class NotARunDir(ValueError):
    """The directory holds nothing tandem wrote (no metrics.jsonl and no rollouts)."""


@dataclass
class RunData:
    run_dir: Path
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    queue: dict[str, dict[str, list[float]]]
    samples: list[dict[str, Any]] = field(default_factory=list)
    """Training samples, then evaluation samples (`source` = 'eval', `step` = 'eval@N')."""
    evals: list[dict[str, Any]] = field(default_factory=list)
    """eval.jsonl: one row per evaluation, tagged with the step and weight version it measured."""
    vocab: dict[int, str] = field(default_factory=dict)
    """Token id -> its text, for every id a shown sample holds (one entry per distinct id)."""
    notes: list[str] = field(default_factory=list)
    """What could not be read, said on the page and on stderr (a truncated line, no tokenizer)."""

    def payload(self) -> dict[str, Any]:
        """The JSON the page embeds."""
        keys = sorted({k for row in self.rows for k, v in row.items() if numeric(v)} - {"step"})
        return {
            "run": {"dir": str(self.run_dir), "name": self.run_dir.name, "summary": config_summary(self.config)},
            "metrics": {"steps": [row.get("step") for row in self.rows],
                        "series": {k: [finite(row.get(k)) for row in self.rows] for k in keys},
                        "groups": {k: metric_group(k) for k in keys}},
            "queue": self.queue,
            "eval": eval_payload(self.evals),
            "samples": self.samples,
            "vocab": {str(k): v for k, v in self.vocab.items()},
            "notes": self.notes,
        }


def finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a diverged loss is shown as a gap, not a broken page."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def eval_payload(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The evaluation tab's curves: every eval/* figure against the step it measured."""
    keys = sorted({k for row in rows for k, v in row.items() if numeric(v) and (k.startswith("eval/") or k == "eval_time")})
    return {"steps": [row.get("step") for row in rows], "versions": [row.get("weight_version") for row in rows],
            "cut_short": [bool(row.get("cut_short")) for row in rows],
            "series": {k: [finite(row.get(k)) for row in rows] for k in keys}}


def config_summary(config: dict[str, Any]) -> dict[str, Any]:
    """The few settings that say what the run was."""
    def get(section: str, key: str) -> Any:
        return (config.get(section) or {}).get(key)

    environment = get("environment", "name")
    # An environment run's episodes and scores are its class's (step/tools and reward()): the
    # rollout.function and rollout.reward defaults left in its config are not what ran.
    task = {"environment": environment} if environment else {"task": get("rollout", "function"),
                                                              "reward": get("rollout", "reward")}
    return {"model": get("model", "path"), "mode": get("run", "mode"), "steps": get("run", "steps"),
            "engines": get("engine", "count"), "engine": get("engine", "backend"),
            "trainer": get("trainer", "backend"), **task}


def read_jsonl(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Every whole line of `path` (a run still writing may have half a last line)."""
    rows: list[dict] = []
    if not path.exists():
        return rows
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            notes.append(f"{path.name} line {number} is not JSON (skipped)")
    return rows


def queue_timeline(records: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per engine: seconds since the first sample, waiting and running requests."""
    t0 = min((r["t"] for r in records if "t" in r), default=0.0)
    out: dict[str, dict[str, list[float]]] = {}
    for r in records:
        if not {"t", "engine", "waiting", "running"} <= set(r):
            continue
        series = out.setdefault(str(r["engine"]), {"t": [], "waiting": [], "running": []})
        series["t"].append(round(r["t"] - t0, 3))
        series["waiting"].append(r["waiting"])
        series["running"].append(r["running"])
    return out


def step_files(run_dir: Path, source: str = "rollouts") -> list[tuple[int, Path]]:
    """(step as the files number it, from 1; path) of every kept rollouts file (or, `source` 'eval',
    evaluation file: the steps its weights had trained), in order."""
    found = [(int(m.group(1)), p) for p in (run_dir / source).glob("step_*.json")
             if (m := STEP_FILE.search(p.name))]
    return sorted(found)


def first_samples(kept: list[dict[str, Any]], per_step: int, tokens_per_step: int) -> list[dict[str, Any]]:
    """The first samples of a batch: at most `per_step`, and no more tokens than `tokens_per_step`
    (always at least one), so a page of 32k-token agent trajectories stays a page."""
    out: list[dict] = []
    tokens = 0
    for raw in kept[:per_step]:
        tokens += len(raw.get("prompt_ids") or []) + len(raw.get("response_ids") or [])
        if out and tokens > tokens_per_step:
            break
        out.append(raw)
    return out


def read_samples(run_dir: Path, per_step: int, notes: list[str], tokens_per_step: int,
                 source: str = "rollouts") -> list[dict[str, Any]]:
    """The first samples of every kept step (first_samples), each with its step and staleness;
    `source` 'eval': of every evaluation (eval/step_N.json), labelled eval@N, staleness 0."""
    samples = []
    for step, path in step_files(run_dir, source):
        try:
            payload = json.loads(path.read_bytes())
        except (json.JSONDecodeError, OSError) as err:
            notes.append(f"{path.name} could not be read ({err}); its samples are not shown")
            continue
        # the loop's 0-based step (the version it trains); an evaluation's samples are all of its version
        step0 = int(payload.get("weight_version", 0)) if source == "eval" else int(payload.get("step", step - 1))
        kept = payload.get("samples", [])
        shown = first_samples(kept, per_step, tokens_per_step)
        if len(shown) < len(kept):
            notes.append(f"step {step}: {len(shown)} of its {len(kept)} samples shown "
                         f"(--samples-per-step, --tokens-per-step)")
        for index, raw in enumerate(shown):
            sample = {k: raw.get(k) for k in SAMPLE_FIELDS}
            versions = raw.get("token_versions") or []
            sample.update(step=f"eval@{step}" if source == "eval" else step, index=index, source=source, staleness=step0 - int(raw.get("weight_version", 0)),
                          token_lag=[step0 - v if v >= 0 else None for v in versions],
                          end_reason=((raw.get("metadata") or {}).get("env") or {}).get("end_reason")
                          or raw.get("finish_reason", ""))
            samples.append(finite(sample))
    return samples


def load_token_texts(config: dict[str, Any], ids: set[int], notes: list[str]) -> dict[int, str]:
    """Each id's text under the run's tokenizer; {} (and a note: ids are shown) when there is none."""
    model = config.get("model") or {}
    try:
        if model.get("path", "tiny") == "tiny":  # rebuilt exactly, without the model's weights
            tokenizer = build_byte_tokenizer(int((model.get("tiny") or {}).get("tool_tokens", 0)))
        else:
            tokenizer = load_tokenizer(model["path"], bool(model.get("trust_remote_code", False)))
    except Exception as err:  # an unreachable hub id: the page still works, with ids for text
        notes.append(f"no tokenizer for {model.get('path')!r} ({type(err).__name__}: {err}); tokens shown as ids")
        return {}
    ordered = sorted(ids)
    return dict(zip(ordered, tokenizer.batch_decode([[i] for i in ordered], clean_up_tokenization_spaces=False)))


def read_run(run_dir: Path, per_step: int = 128, tokens_per_step: int = 250_000) -> RunData:
    """Everything the inspector shows of the run in `run_dir`."""
    notes: list[str] = []
    if not (run_dir / "metrics.jsonl").exists() and not step_files(run_dir):
        raise NotARunDir(f"{run_dir}: no metrics.jsonl and no rollouts/step_N.json (is it a tandem run directory?)")
    config_path = run_dir / "config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl", notes) if isinstance(r, dict)]
    samples = read_samples(run_dir, per_step, notes, tokens_per_step)
    samples += read_samples(run_dir, per_step, notes, tokens_per_step, source="eval")
    evals = [r for r in read_jsonl(run_dir / "eval.jsonl", notes) if isinstance(r, dict)]
    ids = {int(i) for s in samples for key in ("prompt_ids", "response_ids") for i in (s.get(key) or [])}
    vocab = load_token_texts(config, ids, notes) if ids else {}
    data = RunData(run_dir, config, rows, queue_timeline(read_jsonl(run_dir / "queue.jsonl", notes)), samples,
                   evals, vocab, notes)
    for note in notes:
        print(f"tandem inspect: {note}", file=sys.stderr)
    return data
