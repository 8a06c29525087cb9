"""The TRL half of bench/trl_compare.py: GRPOTrainer steps in a process of their own.

    python bench/trl_worker.py SPEC.json OUT.json     # started by trl_compare.py, not by hand

trl_compare.py writes the spec (config argv, data path, P, G, T, warm-up and measured steps,
torch threads) and reads the per-step timings back from OUT.json. Running here, in a child,
means TRL's imports, threads and memory are gone before tandem starts, and a TRL failure
cannot take the tandem half down with it.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from tandem.config import TandemConfig, load_config
from tandem.model_source import resolve_model_path
from tandem.envs.echo import echo_reward
from tandem.sample import Sample

from _common import median_or_none


class EchoReward:
    """tandem.envs.echo.echo_reward itself, fed the decoded completion, so both sides score identically."""

    __name__ = "echo_reward"   # TRL names the reward column after it

    def __init__(self):
        self.completion_tokens: list[int] = []
        self.rewards: list[float] = []

    def __call__(self, prompts, completions, completion_ids, label, length, **_) -> list[float]:
        out = []
        for text, ids, lab, n in zip(completions, completion_ids, label, length):
            r, _info = echo_reward(Sample(prompt_ids=[], response_text=text), {"label": lab, "length": n})
            out.append(float(r))
            self.completion_tokens.append(len(ids))
        self.rewards.extend(out)
        return out


class Clock(TrainerCallback):
    def __init__(self):
        self.begin: list[float] = []
        self.end: list[float] = []

    def on_train_begin(self, args, state, control, **kw):
        self.train_begin = time.perf_counter()
        self.cpu = [time.process_time()]  # this process, all threads: comparable to tandem's tree CPU

    def on_step_begin(self, args, state, control, **kw):
        self.begin.append(time.perf_counter())

    def on_step_end(self, args, state, control, **kw):
        self.end.append(time.perf_counter())
        self.cpu.append(time.process_time())


def _timed(into: list[float], fn, *args):
    """fn(*args), its wall time appended to `into` even when it raises."""
    t0 = time.perf_counter()
    try:
        return fn(*args)
    finally:
        into.append(time.perf_counter() - t0)


class TimedGRPO(GRPOTrainer):
    """Splits each step into generation / scoring / training without changing what runs."""

    gen_s: list[float] = []
    prep_s: list[float] = []

    def _generate(self, prompts):
        return _timed(self.gen_s, super()._generate, prompts)

    def _generate_and_score_completions(self, inputs):
        return _timed(self.prep_s, super()._generate_and_score_completions, inputs)


def echo_dataset(data_path: Path, rows_needed: int) -> Dataset:
    rows = [json.loads(line) for line in data_path.read_text().splitlines() if line.strip()]
    # Only as many rows as the run consumes (plus slack): keeps dataset set-up out of the picture.
    n_rows = min(len(rows), rows_needed)
    return Dataset.from_list([{"prompt": r["prompt"], "label": str(r["label"]), "length": int(r.get("length", 8))}
                              for r in rows[:n_rows]])


def grpo_config(cfg: TandemConfig, spec: dict, out_dir: str) -> GRPOConfig:
    """tandem's resolved settings as TRL arguments: same batch, sampling, clip, optimizer and seed."""
    P, G = spec["prompts"], spec["group"]
    lo = cfg.trainer.loss
    return GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        fp16=False,
        use_vllm=False,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        disable_tqdm=True,
        max_steps=spec["warmup"] + spec["steps"],
        per_device_train_batch_size=P * G,  # TRL counts completions: P prompts x G samples per step
        gradient_accumulation_steps=1,
        num_generations=G,
        max_completion_length=spec["tokens"],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        num_iterations=1,
        beta=0.0,  # tandem's default kl_coef = 0: no reference model on either side
        epsilon=lo.eps_clip,
        epsilon_high=lo.eps_clip_high,
        scale_rewards="group" if lo.use_std_norm else "none",
        loss_type="grpo" if lo.aggregation == "seq_mean_token_mean" else "dapo",
        learning_rate=cfg.trainer.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=cfg.trainer.weight_decay,
        adam_beta1=cfg.trainer.betas[0],
        adam_beta2=cfg.trainer.betas[1],
        max_grad_norm=cfg.trainer.grad_clip,
        optim="adamw_torch",
        seed=cfg.run.seed,
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )


def timings(clock: Clock, reward: EchoReward, warmup: int, per_step: int, model: dict) -> dict:
    """Per-step wall, CPU, generation and scoring times (with `model`, what was trained, in the
    order the results file has always had); the medians leave out the warm-up steps."""
    W = warmup
    begin_end = [e - b for b, e in zip(clock.begin, clock.end)]
    # end->end interval of step k (k >= 1); step 0's interval starts at on_train_begin.
    starts = [clock.train_begin] + clock.end[:-1]
    end_end = [e - s for s, e in zip(starts, clock.end)]
    cpu_steps = [b - a for a, b in zip(clock.cpu[:-1], clock.cpu[1:])]
    completion_tokens, rewards = reward.completion_tokens, reward.rewards
    return {
        "cpu_s_per_step_all": cpu_steps,
        "cpu_s_per_step": median_or_none(cpu_steps[W:]),
        **model,
        "steps_run": len(clock.end),
        "step_time_all": end_end,
        "step_time_begin_end_all": begin_end,
        "gen_time_all": list(TimedGRPO.gen_s),
        "score_time_all": list(TimedGRPO.prep_s),
        "step_time": median_or_none(end_end[W:]),
        "step_time_begin_end": median_or_none(begin_end[W:]),
        "gen_time": median_or_none(TimedGRPO.gen_s[W:]),
        "score_time": median_or_none(TimedGRPO.prep_s[W:]),
        "samples_per_step": per_step,
        "completion_tokens_mean": statistics.fmean(completion_tokens[W * per_step:]) if completion_tokens else None,
        "reward_mean": statistics.fmean(rewards[W * per_step:]) if rewards else None,
    }


def trl_worker(spec: dict) -> dict:
    """Train `warmup + steps` GRPO steps with TRL and return per-step timings."""
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    cfg = load_config(spec["config_argv"])
    model_dir = str(resolve_model_path(cfg))
    P, G = spec["prompts"], spec["group"]
    dataset = echo_dataset(Path(spec["data_path"]), P * (spec["warmup"] + spec["steps"] + 2))
    reward = EchoReward()
    out_dir = tempfile.mkdtemp(prefix="trl_compare_")
    args = grpo_config(cfg, spec, out_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    clock = Clock()
    trainer = TimedGRPO(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                        processing_class=tok, callbacks=[clock])
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    shutil.rmtree(out_dir, ignore_errors=True)
    trained = {"model_dir": model_dir, "params": sum(p.numel() for p in model.parameters()),
               "torch_threads": torch.get_num_threads()}
    return {**timings(clock, reward, spec["warmup"], P * G, trained), "train_wall_s": wall}


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    res = trl_worker(json.loads(Path(spec_path).read_text()))
    Path(out_path).write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
