"""Per-version weight sync through an object store against the local-disk path, in one run.

    python bench/sync_transport.py                     # sizes 0.1 0.25 0.5 GB, 2 rounds, 2 engines, deltas of 1.5%
    python bench/sync_transport.py --sizes 0.25 1 --rounds 3

Both paths start from the trainer's state dict and end when every engine serves the version:

* local disk (sync.url empty, one node): `publish_weights` (safetensors, fsync, one rename),
  then the orchestrator's `reload_engines` on N real sim engines (each reads every byte).
* object store (sync.url = s3://..., multi-node): the trainer's `WeightPublisher` (the same
  publish into a local staging directory, then the upload to S3, manifest last), then one
  `WeightAgent` per engine (list, download to its own local directory, verify every xxh3
  checksum, /update_weights_from_disk). The store is a real S3 API on 127.0.0.1 (moto's
  server, `_common.start_s3`), so this measures the protocol and the bytes crossing it, not a real network.

* delta through the store (sync.encoding = "delta"): each round's version moves
  `--changed-fraction` of the elements (bench/delta_sync.py measures the fraction on a real
  bf16 run); the trainer publishes only those, each agent applies them to its previous local
  version, verifies every tensor's checksum and reloads.

The paths rotate order from round to round; every figure is a ratio against a path measured
in the same round (store vs disk, delta vs full through the store), reported as the mean and
the spread over rounds. On this
machine the agents share the trainer's cores, where on a real cluster each has its own host.
Results: bench/results/sync_transport.md and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import time
from pathlib import Path

from _common import start_s3  # bench/ is on the path
from sync_throughput import sim_profile_without_reload

REPO = Path(__file__).resolve().parents[1]


async def through_store(publisher, agents, weights: dict, version: int) -> dict:
    t0 = time.perf_counter()
    out = await asyncio.to_thread(publisher.publish, weights, version)
    t_published = time.perf_counter()
    done = await asyncio.gather(*(agent.poll_once() for agent in agents))
    assert all(d == f"loaded version {version}" for d in done), done
    end = time.perf_counter()
    return {"total_s": end - t0, "publish_s": t_published - t0 - out["upload_time"], "upload_s": out["upload_time"],
            "fetch_verify_reload_s": end - t_published, "bytes": out["publish_bytes"], "staged": out["weights_path"],
            "changed_fraction": out.get("changed_fraction", 1.0)}


async def raw_transport(store, version_dir: Path, copies: int, scratch: Path) -> dict:
    """The floor under the store path: the same files put once and fetched `copies` times in
    parallel with plain fsspec calls (no manifest, no checksums, no engine)."""
    files = [f for f in version_dir.iterdir() if f.is_file()]
    t0 = time.perf_counter()
    for f in files:
        await asyncio.to_thread(store.fs.put_file, str(f), f"{store.root}/raw/{f.name}")
    t_put = time.perf_counter()

    def fetch(i: int) -> None:
        (scratch / f"raw{i}").mkdir(parents=True, exist_ok=True)
        for f in files:
            store.fs.get_file(f"{store.root}/raw/{f.name}", str(scratch / f"raw{i}" / f.name))

    await asyncio.gather(*(asyncio.to_thread(fetch, i) for i in range(copies)))
    end = time.perf_counter()
    store.fs.rm(f"{store.root}/raw", recursive=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return {"put_s": t_put - t0, "get_s": end - t_put}


async def through_disk(publisher, urls: list[str], weights: dict, version: int) -> dict:
    from tandem.weights import reload_engines

    t0 = time.perf_counter()
    out = await asyncio.to_thread(publisher.publish, weights, version)
    t_published = time.perf_counter()
    await reload_engines(urls, out["weights_path"], version, policy="drain", timeout_s=600)
    end = time.perf_counter()
    return {"total_s": end - t0, "publish_s": t_published - t0, "reload_s": end - t_published}


def step_like(weights: dict, fraction: float, seed: int) -> dict:
    """The next version: `fraction` of every tensor's elements moved, as an RL step moves bf16
    weights (bench/delta_sync.py measures the fraction on a real run)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in weights.items():
        t = t.clone()
        flat = t.view(-1)
        idx = torch.randint(0, flat.numel(), (max(1, int(flat.numel() * fraction)),), generator=g)
        flat[idx] += 0.01
        out[name] = t
    return out


async def measure(urls, pubs: dict, agents: dict, sizes, rounds, scratch: Path, fraction: float) -> list[dict]:
    import torch

    from tandem.lab.sim_trainer import make_weights

    rows, version, delta_version = [], 0, 10_000  # the delta path numbers its own chain
    paths = ("disk", "store", "delta") if "delta" in pubs else ("disk", "store")
    for size in sizes:
        weights = make_weights(size, torch.bfloat16)
        if "delta" in pubs:  # the chain's anchor, untimed
            delta_version += 1
            await through_store(pubs["delta"], agents["delta"], weights, delta_version)
        for r in range(rounds):
            weights = step_like(weights, fraction, seed=r) if "delta" in pubs else weights
            order = paths[r % len(paths):] + paths[:r % len(paths)]
            got = {}
            for path in order:
                if path == "delta":
                    delta_version += 1
                    got[path] = await through_store(pubs["delta"], agents["delta"], weights, delta_version)
                    continue
                version += 1
                got[path] = (await through_disk(pubs["disk"], urls, weights, version) if path == "disk"
                             else await through_store(pubs["store"], agents["store"], weights, version))
            raw = await raw_transport(pubs["store"].store, Path(got["store"]["staged"]), len(agents["store"]), scratch)
            floor = got["disk"]["total_s"] + raw["put_s"] + raw["get_s"]
            row = {"size_gb": size, "round": r, "order": list(order), **got,
                   "raw": raw, "ratio": got["store"]["total_s"] / got["disk"]["total_s"],
                   "ratio_to_floor": got["store"]["total_s"] / floor}
            if "delta" in got:
                row["delta_to_full"] = got["delta"]["total_s"] / got["store"]["total_s"]
                print(f"{size:5.2f} GB round {r}: delta {got['delta']['total_s']:.2f}s ({got['delta']['bytes'] / 1e6:.1f} MB"
                      f", changed {got['delta']['changed_fraction'] * 100:.2f}%) vs full through the store "
                      f"{got['store']['total_s']:.2f}s ({got['store']['bytes'] / 1e6:.1f} MB): {row['delta_to_full']:.2f}x",
                      flush=True)
            print(f"{size:5.2f} GB round {r}: disk {got['disk']['total_s']:.2f}s | store {got['store']['total_s']:.2f}s "
                  f"(publish {got['store']['publish_s']:.2f} + upload {got['store']['upload_s']:.2f} + fetch/verify/"
                  f"reload {got['store']['fetch_verify_reload_s']:.2f}) | raw put {raw['put_s']:.2f} + get x{len(agents)} "
                  f"{raw['get_s']:.2f} | store/disk {row['ratio']:.2f}x, store/(disk+raw) {row['ratio_to_floor']:.2f}x",
                  flush=True)
            rows.append(row)
        del weights
    return rows


def summarize(rows: list[dict], engines: int) -> list[str]:
    lines = [f"# Weight sync per version: S3 API (moto on 127.0.0.1) vs local disk, {engines} sim engines", "",
             "| size GB | disk s (mean) | store s (mean) | store: publish / upload / fetch+verify+reload s | "
             "raw put / get s | store / disk (mean) | spread (min-max) | store / (disk + raw put + get) | "
             "delta s (mean) | delta MB | delta / full through the store (mean, min-max) | rounds |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for size in sorted({r["size_gb"] for r in rows}):
        mine = [r for r in rows if r["size_gb"] == size]
        ratios = [r["ratio"] for r in mine]

        def mean(key: str, part: str = "store") -> float:
            return statistics.fmean(r[part][key] for r in mine)

        floors = [r["ratio_to_floor"] for r in mine]
        lines.append(f"| {size:.2f} | {mean('total_s', 'disk'):.2f} | {mean('total_s'):.2f} | "
                     f"{mean('publish_s'):.2f} / {mean('upload_s'):.2f} / {mean('fetch_verify_reload_s'):.2f} | "
                     f"{mean('put_s', 'raw'):.2f} / {mean('get_s', 'raw'):.2f} | "
                     f"{statistics.fmean(ratios):.2f}x | {min(ratios):.2f}-{max(ratios):.2f}x | "
                     f"{statistics.fmean(floors):.2f}x ({min(floors):.2f}-{max(floors):.2f}) | "
                     + (f"{mean('total_s', 'delta'):.2f} | {mean('bytes', 'delta') / 1e6:.1f} | "
                        f"{statistics.fmean(r['delta_to_full'] for r in mine):.2f}x "
                        f"({min(r['delta_to_full'] for r in mine):.2f}-{max(r['delta_to_full'] for r in mine):.2f}) | "
                        if "delta" in mine[0] else "- | - | - | ") + f"{len(mine)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.1, 0.25, 0.5], help="GB (10^9 bytes) per version")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per size (each measures both paths)")
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--changed-fraction", type=float, default=0.015,
                    help="also time delta versions (sync.encoding = 'delta') moving this fraction of the elements; "
                         "0 skips them")
    ap.add_argument("--dir", default=str(REPO / "runs/bench_sync_transport"))
    ap.add_argument("--out", default=str(REPO / "bench/results"))
    args = ap.parse_args(argv)

    from tandem.config import TandemConfig
    from tandem.model_source import resolve_model_path
    from tandem.orchestrator.cluster import start_engines
    from tandem.supervisor import Supervisor
    from tandem.placement import plan_placement

    run_dir = Path(args.dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    profile = sim_profile_without_reload(REPO / "profiles/engine/qwen3_14b_h100.toml", run_dir / "no_reload.toml")
    base = {"run": {"run_dir": str(run_dir), "cache_dir": str(REPO / ".cache/tandem")}, "model": {"dtype": "bfloat16"},
            "sync": {"keep_last": 2}}
    cfg = TandemConfig.model_validate({**base, "engine": {"backend": "sim", "count": args.engines,
                                                          "sim": {"profile": str(profile)}}})
    (run_dir / "config.json").write_text(cfg.model_dump_json())
    model_path = resolve_model_path(cfg)
    s3 = start_s3(run_dir / "moto.log")
    sup = Supervisor(run_dir, REPO)
    try:
        urls = list(start_engines(cfg, sup, plan_placement(cfg, 0), run_dir, model_path).values())
        rows = asyncio.run(run(cfg, base, urls, s3, model_path, run_dir, args))
    finally:
        sup.shutdown()
        s3.stop()
        shutil.rmtree(run_dir / "weights", ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = summarize(rows, args.engines)
    (out / "sync_transport.md").write_text("\n".join(lines) + "\n")
    (out / "sync_transport.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))
    return 0


async def run(cfg, base: dict, urls: list[str], s3, model_path: str, run_dir: Path, args) -> list[dict]:
    import httpx

    from tandem.config import TandemConfig
    from tandem.weights import WeightStore
    from tandem.weights.agent import WeightAgent
    from tandem.weights.transport import WeightPublisher

    bucket = s3.make_bucket("bench-sync")
    pubs, agents = {"disk": WeightPublisher(cfg, model_path)}, {}
    async with httpx.AsyncClient() as http:
        for path, sync in (("store", {}), ("delta", {"encoding": "delta", "anchor_interval": 1000})):
            if path == "delta" and not args.changed_fraction:
                continue
            url = f"{bucket}/{path}"
            store_cfg = TandemConfig.model_validate({**base, "engine": {"backend": "external", "urls": urls},
                                                     "run": {**base["run"], "run_dir": str(run_dir / path)},
                                                     "sync": {**base["sync"], **sync, "url": url,
                                                              "storage_options": s3.storage_options}})
            pubs[path] = WeightPublisher(store_cfg, model_path)
            agents[path] = [WeightAgent(WeightStore(url, s3.storage_options), run_dir / f"{path}-agent{i}", u, http,
                                        log=lambda line: None) for i, u in enumerate(urls)]
        return await measure(urls, pubs, agents, args.sizes, args.rounds, run_dir / "raw", args.changed_fraction)


if __name__ == "__main__":
    raise SystemExit(main())
