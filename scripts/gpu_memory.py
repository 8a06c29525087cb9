"""Peak GPU memory of the Megatron trainer, feature by feature, against tandem.lab.plan's prediction.

    bash scripts/gpu_check.sh --memory              # on a GPU box (one GPU; a few minutes)
    python scripts/gpu_memory.py --allow-cpu        # CPU rehearsal of the same flow: small shapes, no figures

Two shapes: the bodies of Qwen3-0.6B and Qwen3-1.7B (28 layers, hidden 1024 / 2048, 16 / 8 heads,
head_dim 128, MLP 3072 / 6144, tied embeddings) with the real vocabulary (151,936), random bf16
weights written once as an HF checkpoint. For each, the Megatron trainer (TP 1, bf16, megatron-core's
DDP and distributed optimizer) trains a batch of 4 samples x 2,048 tokens with each memory feature
off and on:
    base        4 samples per micro-batch, padded; the whole loss head; optimizer on the GPU; no recompute
    chunked     + trainer.logprob_chunk_tokens = 1024
    packed      + trainer.max_tokens_per_micro_batch = 8192 (the same 4 samples in one packed row)
    offload     + trainer.megatron.optimizer_cpu_offload (fraction 1.0, precision-aware)
    recompute   + trainer.megatron.recompute
    all         every one of them
Measured: torch.cuda.max_memory_allocated over the second train step (after a first one has made
the optimizer state), from a reset of the peak; predicted: tandem.lab.plan.trainer_memory's rank total
for the same setting (weights, grads, optimizer, activations; the runtime reserve is not in it).
Each shape runs in its own process and each variant checks that the one before released its memory.
A variant that fails is reported as FAILED with its error, and the others still run. On CPU
(--allow-cpu) the same flow runs with a 2-layer body of hidden 128 (real vocabulary), 4 x 128 tokens,
chunks of 64, fp32, no recompute (it needs CUDA), and reports the predictions only.
Writes gpu_memory.md and gpu_memory.json to --out (default: a temporary directory, printed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 151936
SHAPES = {
    "Qwen3-0.6B body": {"num_hidden_layers": 28, "hidden_size": 1024, "num_attention_heads": 16,
                        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072},
    "Qwen3-1.7B body": {"num_hidden_layers": 28, "hidden_size": 2048, "num_attention_heads": 16,
                        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 6144},
}
CPU_SHAPE = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 32, "intermediate_size": 256}
SAMPLES, TOKENS, CPU_TOKENS = 4, 2048, 128


def variants(tokens: int) -> dict[str, dict]:
    """The variants at `tokens` per sample (module docstring; the GPU run: 2,048, chunks of 1,024)."""
    offload = {"optimizer_cpu_offload": True, "precision_aware_optimizer": True, "optimizer_offload_fraction": 1.0}
    chunk, budget = tokens // 2, SAMPLES * tokens
    return {"base": {}, "chunked": {"logprob_chunk_tokens": chunk}, "packed": {"max_tokens_per_micro_batch": budget},
            "offload": {"megatron": offload}, "recompute": {"megatron": {"recompute": True}},
            "all": {"logprob_chunk_tokens": chunk, "max_tokens_per_micro_batch": budget,
                    "megatron": {**offload, "recompute": True}}}


T0 = time.perf_counter()


def say(msg: str) -> None:
    print(f"[gpu_memory {time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


def write_checkpoint(body: dict, out: Path, device: str) -> Path:
    """A Qwen3 HF checkpoint of this body and the real vocabulary, random bf16 weights."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if (out / "config.json").exists():
        return out
    config = Qwen3Config(vocab_size=VOCAB, tie_word_embeddings=True, max_position_embeddings=40960,
                         rope_theta=1_000_000.0, rms_norm_eps=1e-6, **body)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
    del model
    return out


def trainer_config(model_dir: Path, variant: dict, cuda: bool):
    from tandem.config import build_config

    megatron = {"tensor_parallel": 1, "bf16": True, **variant.get("megatron", {})}
    trainer = {k: v for k, v in variant.items() if k != "megatron"}
    return build_config({
        "run": {"seed": 0}, "model": {"path": str(model_dir), "dtype": "bfloat16" if cuda else "float32"},
        "trainer": {"backend": "megatron", "gpus": 1, "device": "cuda" if cuda else "cpu", "lr": 1e-5,
                    "micro_batch_size": SAMPLES, "minibatches": 1, "grad_clip": 1.0, **trainer,
                    "megatron": megatron},
        "rollout": {"sampling": {"temperature": 1.0}}})


def batch(tokens: int, seed: int):
    from tandem.sample import Sample

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(SAMPLES):
        ids = torch.randint(0, VOCAB, (tokens,), generator=g).tolist()
        out.append(Sample(prompt_ids=ids[:16], response_ids=ids[16:], loss_mask=[1] * (tokens - 16),
                          rollout_logprobs=[-11.0] * (tokens - 16), advantage=1.0 if i % 2 else -1.0, group_id=i // 2))
    return out


def predicted(cfg, hf: dict, tokens: int) -> int:
    """tandem.lab.plan's rank total for this config at `tokens` per sample."""
    from tandem.lab.plan.planner import trainer_memory, trainer_setting
    from tandem.lab.plan.shape import shape_from_hf

    shape = shape_from_hf(hf, "body")
    return trainer_memory(shape, trainer_setting(cfg, shape, tokens)).total


def measure(model_dir: Path, name: str, variant: dict, cuda: bool) -> dict:
    """One variant: two train steps, the second's peak; returns the row (measured None on CPU)."""
    from tandem.trainer.megatron_backend import MegatronTrainer

    cfg = trainer_config(model_dir, variant, cuda)
    hf = json.loads((model_dir / "config.json").read_text())
    tokens = TOKENS if cuda else CPU_TOKENS
    row = {"variant": name, "predicted": predicted(cfg, hf, tokens)}  # before a CPU run edits the config
    if cuda:
        left = torch.cuda.memory_allocated()
        assert left < 256 << 20, f"{left / 2**30:.2f} GiB still allocated from the variant before"
    if not cuda and cfg.trainer.megatron.recompute:
        if name != "all":
            row.update(measured=None, note="recompute needs CUDA (megatron_dist.check_layout): skipped on CPU")
            return row
        cfg.trainer.megatron.recompute = False  # every other feature still runs together on CPU
        row["note"] = "ran without recompute (needs CUDA)"
    trainer = MegatronTrainer(cfg)
    try:
        t = time.perf_counter()
        trainer.train_step(batch(tokens, 0))  # the optimizer state exists from here on
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        metrics = trainer.train_step(batch(tokens, 1))
        if cuda:
            torch.cuda.synchronize()
        row.update(measured=torch.cuda.max_memory_allocated() if cuda else None, loss=metrics["loss"],
                   step_s=(time.perf_counter() - t) / 2, optimizer=type(trainer.optimizer).__name__)
    finally:
        trainer.close()
        del trainer
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return row


def run_shape(shape: str, work: Path, cuda: bool) -> list[dict]:
    import warnings

    warnings.filterwarnings("ignore")
    body = SHAPES[shape] if cuda else CPU_SHAPE
    model_dir = write_checkpoint(body, work / shape.replace(" ", "_"), "cuda" if cuda else "cpu")
    rows = []
    for name, variant in variants(TOKENS if cuda else CPU_TOKENS).items():
        try:
            row = measure(model_dir, name, variant, cuda)
        except Exception as err:  # noqa: BLE001 - one variant failing must not lose the others' figures
            row = {"variant": name, "predicted": 0, "measured": None, "note": f"FAILED: {type(err).__name__}: {err}"}
            say(f"{shape} {name}: {row['note']}")
            if cuda:
                gc.collect()
                torch.cuda.empty_cache()
        row["shape"] = shape
        if row.get("measured"):
            row["error"] = row["predicted"] / row["measured"] - 1
        say(f"{shape} {name}: predicted {row['predicted'] / 2**30:.2f} GiB, measured "
            + (f"{row['measured'] / 2**30:.2f} GiB ({row['error']:+.1%})" if row.get("measured") else "n/a")
            + (f", {row['step_s']:.1f} s/step" if "step_s" in row else f" ({row.get('note', '')})"))
        rows.append(row)
    return rows


def markdown(rows: list[dict], cuda: bool) -> str:
    device = torch.cuda.get_device_name(0) if cuda else "CPU (rehearsal: no memory figures)"
    lines = [f"# Megatron trainer peak memory against tandem.lab.plan ({device})", "",
             f"{SAMPLES} samples x {TOKENS if cuda else CPU_TOKENS} tokens, TP 1, bf16 on GPU; measured = "
             "torch.cuda.max_memory_allocated over the second train step.", "",
             "| shape | variant | predicted GiB | measured GiB | predicted / measured - 1 |", "|---|---|---|---|---|"]
    for r in rows:
        m = r.get("measured")
        lines.append(f"| {r['shape']} | {r['variant']} | {r['predicted'] / 2**30:.2f} | "
                     + (f"{m / 2**30:.2f} | {r['error']:+.1%}" if m else f"n/a | {r.get('note', 'n/a')}") + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allow-cpu", action="store_true", help="rehearse on CPU: small shapes, no memory figures")
    ap.add_argument("--out", default="", help="directory for gpu_memory.md / .json (default: a temporary one)")
    ap.add_argument("--shape", choices=sorted(SHAPES), help=argparse.SUPPRESS)  # a child: one shape
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print("gpu_memory: no CUDA device visible (use --allow-cpu for a CPU rehearsal)", file=sys.stderr)
        return 2
    if args.shape:
        print("ROWS " + json.dumps(run_shape(args.shape, Path(args.work), cuda)), flush=True)
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="tandem_gpu_memory_"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tandem_gpu_memory_models_"))
    say(f"torch {torch.__version__}, cuda={cuda}; checkpoints in {work}, results to {out}")
    rows: list[dict] = []
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    for shape in SHAPES:  # one process per shape: nothing of one shape's runs is left in the other's peak
        cmd = [sys.executable, __file__, "--shape", shape, "--work", str(work)] + (["--allow-cpu"] if not cuda else [])
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        sys.stdout.write("".join(line + "\n" for line in proc.stdout.splitlines() if not line.startswith("ROWS ")))
        if proc.returncode:
            sys.stderr.write(proc.stderr[-4000:])
            return 1
        rows += json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("ROWS "))[5:])
    (out / "gpu_memory.json").write_text(json.dumps(rows, indent=2) + "\n")
    (out / "gpu_memory.md").write_text(markdown(rows, cuda))
    print(markdown(rows, cuda))
    say(f"wrote {out / 'gpu_memory.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
