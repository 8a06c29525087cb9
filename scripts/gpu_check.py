"""One-GPU check of the GPU backends (run through scripts/gpu_check.sh).

1. Megatron backend, TP=1, on CUDA with megatron.core's DDP + distributed optimizer + bf16
   (the real CUDA path, no CPU shim), 3 training steps on the tiny Qwen3.
2. Export to HF safetensors through sync.publish_weights (version 3), as the trainer loop does.
3. Start an engine on the *base* model - real SGLang when importable (TANDEM_SGLANG_PYTHON or
   this interpreter), else tandem's embedded engine on CUDA - and reload it to version 3
   through /update_weights_from_disk.
4. Generate from the engine with logprobs and score the same tokens with the Megatron model:
   logprob agreement (mean / max |diff|), next to the disagreement with the base model,
   which shows the engine really serves the new weights.
5. `--moe`: the same on a tiny Qwen3-MoE (megatron-core's MoE layers on CUDA, bf16, the engine
   started with routed experts: SGLang's --enable-return-routed-experts), then one training step
   on the engine's samples with their routing: routing agreement of the bf16 trainer against the
   engine, and the mismatch with routing replay against without.
Prints every figure and PASS/FAIL. `--allow-cpu` rehearses the same flow on a CPU box (CPU
shim + embedded engine on CPU) - it checks the script, not the GPU path.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]

from tandem import losses
from tandem.advantages import assign_advantages
from tandem.config import build_config, write_views
from tandem.model_source import resolve_model_path
from tandem.sample import Sample

T0 = time.perf_counter()


def say(msg: str) -> None:
    print(f"[gpu_check {time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


def sglang_available(python: str) -> bool:
    return subprocess.run([python, "-c", "import sglang"], capture_output=True).returncode == 0


def wait_health(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"engine exited with code {proc.returncode} before becoming healthy")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"engine at {url} not healthy after {timeout_s:.0f}s")


def synthetic_batch(step: int, n_groups: int = 4, group: int = 4) -> list[Sample]:
    g = torch.Generator().manual_seed(100 + step)
    out = []
    for gid in range(n_groups):
        prompt = torch.randint(0, 256, (8,), generator=g).tolist()
        for _ in range(group):
            resp = torch.randint(0, 256, (int(torch.randint(8, 24, (1,), generator=g)),), generator=g).tolist()
            out.append(Sample(prompt_ids=prompt, response_ids=resp, loss_mask=[1] * len(resp),
                              rollout_logprobs=[-5.5] * len(resp), group_id=gid,
                              reward=float(torch.rand((), generator=g) > 0.5)))
    assign_advantages(out)
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--allow-cpu", action="store_true", help="rehearse on CPU (CPU shim + embedded engine)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--conformance", action="store_true",
                    help="with SGLang: also run the engine API conformance tests against it (TANDEM_SGLANG_URL)")
    ap.add_argument("--max-mean-diff", type=float, default=0.05,
                    help="pass threshold on mean |logp_trainer - logp_engine| (bf16 on both sides)")
    ap.add_argument("--moe", action="store_true", help="a tiny Qwen3-MoE (8 experts, top-2) and the routing check")
    return ap.parse_args()


def check_config(work: Path, steps: int, cuda: bool, sglang: bool, moe: bool):
    # head_dim 64: the tiny default (16) is below what SGLang's GPU attention kernels support.
    tiny = {"hidden_size": 256, "num_heads": 4, "num_kv_heads": 2, "head_dim": 64, "intermediate_size": 512,
            "num_layers": 2}
    if moe:
        tiny |= {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256}
    engine = {"backend": "sglang", "count": 1,
              "sglang": {"mem_fraction_static": 0.4, "args": {"skip_server_warmup": True}}} if sglang else \
        {"backend": "embedded", "count": 1, "embedded": {"device": "cuda" if cuda else "cpu"}}
    return build_config({
        "run": {"run_dir": str(work / "run"), "cache_dir": str(work / "cache"), "steps": steps, "seed": 0},
        "model": {"dtype": "bfloat16" if cuda else "float32", "tiny": tiny},
        "trainer": {"backend": "megatron", "gpus": 1, "lr": 1e-3, "micro_batch_size": 8,
                    "megatron": {"tensor_parallel": 1, "pipeline_parallel": 1, "bf16": True},
                    **({"moe": {"record_routing": True}} if moe else {})},
        "engine": engine,
        "rollout": {"sampling": {"temperature": 1.0}},
    })


def train_and_publish(cfg, steps: int, base_dir: str, cuda: bool):
    """1. train `steps` Megatron steps; 2. export and publish version `steps`. -> (trainer, path)"""
    from tandem.trainer.megatron_backend import MegatronTrainer
    from tandem.weights import publish_weights

    t = time.perf_counter()
    trainer = MegatronTrainer(cfg)
    say(f"Megatron trainer up in {time.perf_counter() - t:.1f}s: optimizer {type(trainer.optimizer).__name__}, "
        f"bf16={trainer.bf16}, model {type(trainer.train_model).__name__}")
    if cuda:
        assert "megatron" in type(trainer.optimizer).__module__, "expected megatron.core's optimizer on CUDA"
    for step in range(steps):
        m = trainer.train_step(synthetic_batch(step))
        say(f"step {step}: loss {m['loss']:+.5f} grad_norm {m['grad_norm']:.4f} entropy {m['entropy']:.3f} "
            f"tokens {m['tokens']:.0f} train_time {m['train_time']:.2f}s")
        assert m["optimizer_steps"] == 1.0, "optimizer step skipped (non-finite gradients?)"
    t = time.perf_counter()
    sd = trainer.export_hf_state_dict()
    path = publish_weights(sd, base_dir, cfg.run.run_dir, version=steps, keep_last=2)
    say(f"exported {len(sd)} tensors ({sum(v.numel() for v in sd.values())} params, {next(iter(sd.values())).dtype}) "
        f"to {path} in {time.perf_counter() - t:.2f}s")
    return trainer, path


def start_engine(cfg, work: Path, base_dir: str, cuda: bool):
    """3. an engine (SGLang on a GPU when installed, else the embedded one) on the base model.
    -> (process, url, env, uses SGLang)"""
    from tandem.engine.sglang_launch import sglang_command
    from tandem.ports import free_port

    port = free_port()
    use_sglang = cfg.engine.backend == "sglang"
    run_cfg = write_views(cfg, work)["engine"]  # the engine's view of the config, as the launcher writes it
    if use_sglang:
        cmd = sglang_command(cfg, port=port, model_path=base_dir, weight_version=0)
    else:
        cmd = [sys.executable, "-m", "tandem.engine", "--run-config", str(run_cfg), "--port", str(port),
               "--name", "engine0"]
    env = dict(os.environ)
    if cuda:
        env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    say(f"starting {'SGLang' if use_sglang else 'embedded'} engine: {' '.join(cmd)}")
    proc = subprocess.Popen(cmd, env=env, stdout=open(work / "engine.log", "w"), stderr=subprocess.STDOUT, cwd=ROOT)
    return proc, f"http://127.0.0.1:{port}", env, use_sglang


def reload_engine(url: str, proc, path: Path, version: int) -> None:
    t = time.perf_counter()
    wait_health(url, proc, timeout_s=300)
    say(f"engine healthy in {time.perf_counter() - t:.1f}s")
    t = time.perf_counter()
    r = httpx.post(f"{url}/update_weights_from_disk",
                   json={"model_path": str(path), "weight_version": str(version)}, timeout=300).json()
    say(f"/update_weights_from_disk -> {r} in {time.perf_counter() - t:.2f}s")
    assert r.get("success"), r


def logprob_agreement(trainer, url: str, version: int, base_dir: str, cuda: bool, max_mean_diff: float) -> bool:
    """4. the trainer's logprobs of the engine's own samples, against the engine's (and the base model's)."""
    from tandem.model_source import load_causal_lm

    prompts = [s.prompt_ids for s in synthetic_batch(99)[::4]]
    outs = [httpx.post(f"{url}/generate", timeout=120, json={
        "input_ids": p, "return_logprob": True,
        "sampling_params": {"temperature": 1.0, "max_new_tokens": 32, "ignore_eos": True}}).json()
        for p in prompts]
    versions = {o["meta_info"].get("weight_version") for o in outs}
    say(f"engine reports weight_version {versions}")
    assert versions == {str(version)}, versions
    diffs, base_diffs = [], []
    base = load_causal_lm(base_dir, "float32", "cuda" if cuda else "cpu")
    for prompt, o in zip(prompts, outs):
        eng = torch.tensor([lp[0] for lp in o["meta_info"]["output_token_logprobs"]])
        ids = torch.tensor([prompt + o["output_ids"]])
        logits = trainer.full_logits(ids).float().cpu()
        mine = losses.token_logprobs(logits[:, :-1], ids[:, 1:])[0, len(prompt) - 1:]
        with torch.no_grad():
            b = base(input_ids=ids.to(base.device)).logits.float().cpu()
        diffs.append((mine - eng).abs())
        base_diffs.append((losses.token_logprobs(b[:, :-1], ids[:, 1:])[0, len(prompt) - 1:] - eng).abs())
    d, bd = torch.cat(diffs), torch.cat(base_diffs)
    say(f"logprob |trainer - engine| over {d.numel()} tokens: mean {d.mean():.5f} max {d.max():.5f} "
        f"(engine vs base model: mean {bd.mean():.5f})")
    return d.mean().item() < max_mean_diff and d.mean().item() < bd.mean().item()


def routing_agreement(trainer, url: str, min_agreement: float = 0.9) -> bool:
    """5. (--moe) The engine's samples with their routed experts, one training step on them (lr 1e-9, the scores
    are the point): how often the bf16 Megatron trainer's routers pick the engine's experts."""
    prompts = [s.prompt_ids for s in synthetic_batch(98)]
    samples = []
    for p in prompts:
        o = httpx.post(f"{url}/generate", timeout=120, json={
            "input_ids": p, "return_logprob": True, "return_routed_experts": True,
            "sampling_params": {"temperature": 1.0, "max_new_tokens": 32, "ignore_eos": True}}).json()
        s = Sample(prompt_ids=p, response_ids=o["output_ids"], loss_mask=[1] * len(o["output_ids"]),
                   rollout_logprobs=[lp[0] for lp in o["meta_info"]["output_token_logprobs"]], advantage=1.0)
        s.record_routing(o["meta_info"], 0)
        samples.append(s)
    recorded = sum(s.routed_rows for s in samples)
    for group in trainer.optimizer.param_groups:
        group["lr"] = 1e-9
    m = trainer.train_step(samples)
    say(f"routing: {recorded} positions recorded by the engine; agreement {m.get('routing_agreement', 0):.4f} "
        f"(pairs), {m.get('routing_agreement_tokens', 0):.4f} (tokens); logprob_mismatch {m['logprob_mismatch']:.5f}")
    return recorded > 0 and m.get("routing_agreement", 0.0) >= min_agreement


def sglang_conformance(url: str, env: dict, path: Path) -> bool:
    t = time.perf_counter()
    rc = subprocess.run([sys.executable, "-m", "pytest", "tests/test_engine_api.py", "-k", "sglang", "-q",
                         "-x", "--timeout", "120"], cwd=ROOT, env={
        **env, "TANDEM_SGLANG_URL": url, "TANDEM_SGLANG_MODEL_PATH": str(path)}).returncode
    say(f"engine conformance tests against SGLang: exit {rc} in {time.perf_counter() - t:.1f}s")
    return rc == 0


def main() -> int:
    args = parse_args()
    warnings.filterwarnings("ignore")
    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print("gpu_check: no CUDA device visible (use --allow-cpu for a CPU rehearsal)", file=sys.stderr)
        return 2
    from tandem.engine.sglang_launch import sglang_python

    work = Path(tempfile.mkdtemp(prefix="tandem_gpu_check_"))
    cfg = check_config(work, args.steps, cuda, cuda and sglang_available(sglang_python()), args.moe)
    base_dir = resolve_model_path(cfg)
    say(f"torch {torch.__version__}, cuda={cuda}"
        + (f" ({torch.cuda.get_device_name(0)})" if cuda else "") + f", tiny model at {base_dir}")
    trainer, path = train_and_publish(cfg, args.steps, base_dir, cuda)
    proc, url, env, use_sglang = start_engine(cfg, work, base_dir, cuda)
    try:
        reload_engine(url, proc, path, args.steps)
        ok = logprob_agreement(trainer, url, args.steps, base_dir, cuda, args.max_mean_diff)
        if args.moe:
            ok = routing_agreement(trainer, url) and ok
        if args.conformance and use_sglang:
            ok = sglang_conformance(url, env, path) and ok
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        trainer.close()
    say(f"{'PASS' if ok else 'FAIL'} (engine log: {work / 'engine.log'}); total {time.perf_counter() - T0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
