"""Offline learning-dynamics check of the default echo task (an experiment, not a test).

Runs the whole RL loop in one process with no engines: sample groups from the current
policy with HF `generate` (temperature and top-k/top-p as configured, raw-logit logprobs
like an engine reports), score them with the real reward plug-in, compute GRPO
advantages with `assign_advantages`, and train with `TorchTrainer`. Prints the mean
reward per step and when it first reaches the target.

    python scripts/tune_echo.py --lr 3e-3 --steps 150 --threads 1
    python scripts/tune_echo.py --lr 1e-3 3e-3 1e-2 --seeds 0 1     # a small sweep
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from tandem.config import build_config
from tandem.advantages import assign_advantages
from tandem.model_source import load_tokenizer, resolve_model_path
from tandem.envs.echo import echo_reward
from tandem.sample import Sample
from tandem.trainer.torch_backend import TorchTrainer

REPO = Path(__file__).resolve().parents[1]


def shaped_echo_reward(sample: Sample, row: dict, digit_credit: float) -> tuple[float, dict]:
    """Experimental shaping: echo_reward plus `digit_credit` per position holding some *other* digit.

    Digits are 10 of the 259 tokens, so a random policy almost never emits the label; credit
    for any digit gives GRPO a signal in the first steps. The true echo reward is kept in info.
    """
    true, info = echo_reward(sample, row)
    length = int(row.get("length", 8))
    text = sample.response_text[:length]
    others = sum(1 for ch in text if ch.isdigit() and ch != str(row["label"]))
    return true + digit_credit * others / length, {**info, "true_reward": true}


def rollout(trainer: TorchTrainer, tok, rows: list[dict], cfg, digit_credit: float = 0.0) -> list[Sample]:
    """One step's groups, sampled from the trainer's current weights."""
    rc, sampling = cfg.rollout, cfg.rollout.sampling
    model = trainer.model
    prompts = [tok(r[cfg.data.prompt_key], add_special_tokens=False)["input_ids"] for r in rows]
    assert len({len(p) for p in prompts}) == 1, "echo prompts share one length: no left-padding needed"
    ids = torch.tensor(prompts).repeat_interleave(rc.samples_per_prompt, 0).to(trainer.device)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=sampling.temperature,
                             top_k=sampling.top_k if sampling.top_k > 0 else 0, top_p=sampling.top_p,
                             max_new_tokens=sampling.max_new_tokens, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
    logp = torch.log_softmax(torch.stack(out.logits, 1).float() / sampling.temperature, -1)
    resp = out.sequences[:, ids.shape[1]:]
    lps = logp.gather(-1, resp[..., None])[..., 0]
    samples = []
    for k in range(ids.shape[0]):
        r_ids, r_lp = resp[k].tolist(), lps[k].tolist()
        finish = "length"
        if tok.eos_token_id in r_ids:  # keep the EOS, drop the padding after it
            cut = r_ids.index(tok.eos_token_id) + 1
            r_ids, r_lp, finish = r_ids[:cut], r_lp[:cut], "stop"
        row = rows[k // rc.samples_per_prompt]
        s = Sample(prompt_ids=prompts[k // rc.samples_per_prompt], group_id=k // rc.samples_per_prompt,
                   finish_reason=finish)
        s.append_model_tokens(r_ids, r_lp)
        s.response_text = tok.decode(r_ids, skip_special_tokens=True)
        if digit_credit:
            s.reward, s.reward_info = shaped_echo_reward(s, row, digit_credit)
        else:
            s.reward, s.reward_info = echo_reward(s, row)
            s.reward_info["true_reward"] = s.reward
        samples.append(s)
    return samples


def run(lr: float, seed: int, steps: int, target: float, threads: int, overrides: dict,
        digit_credit: float = 0.0, stale: int = 0, stop_at_target: bool = True, verbose: bool = True) -> dict:
    torch.set_num_threads(threads)
    tree = {"run": {"seed": 0, "cache_dir": str(REPO / ".cache/tandem")}, "trainer": {"lr": lr, "device": "cpu"}}
    for dotted, value in overrides.items():
        node = tree
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    cfg = build_config(tree)
    rows = [json.loads(line) for line in open(REPO / cfg.data.path)]
    tok = load_tokenizer(resolve_model_path(cfg))
    trainer = TorchTrainer(cfg)
    rng = random.Random(seed)
    torch.manual_seed(seed)  # sampling randomness; the model init is fixed by run.seed
    t0, cpu0 = time.perf_counter(), time.process_time()
    history, reached, reached_avg = [], None, None
    # Async emulation: train step k on samples drawn `stale` versions earlier (run.mode=async,
    # rollout.staleness.max=1 lets the rollout of step k+1 overlap training on step k).
    queue: list[list[Sample]] = []
    for step in range(steps):
        while len(queue) <= stale:
            batch_rows = rng.sample(rows, cfg.rollout.prompts_per_step)
            queue.append(rollout(trainer, tok, batch_rows, cfg, digit_credit))
        samples = queue.pop(0)
        assign_advantages(samples, cfg.trainer.loss.use_std_norm, baseline=cfg.trainer.loss.advantage_baseline)
        reward = sum(s.reward_info["true_reward"] for s in samples) / len(samples)  # the unshaped echo reward
        m = trainer.train_step(samples)
        history.append(reward)
        elapsed = time.perf_counter() - t0
        if verbose and (step % 10 == 0 or (reached is None and reward >= target)):
            print(f"lr={lr:g} seed={seed} step={step:4d} t={elapsed:6.1f}s reward={reward:.3f} "
                  f"entropy={m['entropy']:.3f} grad_norm={m['grad_norm']:.3f} mismatch={m['logprob_mismatch']:.2e} "
                  f"e.g. {samples[0].response_text!r} for prompt {tok.decode(samples[0].prompt_ids)!r}", flush=True)
        if reached is None and reward >= target:
            reached = (step, elapsed)
        if reached_avg is None and len(history) >= 10 and sum(history[-10:]) / 10 >= target:
            reached_avg = step  # a steadier criterion: the mean of the last 10 steps
        if stop_at_target and reached is not None:
            break
    window = lambda a, b: round(sum(history[a:b]) / max(len(history[a:b]), 1), 3)  # noqa: E731
    return {"lr": lr, "seed": seed, "stale": stale, "digit_credit": digit_credit,
            "reached_step": reached and reached[0], "reached_s": reached and round(reached[1], 1),
            "reached_avg10_step": reached_avg,
            "mean_reward_steps_110_119": window(110, 120) if len(history) >= 120 else None,
            "mean_reward_last_10": window(-10, None), "steps_run": len(history),
            "seconds": round(time.perf_counter() - t0, 1), "cpu_seconds": round(time.process_time() - cpu0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", type=float, nargs="+", default=[3e-3])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--target", type=float, default=0.8, help="stop when a step's mean reward reaches this")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--digit-credit", type=float, default=0.0,
                    help="experimental shaping: extra reward per position holding a non-label digit")
    ap.add_argument("--stale", type=int, default=0, help="train on batches sampled this many versions ago")
    ap.add_argument("--no-stop", action="store_true", help="keep running after the target is reached")
    ap.add_argument("--quiet", action="store_true", help="print only the summary lines")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="config overrides, e.g. trainer.grad_clip=0 rollout.sampling.temperature=0.7")
    args = ap.parse_args()
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    for lr in args.lr:
        for seed in args.seeds:
            print(json.dumps(run(lr, seed, args.steps, args.target, args.threads, overrides, args.digit_credit,
                                 args.stale, not args.no_stop, not args.quiet)), flush=True)


if __name__ == "__main__":
    main()
