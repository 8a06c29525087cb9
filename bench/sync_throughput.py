"""Weight-sync throughput against the raw disk: publish S GB + every engine reloads it.

    python bench/sync_throughput.py                    # sizes 0.25 .. min(4 GB, RAM/4), 3 engines
    python bench/sync_throughput.py --sizes 0.5 1 2 --engines 2
    python bench/sync_throughput.py --shm ''                # the disk only, no /dev/shm rows

For each size S the same run measures, on the same filesystem (the run directory's):

* raw disk: write S GB sequentially + fsync (write bandwidth), evict the file from the page
  cache (posix_fadvise DONTNEED) and read it back (cold read bandwidth);
* tandem's path: `tandem.weights.publish_weights` of an S GB bf16 state dict (safetensors
  shards, fsync, atomic rename: what the trainer does), then `tandem.weights.reload_engines`
  on N real sim engine processes (`/update_weights_from_disk`, each reading every byte), cold
  (files evicted from the page cache first) and warm (right after, from the page cache, which
  is what happens on one node where the trainer just wrote them).

The engines run a copy of the engine profile with `weights.reload_s = 0`, so the reload time is
only real I/O, not the modelled GPU copy.

Throughput = S / (publish time + reload time); raw = S / (raw write time + raw read time), i.e.
the same bytes written once and read once at the disk's sequential speed. The ratio says how
close tandem's sync gets to the disk (target >= 0.8). The same sizes are measured again with
the weights directory in /dev/shm (memory-backed; sync.url can point there), where raw is
tmpfs write + read, i.e. memory bandwidth. Results: bench/results/sync_throughput.md
and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHUNK = 64 << 20


def mem_available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024 / 1e9
    return 4.0


def evict(path: Path) -> None:
    """Drop a file's pages from the page cache so the next read comes from the disk."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def raw_disk(directory: Path, size_gb: float) -> tuple[float, float]:
    """(write+fsync seconds, cold read seconds) for size_gb written sequentially in 64 MiB chunks."""
    block = os.urandom(CHUNK)
    total = int(size_gb * 1e9)
    path = directory / "raw_disk_probe.bin"
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        left = total
        while left > 0:
            n = min(left, CHUNK)
            f.write(block[:n])
            left -= n
        os.fsync(f.fileno())
    write_s = time.perf_counter() - t0
    evict(path)
    buf = bytearray(16 << 20)
    view = memoryview(buf)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(view):
            pass
    read_s = time.perf_counter() - t0
    path.unlink()
    return write_s, read_s


def sim_profile_without_reload(src: Path, dst: Path) -> Path:
    tree = tomllib.loads(src.read_text())
    tree.setdefault("weights", {})["reload_s"] = 0.0

    def dump(table: dict, prefix: str = "") -> list[str]:
        lines, subs = [], []
        for k, v in table.items():
            if isinstance(v, dict):
                subs.append((k, v))
            else:
                lines.append(f"{k} = {json.dumps(v)}")
        for k, v in subs:
            lines += ["", f"[{prefix}{k}]"] + dump(v, f"{prefix}{k}.")
        return lines

    dst.write_text("\n".join(dump(tree)) + "\n")
    return dst


def measure_size(urls: list[str], run_dir: Path, model_path: Path, v: int, size: float, engines: int) -> dict:
    """Raw disk, then publish + cold and warm reload of one S GB version; prints and returns its row."""
    import torch

    from tandem.lab.sim_trainer import make_weights
    from tandem.weights import publish_weights, reload_engines, version_dir

    raw_w, raw_r = raw_disk(run_dir, size)
    weights = make_weights(size, torch.bfloat16)
    t0 = time.perf_counter()
    path = publish_weights(weights, model_path, run_dir, v, keep_last=1)
    publish_s = time.perf_counter() - t0
    del weights
    nbytes = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    evict(path)
    cold = asyncio.run(reload_engines(urls, path, v, policy="drain", timeout_s=600)).seconds
    warm = asyncio.run(reload_engines(urls, path, v, policy="drain", timeout_s=600)).seconds
    gb = nbytes / 1e9
    row = {
        "size_gb": gb, "engines": engines, "dir": str(run_dir),
        "raw_write_gbps": gb / raw_w, "raw_read_gbps": gb / raw_r, "raw_gbps": gb / (raw_w + raw_r),
        "publish_s": publish_s, "reload_cold_s": cold, "reload_warm_s": warm,
        "publish_gbps": gb / publish_s, "sync_cold_gbps": gb / (publish_s + cold),
        "sync_warm_gbps": gb / (publish_s + warm),
    }
    row["ratio_cold"] = row["sync_cold_gbps"] / row["raw_gbps"]
    row["ratio_warm"] = row["sync_warm_gbps"] / row["raw_gbps"]
    print(f"{gb:5.2f} GB: raw write {row['raw_write_gbps']:.2f} GB/s, read {row['raw_read_gbps']:.2f} GB/s | "
          f"publish {publish_s:.2f}s, reload x{engines} cold {cold:.2f}s / warm {warm:.2f}s | "
          f"sync {row['sync_cold_gbps']:.2f} (cold) / {row['sync_warm_gbps']:.2f} (warm) GB/s vs raw "
          f"{row['raw_gbps']:.2f} GB/s = {row['ratio_cold']:.2f} / {row['ratio_warm']:.2f}", flush=True)
    shutil.rmtree(version_dir(run_dir, v), ignore_errors=True)
    return row


def write_results(rows: list[dict], engines: int, run_dir: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    head = ("| size GB | raw write GB/s | raw read GB/s (cold) | raw write+read GB/s | publish s | "
            f"reload x{engines} cold s | reload warm s | sync GB/s cold | sync GB/s warm | ratio cold | ratio warm |")
    head = "| weights dir " + head
    lines = [f"# Weight-sync throughput vs raw disk ({engines} sim engines; /dev/shm rows: memory-backed, "
             f"their raw figures are tmpfs write/read, i.e. memory bandwidth)", "", head,
             "|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|"]
    for r in rows:
        lines.append(f"| {r['dir']} | {r['size_gb']:.2f} | {r['raw_write_gbps']:.2f} | {r['raw_read_gbps']:.2f} | {r['raw_gbps']:.2f} | "
                     f"{r['publish_s']:.2f} | {r['reload_cold_s']:.2f} | {r['reload_warm_s']:.2f} | "
                     f"{r['sync_cold_gbps']:.2f} | {r['sync_warm_gbps']:.2f} | {r['ratio_cold']:.2f} | {r['ratio_warm']:.2f} |")
    (out / "sync_throughput.md").write_text("\n".join(lines) + "\n")
    (out / "sync_throughput.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines[2:]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=None, help="GB (10^9 bytes) per version")
    ap.add_argument("--engines", type=int, default=3)
    ap.add_argument("--dir", default=str(REPO / "runs/bench_sync"), help="run directory (the disk under test)")
    ap.add_argument("--out", default=str(REPO / "bench/results"))
    ap.add_argument("--shm", default="/dev/shm/tandem_bench_sync",
                    help="also measure a memory-backed weights directory here (sync.url = a /dev/shm path); "
                         "'' skips it")
    args = ap.parse_args(argv)

    from tandem.config import TandemConfig
    from tandem.model_source import resolve_model_path
    from tandem.orchestrator.cluster import start_engines
    from tandem.supervisor import Supervisor
    from tandem.placement import plan_placement

    cap = min(4.0, mem_available_gb() / 4)
    sizes = args.sizes or [s for s in (0.25, 0.5, 1.0, 2.0, 4.0) if s <= cap + 1e-9]
    run_dir = Path(args.dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    profile = sim_profile_without_reload(REPO / "profiles/engine/qwen3_14b_h100.toml", run_dir / "no_reload.toml")
    cfg = TandemConfig.model_validate({
        "run": {"run_dir": str(run_dir), "cache_dir": str(REPO / ".cache/tandem")},
        "engine": {"backend": "sim", "count": args.engines, "sim": {"profile": str(profile)}},
        "model": {"dtype": "bfloat16"},
    })
    (run_dir / "config.json").write_text(cfg.model_dump_json())
    model_path = resolve_model_path(cfg)
    sup = Supervisor(run_dir, REPO)
    try:
        engines = start_engines(cfg, sup, plan_placement(cfg, 0), run_dir, model_path)
        urls = list(engines.values())
        print(f"{args.engines} sim engines up; sizes {sizes} GB on {run_dir} "
              f"(MemAvailable {mem_available_gb():.1f} GB)", flush=True)
        dirs = [run_dir] + ([Path(args.shm)] if args.shm else [])
        rows, v = [], 0
        for size in sizes:
            for where in dirs:
                where.mkdir(parents=True, exist_ok=True)
                if shutil.disk_usage(where).free < 3 * size * 1e9:  # the probe, the version, headroom
                    print(f"{where}: too little room for {size} GB; skipped", flush=True)
                    continue
                v += 1
                rows.append(measure_size(urls, where, model_path, v, size, args.engines))
    finally:
        sup.shutdown()
        shutil.rmtree(run_dir / "weights", ignore_errors=True)
        if args.shm:
            shutil.rmtree(args.shm, ignore_errors=True)
    write_results(rows, args.engines, run_dir, Path(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
