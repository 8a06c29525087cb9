"""`tandem inspect` on a run directory written by tandem's own writers (metrics rows, the handoff's
rollouts files, the run's config), in this process: the page carries everything it needs, and
nothing the policy wrote can become markup or script in it. (The page in a real browser:
tests/test_run_views.py.)"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tandem import cli
from tandem.config import TandemConfig
from tandem.handoff import atomic_write_json
from tandem.inspect.page import embedded_json
from tandem.inspect.run_data import first_samples
from tandem.model_source import build_byte_tokenizer
from _views import IMG_ONERROR, SCRIPT_BREAK, SVG_ONLOAD, adversarial_sample


class Tags(HTMLParser):
    """Every element a browser's parser would create, and each script element's attributes and text."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._script: dict | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script = dict(attrs)
            self.scripts.append((self._script, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None

    def handle_data(self, data):
        if self._script is not None:
            self.scripts[-1] = (self._script, self.scripts[-1][1] + data)


def write_run(run_dir: Path, steps: int = 2, samples_per_step: int = 3) -> Path:
    """A run directory as a run leaves it; step 1's first sample is the adversary's."""
    tokenizer = build_byte_tokenizer()
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(TandemConfig().model_dump(mode="json")))
    rows = [{"step": s, "reward_mean": 0.1 * s, "reward_std": 0.05, "loss": float("nan") if s == 2 else 0.5,
             "train_time": 0.2, "trainer_wait_time": 0.3, "step_time": 0.6, "token_lag_0": 1.0,
             "changed_fraction": 0.0, "env_success_rate": 0.5} for s in range(1, steps + 1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "rew')
    (run_dir / "queue.jsonl").write_text("".join(json.dumps({"t": 100.0 + i, "engine": f"engine{i % 2}",
                                                             "waiting": i, "running": 1}) + "\n" for i in range(6)))
    for step in range(steps):
        samples = [adversarial_sample(encode) for _ in range(samples_per_step)]
        for k, sample in enumerate(samples[1:], 1):
            sample.update(reward=float(k), reward_info={}, metadata={"env": {"end_reason": "done"}})
        atomic_write_json(run_dir / "rollouts" / f"step_{step + 1:06d}.json",
                          {"step": step, "extra": {}, "samples": samples})
    return run_dir


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, str, dict]:
    run_dir = write_run(tmp_path_factory.mktemp("inspect") / "run")
    assert cli.main(["inspect", str(run_dir), "--samples-per-step", "2"]) == 0
    text = (run_dir / "inspect.html").read_text()
    [data] = [body for attrs, body in Tags(text).scripts if attrs.get("type") == "application/json"]
    return run_dir, text, json.loads(data)


def test_the_page_loads_nothing_from_anywhere(page):
    _, text, _ = page
    tags = Tags(text).tags
    assert [t for t, attrs in tags if "src" in attrs or "href" in attrs and t != "a"] == []
    assert not [t for t, _ in tags if t in ("link", "iframe", "object", "embed", "img")]
    assert [attrs for t, attrs in tags if t == "meta" and attrs.get("http-equiv") == "Content-Security-Policy"
            and "default-src 'none'" in attrs["content"]]
    assert "Plotly.newPlot" in text and "plotly.js v" in text.lower()  # the charts' library, inlined


def test_what_the_policy_wrote_stays_data(page):
    """Three script elements (the data, plotly.js, the page's script) whatever the samples hold;
    no element the adversary's text spells out exists, and its text arrives intact as data."""
    _, text, data = page
    tags = Tags(text).tags
    assert [t for t, _ in tags].count("script") == 3, [a for t, a in tags if t == "script"]
    assert not [t for t, _ in tags if t in ("img", "svg")]
    evil = data["samples"][0]
    assert evil["reward_info"]["reason"] == IMG_ONERROR and evil["end_reason"] == SCRIPT_BREAK
    assert evil["metadata"]["agent"]["actions"] == [SVG_ONLOAD]
    decoded = "".join(data["vocab"][str(i)] for i in evil["response_ids"])
    assert decoded == SCRIPT_BREAK + IMG_ONERROR + SVG_ONLOAD


def test_embedded_json_escapes_every_character_that_could_end_the_element():
    text = embedded_json({"a": "</script><!-- & \u2028"})
    assert not {"<", ">", "&", "\u2028"} & set(text)
    assert json.loads(text) == {"a": "</script><!-- & \u2028"}


def test_the_page_says_what_it_could_not_read_and_shows_a_nan_as_a_gap(page):
    _, _, data = page
    assert data["metrics"]["steps"] == [1, 2]  # the half-written third row is skipped ...
    assert any("metrics.jsonl line 3" in note for note in data["notes"])  # ... and said
    assert data["metrics"]["series"]["loss"] == [0.5, None]
    assert data["metrics"]["groups"]["loss"] == "train" and data["metrics"]["groups"]["env_success_rate"] == "env"
    assert any("2 of its 3 samples" in note for note in data["notes"])
    assert [(s["step"], s["index"]) for s in data["samples"]] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert set(data["queue"]) == {"engine0", "engine1"} and data["queue"]["engine1"]["t"] == [1.0, 3.0, 5.0]


def test_staleness_and_token_lag_are_counted_from_the_step_that_trained_them(page):
    _, _, data = page
    step2 = data["samples"][2]  # trained at the loop's step 1 on samples of version 0
    assert step2["staleness"] == 1
    assert set(step2["token_lag"]) == {1, None}  # model tokens lag 1; observation tokens have no version


def test_a_directory_that_holds_no_run_is_refused(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path)]) == 2
    assert "no metrics.jsonl and no rollouts" in capsys.readouterr().err
    assert not (tmp_path / "inspect.html").exists()


def test_a_step_shows_its_first_samples_within_the_token_budget():
    batch = [{"prompt_ids": [1] * 4, "response_ids": [2] * 6} for _ in range(5)]  # 10 tokens each
    assert len(first_samples(batch, 128, 25)) == 2
    assert len(first_samples(batch, 3, 10_000)) == 3
    assert len(first_samples(batch, 128, 5)) == 1  # one trajectory, however long


def test_the_header_names_an_environment_runs_environment_not_the_default_plug_ins():
    from tandem.inspect.run_data import config_summary

    env_run = TandemConfig.model_validate({"environment": {"name": "tandem.envs.lookup:Lookup"}}).model_dump()
    summary = config_summary(env_run)
    assert summary["environment"] == "tandem.envs.lookup:Lookup"
    assert "tandem.rollout:single_turn" not in summary.values() and "reward" not in summary
    plain = config_summary(TandemConfig().model_dump())
    assert plain["task"] == "tandem.rollout:single_turn" and plain["reward"].endswith(":echo_reward")


def test_the_evaluation_tab_and_its_trajectories(tmp_path):
    """eval.jsonl rows become the evaluation charts (step, version, cut short); eval/step_N.json's samples
    join the browser as step eval@N, never counted in the training samples' staleness."""
    run_dir = write_run(tmp_path / "run", steps=1)
    # step 3's weights are version 2 (sync.every_k_steps = 2): its samples are of the version evaluated, not stale
    rows = [{"step": s, "weight_version": min(s, 2), "eval/pass@1": 0.25 * s, "eval/reward_mean": 0.5,
             "eval_time": 1.0, "cut_short": s == 3} for s in (0, 3)]
    (run_dir / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    encode = lambda text: build_byte_tokenizer().encode(text, add_special_tokens=False)  # noqa: E731
    pinned = adversarial_sample(encode)
    pinned.update(weight_version=2, token_versions=[2 if v >= 0 else v for v in pinned["token_versions"]])
    atomic_write_json(run_dir / "eval" / "step_3.json", {"step": 3, "weight_version": 2, "errors": [], "samples": [pinned]})
    assert cli.main(["inspect", str(run_dir)]) == 0
    [body] = [b for attrs, b in Tags((run_dir / "inspect.html").read_text()).scripts
              if attrs.get("type") == "application/json"]
    data = json.loads(body)
    assert data["eval"]["steps"] == [0, 3] and data["eval"]["versions"] == [0, 2]
    assert data["eval"]["series"]["eval/pass@1"] == [0.0, 0.75] and data["eval"]["cut_short"] == [False, True]
    evaluated = [s for s in data["samples"] if s["source"] == "eval"]
    assert [(s["step"], s["staleness"], set(s["token_lag"])) for s in evaluated] == [("eval@3", 0, {0, None})]
    assert len(data["samples"]) == 1 + 3
