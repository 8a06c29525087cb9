"""Embedded engine throughput over HTTP vs. an offline batched `model.generate` on the same model.

    python bench/engine_throughput.py [--requests 64] [--new-tokens 64] [--rounds 3] [--threads 1]

Starts `python -m tandem.engine` (embedded backend, tiny model unless --model) as a real
subprocess on a free loopback port, fires N concurrent /generate requests (ignore_eos, so every
request decodes exactly --new-tokens tokens) and times until the last response arrives; then runs
HF `generate` on the same N prompts in one left-padded batch in this process, with the same
torch thread count. Prints tok/s for both and their ratio (median of --rounds, after a warm-up;
the two are timed alternately so that load from other processes hits both alike), and the ratio
of tokens per CPU-second (engine server process vs. the offline run), which other load on a shared
box does not skew.
The two never run at the same time, so they do not share the CPU with each other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tandem.ports import free_port

from _common import proc_stat

ROOT = Path(__file__).resolve().parents[1]


def proc_cpu_s(pid: int) -> float:
    """user + system CPU seconds of a process (all its threads), from /proc."""
    return proc_stat(pid)[1]


def prompts(n: int) -> list[str]:
    return [f"Question {i}: what is {i} + {i}?" for i in range(n)]


async def http_round(url: str, texts: list[str], new_tokens: int) -> tuple[float, int]:
    import aiohttp

    body = [{"text": t, "sampling_params": {"max_new_tokens": new_tokens, "ignore_eos": True, "temperature": 1.0},
             "return_logprob": True} for t in texts]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def one(b: dict) -> int:
            async with s.post(url + "/generate", json=b) as r:
                r.raise_for_status()
                return (await r.json())["meta_info"]["completion_tokens"]

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(b) for b in body))
        return time.perf_counter() - t0, sum(counts)


def offline_round(model, tok, texts: list[str], new_tokens: int) -> tuple[float, int]:
    import torch

    ids = [tok.encode(t) for t in texts]
    width = max(map(len, ids))
    x = torch.full((len(ids), width), tok.pad_token_id, dtype=torch.long)
    a = torch.zeros((len(ids), width), dtype=torch.long)
    for i, s in enumerate(ids):
        x[i, width - len(s):] = torch.tensor(s)
        a[i, width - len(s):] = 1
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=x, attention_mask=a, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=tok.pad_token_id)
    dt = time.perf_counter() - t0
    return dt, int((out.shape[1] - width) * out.shape[0])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the engine and the offline run")
    ap.add_argument("--model", default="tiny", help="model.path (default: the locally built tiny Qwen3)")
    ap.add_argument("--device", default="cpu")
    return ap.parse_args()


def launch_engine(cfg, conf: Path, threads: int) -> tuple[subprocess.Popen, str]:
    """`python -m tandem.engine` with this run config, on a free loopback port."""
    conf.write_text(cfg.model_dump_json())
    port = free_port()
    env = dict(os.environ, TANDEM_TORCH_THREADS=str(threads))
    proc = subprocess.Popen([sys.executable, "-m", "tandem.engine", "--run-config", str(conf), "--port", str(port),
                             "--name", "bench0", "--log-level", "warning"], env=env, cwd=ROOT)
    return proc, f"http://127.0.0.1:{port}"


def wait_healthy(proc: subprocess.Popen, url: str) -> None:
    import httpx

    deadline = time.time() + 120
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit("engine did not come up")
        time.sleep(0.2)


def stop_engine(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def alternate_rounds(proc: subprocess.Popen, url: str, model, tok, texts: list[str],
                     args: argparse.Namespace) -> dict[str, list[float]]:
    """tok/s and tok per CPU-second of both sides, round by round after one warm-up round each."""
    asyncio.run(http_round(url, texts[:8], 8))  # warm-up
    offline_round(model, tok, texts[:8], 8)
    # Alternate the two so that load from other processes on a shared box hits both alike;
    # the engine idles while the offline batch runs and vice versa.
    http, off, http_cpu, off_cpu = [], [], [], []
    for _ in range(args.rounds):
        c0 = proc_cpu_s(proc.pid)
        dt, n = asyncio.run(http_round(url, texts, args.new_tokens))
        http.append(n / dt)
        http_cpu.append(n / max(proc_cpu_s(proc.pid) - c0, 1e-9))
        c0 = time.process_time()
        dt, n = offline_round(model, tok, texts, args.new_tokens)
        off.append(n / dt)
        off_cpu.append(n / max(time.process_time() - c0, 1e-9))
    return {"http": http, "off": off, "http_cpu": http_cpu, "off_cpu": off_cpu}


def report(args: argparse.Namespace, rounds: dict[str, list[float]], info: dict) -> None:
    http, off, http_cpu, off_cpu = rounds["http"], rounds["off"], rounds["http_cpu"], rounds["off_cpu"]
    batch_seen = info["internal_states"][0]["load"]["max_running_batch_seen"]
    stats = info.get("scheduler_stats")
    h, o = statistics.median(http), statistics.median(off)
    paired = statistics.median(a / b for a, b in zip(http, off))
    cpu_ratio = statistics.median(http_cpu) / statistics.median(off_cpu)
    result = {"requests": args.requests, "new_tokens": args.new_tokens, "threads": args.threads,
              "engine_http_tok_s": round(h, 1), "offline_generate_tok_s": round(o, 1), "ratio": round(h / o, 3),
              "paired_ratio_median": round(paired, 3), "cpu_time_ratio": round(cpu_ratio, 3),
              "engine_tok_per_cpu_s": round(statistics.median(http_cpu), 1),
              "offline_tok_per_cpu_s": round(statistics.median(off_cpu), 1),
              "engine_rounds": [round(v, 1) for v in http], "offline_rounds": [round(v, 1) for v in off],
              "max_running_batch_seen": batch_seen, "engine_scheduler_stats": stats}
    print(f"engine over HTTP : {h:9.1f} tok/s  ({args.requests} concurrent /generate x {args.new_tokens} tokens)")
    print(f"offline generate : {o:9.1f} tok/s  (one batch of {args.requests})")
    print(f"ratio            : {h / o:9.3f}   (median of per-round ratios {paired:.3f})")
    print(f"CPU-time ratio   : {cpu_ratio:9.3f}   (tokens per CPU-second of the engine process vs. the offline run;"
          " insensitive to other load on a shared box)")
    print(json.dumps(result))


def main() -> None:
    args = parse_args()

    import httpx
    import torch

    from tandem.config import TandemConfig
    from tandem.model_source import load_causal_lm, load_tokenizer, resolve_model_path

    torch.set_num_threads(args.threads)
    cfg = TandemConfig()
    cfg.model.path = args.model
    cfg.engine.embedded.device = args.device
    cfg.engine.max_running_requests = max(args.requests, 1)
    cfg.run.cache_dir = str(ROOT / ".cache" / "tandem")
    model_path = resolve_model_path(cfg)
    texts = prompts(args.requests)

    model = load_causal_lm(model_path, device=args.device).eval()
    tok = load_tokenizer(model_path)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = launch_engine(cfg, Path(tmp) / "config.json", args.threads)
        try:
            wait_healthy(proc, url)
            rounds = alternate_rounds(proc, url, model, tok, texts, args)
            info = httpx.get(url + "/get_server_info").json()
        finally:
            stop_engine(proc)
    report(args, rounds, info)


if __name__ == "__main__":
    main()
