"""Rehearse a node's config on this machine: `python train.py --config node.toml --rehearse`.

The node's TOML runs through the real launcher and loop for a few steps, with only what cannot
run here swapped, each swap reported:

- the model -> a tiny random model of the same family, with the real model's layer types, GQA
  ratio, tied or untied embeddings and q/k norms, and head counts that shard at the configured
  TP, so HF -> Megatron conversion, TP sharding, export and engine reload all run for real;
- SGLang engines -> embedded engines (same count, router policy, sampling, partial-rollout policy);
- GPUs -> CPU ranks: the Megatron trainer runs trainer.gpus gloo ranks at the configured TP, PP
  and DP (tandem/placement.py), in fp32;
- sizes -> a rehearsal's: a few steps, small groups, short turns and contexts.

After the run, every sync is checked: each sample's engine logprobs are recomputed here with plain
transformers from the checkpoint the trainer exported for the sample's weight version (the weights
the engine should be serving), and the largest difference is reported against REHEARSAL_TOL. In
sync mode the trainer's own forward is compared as well (metrics' logprob_mismatch, where every
sample is of the trainer's current version).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tandem import registry
from tandem.config import ConfigError, EmbeddedEngineSettings, TandemConfig, build_config, config_from_json
from tandem.lab.plan import memory as mem
from tandem.lab.plan import report as plan_report
from tandem.lab.plan.planner import plan_node
from tandem.lab.plan.shape import PlanError, hf_config, load_shape
from tandem.model_source import resolve_model_path
from tandem.paths import PROJECT_ROOT

REHEARSAL_STEPS = 3
NOT_REHEARSABLE = "not rehearsable on CPU"
REHEARSAL_TOL = 1e-4
PLAN_VERDICT_FAILED = "verdict: DOES NOT FIT"
"""The last line a rehearsal prints when the node's plan does not fit (the exit status is then 1)."""
"""Largest |engine - trainer| logprob a sync may leave (fp32 on CPU: numerics only)."""
FAMILIES = ("qwen3",)
"""Model families with a tiny stand-in (tandem's tiny model is a Qwen3)."""
# The rehearsal's sizes: enough for every path to run, small enough for a 2-core CPU.
SIZES = {"rollout.prompts_per_step": 2, "rollout.samples_per_prompt": 2, "rollout.sampling.max_new_tokens": 16,
         "environment.max_turns": 3, "environment.max_context_tokens": 4096, "trainer.micro_batch_size": 2,
         # Kept on when the node has them (0 stays 0), sized so that a rehearsal's short samples still
         # make several chunks and several packed micro-batches.
         "trainer.logprob_chunk_tokens": 64, "trainer.max_tokens_per_micro_batch": 1024}


@dataclass
class Swap:
    key: str
    node: object
    here: object
    why: str


@dataclass
class Rehearsal:
    node: TandemConfig
    config: TandemConfig
    swaps: list[Swap] = field(default_factory=list)
    real: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    plan: str = ""
    """The node's plan (tandem.lab.plan's report), or why there is none."""
    plan_fits: bool | None = None
    """Whether the plan fits the node's GPUs; None: no plan could be made."""


HF_NAMES = {"num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim",
            "hidden_size": "hidden_size", "intermediate_size": "intermediate_size", "num_layers": "num_hidden_layers",
            "tie_word_embeddings": "tie_word_embeddings", "max_position_embeddings": "max_position_embeddings"}
"""model.tiny key -> the real model's config.json key, shown "on the node" (the node never uses model.tiny)."""


def _tiny_stand_in(node: TandemConfig) -> tuple[dict, dict]:
    """(model.tiny settings of the real model's family, sharding at the configured TP and PP; the real
    model's config.json)."""
    path = node.model.path
    try:
        hf = hf_config(node.model)
    except PlanError as err:
        raise ConfigError(f"model.path {path!r}: {err}") from None
    family = str(hf.get("model_type", ""))
    if family not in FAMILIES:
        raise ConfigError(f"model.path {path!r} is a {family!r} model; a rehearsal has a tiny stand-in for "
                          f"{', '.join(FAMILIES)} only")
    heads, kv = int(hf["num_attention_heads"]), int(hf.get("num_key_value_heads") or hf["num_attention_heads"])
    mp = node.trainer.megatron if node.trainer.backend == "megatron" else None  # a torch trainer has no such table
    tp, pp = (mp.tensor_parallel, mp.pipeline_parallel) if mp else (1, 1)
    if kv % tp or heads % kv:
        raise ConfigError(f"model.path {path!r}: {heads} heads and {kv} KV heads do not shard over "
                          f"trainer.megatron.tensor_parallel = {tp}")
    tiny_kv = tp  # one KV head per TP rank; the query heads per KV head (the GQA ratio) as the real model's
    return {"num_heads": tiny_kv * (heads // kv), "num_kv_heads": tiny_kv, "head_dim": 16, "hidden_size": 64,
            "intermediate_size": 32 * tp, "num_layers": 2 * pp,
            "tie_word_embeddings": bool(hf.get("tie_word_embeddings", False)),
            "max_position_embeddings": 4096, "tool_tokens": node.model.tiny.tool_tokens}, hf


def _data_path(node: TandemConfig) -> str | None:
    """The node's dataset when it exists here, else the project's own for its environment."""
    configured = Path(node.data.path)
    if configured.exists() or (PROJECT_ROOT / configured).exists():
        return None
    entry = registry.ENVIRONMENTS.get(node.environment.name)
    bundled = entry.rehearsal_data if entry is not None else None
    if bundled is None:
        raise ConfigError(f"data.path {node.data.path!r} does not exist here, and the rehearsal "
                          f"has no bundled data for environment.name {node.environment.name!r}: "
                          f"rehearse with --data.path pointing at a few rows of it")
    return str(PROJECT_ROOT / bundled)


def _get(tree: dict, dotted: str):
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def rehearsal_config(node: TandemConfig, steps: int = REHEARSAL_STEPS) -> Rehearsal:
    """The config that runs here, and every swap from the node's."""
    tree = node.model_dump()
    swaps: list[Swap] = []

    def swap(key: str, here: object, why: str, on_node: object = None) -> None:
        *path, name = key.split(".")
        parent = _get(tree, ".".join(path))
        before = parent[name] if on_node is None else on_node
        if before != here:
            swaps.append(Swap(key, before, here, why))
        parent[name] = here

    # a config of the tiny model (configs/coding_agent.toml) is rehearsed with it: no hub lookup of 'tiny'
    tiny, hf = (node.model.tiny.model_dump(), {}) if node.model.path == "tiny" else _tiny_stand_in(node)
    swap("model.path", "tiny", f"a random {tiny['num_layers']}-layer model of the same family (no download)")
    for name, value in tiny.items():
        swap(f"model.tiny.{name}", value, "the real model's layer types, GQA ratio and embedding tying, "
                                          "head counts that shard at the configured TP", hf.get(HF_NAMES.get(name, "")))
    if node.trainer.backend == "megatron":  # what the CPU shim cannot run (tandem/trainer/megatron_dist.py)
        swap("trainer.megatron.recompute", False, f"{NOT_REHEARSABLE}: Megatron's activation checkpointing "
                                                  "saves CUDA RNG states")
        swap("trainer.megatron.pipeline_parallel", 1, f"{NOT_REHEARSABLE}: Megatron's pipeline schedule "
                                                      "allocates on CUDA; the ranks run TP x DP")
    # A random model earns no reward, so advantages are 0 and the policy gradient with them: an entropy
    # term moves the weights anyway, so that every sync ships new weights for the agreement check.
    swap("trainer.lr", max(node.trainer.lr, 1e-3), "every sync must ship changed weights (a random model earns "
                                                   "no reward, so only the entropy term moves them)")
    swap("trainer.loss.entropy_coef", max(node.trainer.loss.entropy_coef, 0.01), "see trainer.lr")
    swap("model.dtype", "float32", "CPU: bf16 numerics stay unverified")
    if node.trainer.backend == "megatron":
        swap("trainer.megatron.bf16", False, "CPU: bf16 numerics stay unverified")
    swap("trainer.device", "cpu" if node.trainer.backend != "sim" else node.trainer.device,
         "trainer.gpus ranks on gloo instead of GPUs")
    if node.engine.backend == "sglang":
        swap("engine.backend", "embedded", "SGLang needs CUDA; the embedded engine speaks its API")
        del tree["engine"]["sglang"]  # the SGLang servers' own settings; the embedded engine has its own
        tree["engine"]["embedded"] = EmbeddedEngineSettings().model_dump()
    if node.engine.backend in ("sglang", "embedded"):
        swap("engine.embedded.device", "cpu", "no GPU here")
    swap("run.steps", min(node.run.steps, steps), "a rehearsal")
    swap("run.run_dir", f"{node.run.run_dir}-rehearsal", "keep the node's run directory untouched")
    swap("run.rehearse", False, "the rehearsal itself runs as an ordinary run")
    swap("sync.keep_last", steps + 1, "every version stays on disk for the agreement check")
    swap("run.keep_rollouts", "all", "the agreement check replays every step's samples")
    swap("logging.tensorboard", False, "a rehearsal")
    for key, value in SIZES.items():
        swap(key, min(_get(tree, key), value), "rehearsal sizes")
    data = _data_path(node)
    if data:
        swap("data.path", data, "the node's dataset is not on this machine; the project's own of its kind")
    rehearsal = Rehearsal(node, build_config(tree), swaps)
    rehearsal.real, rehearsal.unverified = _what_is_real(rehearsal.config), _unverified(node)
    return rehearsal


def _what_is_real(cfg: TandemConfig) -> list[str]:
    real = ["the config tree, its validators and the plug-ins' loading",
            f"sglang-router ({cfg.router.policy} policy) in front of {cfg.engine.count} engine process(es), "
            f"started, health-checked and torn down by the launcher",
            f"the loop in {cfg.run.mode} mode (staleness {cfg.effective_staleness}, partial rollouts: "
            f"{cfg.rollout.staleness.partial_rollout})",
            "weight publish, engine pause / reload / continue at every sync, sample versions"]
    if cfg.trainer.backend == "megatron":
        mp = cfg.trainer.megatron
        real.insert(1, f"the Megatron trainer: {cfg.trainer.gpus} ranks (gloo) at TP {mp.tensor_parallel}, "
                       f"PP {mp.pipeline_parallel}, DP {cfg.trainer.gpus // (mp.tensor_parallel * mp.pipeline_parallel)}, "
                       f"distributed optimizer {'on' if mp.use_distributed_optimizer else 'off'}, recompute "
                       f"{'on' if mp.recompute else 'off'}; HF -> Megatron conversion, TP sharding, the loss, "
                       f"export back to HF")
    if cfg.environment.name:
        real.append(f"the environment {cfg.environment.name} on the agent loop, its tools and reward")
    real += _memory_features(cfg)
    return real


def _memory_features(cfg: TandemConfig) -> list[str]:
    """The trainer's memory features that run here (at rehearsal sizes)."""
    tc = cfg.trainer
    out = []
    if tc.logprob_chunk_tokens:
        out.append(f"the chunked loss head ({tc.logprob_chunk_tokens} positions per chunk, recomputed in the backward)")
    if tc.max_tokens_per_micro_batch:
        out.append(f"packed micro-batches (up to {tc.max_tokens_per_micro_batch} tokens, block-diagonal attention)")
    if tc.backend == "megatron" and tc.megatron.optimizer_cpu_offload:
        out.append(f"megatron-core's HybridDeviceOptimizer ({tc.megatron.optimizer_offload_fraction:.0%} of the "
                   "optimizer offloaded), with the CPU playing the GPU (tandem/trainer/megatron_cpu_shim.py)")
    return out


def _unverified(node: TandemConfig) -> list[str]:
    out = ["CUDA kernels, NCCL collectives and GPU placement",
           "bf16 numerics (the rehearsal trains in fp32)",
           "memory: see the plan (python -m tandem.lab.plan --config ...), at the top",
           "throughput and step times at the node's sizes"] + ([] if node.model.path == "tiny" else
          [f"the real model's weights and tokenizer ({node.model.path}): the stand-in is random, byte-level"])
    if node.engine.backend == "sglang":
        out.append(f"SGLang itself: engine.sglang.args {node.engine.sglang.args} are checked against its argument "
                   f"list, not run")
    mp = node.trainer.megatron if node.trainer.backend == "megatron" else None
    if mp is not None and mp.optimizer_cpu_offload:
        out.append("the optimizer offload's real device-host copies, CUDA streams and pinned memory, and its step time")
    if mp is not None and (mp.precision_aware_optimizer or mp.main_grads_dtype != "float32"):
        out.append("trainer.megatron.precision_aware_optimizer and main_grads_dtype: they change the distributed "
                   "optimizer's bf16 bookkeeping on GPUs; the CPU ranks train in fp32 without it")
    return out


def replayed_logprobs(run_dir: Path, version: int, samples: list[dict]) -> list[list[float]]:
    """Per sample, log p(response token) under weight version `version`, computed with plain
    transformers from the checkpoint the trainer published (version 0: the initial model),
    independently of the trainer's and the engines' code."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = config_from_json(str(Path(run_dir) / "config.json"))
    path = resolve_model_path(cfg) if version == 0 else Path(run_dir) / "weights" / f"step_{version:06d}"
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    temperature = cfg.rollout.sampling.temperature if cfg.rollout.sampling.temperature > 0 else 1.0
    out = []
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([s["prompt_ids"] + s["response_ids"]])
            logp = torch.log_softmax(model(ids).logits[0, :-1].float() / temperature, dim=-1)
            picked = logp.gather(1, ids[0, 1:, None])[:, 0]
            out.append(picked[-len(s["response_ids"]):].tolist())
    return out


def weight_changes(run_dir: Path) -> list[tuple[int, float]]:
    """(version, max |w_v - w_{v-1}|) for every published version: a sync that ships unchanged
    weights would make the agreement check vacuous."""
    from safetensors.torch import load_file

    def weights(path: Path) -> dict:
        return {k: v for f in sorted(path.glob("*.safetensors")) for k, v in load_file(str(f)).items()}

    versions = sorted(int(p.name.split("_")[1]) for p in (run_dir / "weights").glob("step_*") if p.is_dir())
    before = weights(Path(resolve_model_path(config_from_json(str(run_dir / "config.json")))))
    out = []
    for v in versions:
        now = weights(run_dir / "weights" / f"step_{v:06d}")
        out.append((v, max(float((now[k].float() - before[k].float()).abs().max()) for k in now if k in before)))
        before = now
    return out


def _turns(mask: list[int]) -> list[list[int]]:
    """The response positions of each model turn: the runs of mask-1 tokens."""
    runs: list[list[int]] = []
    for i, m in enumerate(mask):
        if m and (not runs or runs[-1][-1] != i - 1):
            runs.append([])
        if m:
            runs[-1].append(i)
    return runs


def _checked_tokens(sample: dict) -> list[tuple[int, int]]:
    """(position, version) of every model token a replay must reproduce: all but those of a turn
    that spanned a weight update (TurnRecord.spanned_update), which no single version generated."""
    versions = sample.get("token_versions") or [sample["weight_version"]] * len(sample["loss_mask"])
    meta = sample.get("metadata") or {}
    if "env" in meta:
        spanned = set(meta["env"].get("spanned_turns", []))
    else:  # a single-turn sample is one turn
        spanned = {0} if meta.get("finish_weight_version", sample["weight_version"]) > sample["weight_version"] else set()
    return [(i, versions[i]) for t, turn in enumerate(_turns(sample["loss_mask"])) if t not in spanned for i in turn]


def agreement(run_dir: Path) -> list[dict]:
    """Per trained step and weight version: the largest |engine - published weights| logprob over
    the samples' model tokens, each replayed at the version that generated it."""
    rows = []
    for path in sorted((Path(run_dir) / "rollouts").glob("step_*.json")):
        samples = json.loads(path.read_text())["samples"]
        checked = [_checked_tokens(s) for s in samples]
        diffs: dict[int, list[float]] = {}
        for version in sorted({v for tokens in checked for _, v in tokens}):
            mine = [(s, [i for i, v in tokens if v == version]) for s, tokens in zip(samples, checked)]
            mine = [(s, at) for s, at in mine if at]
            replayed = replayed_logprobs(run_dir, version, [s for s, _ in mine])
            diffs[version] = [abs(lps[i] - s["rollout_logprobs"][i]) for (s, at), lps in zip(mine, replayed) for i in at]
        spanned = sum(sum(s["loss_mask"]) - len(tokens) for s, tokens in zip(samples, checked))
        for version, d in diffs.items():
            rows.append({"step": int(path.stem.split("_")[1]), "version": version, "tokens": len(d),
                         "spanned_update": spanned, "max_abs_diff": max(d, default=0.0)})
    return rows


def probe_engines(run_dir: Path, prompt_ids: list[int], new_tokens: int = 8) -> list[dict]:
    """After the last sync: every engine samples a probe, replayed at the version it reports serving
    (the syncs no trained sample used, e.g. the last one, are checked too)."""
    import httpx

    temperature = config_from_json(str(Path(run_dir) / "config.json")).rollout.sampling.temperature or 1.0  # as replayed
    rows = []
    for engine in json.loads((Path(run_dir) / "endpoints.json").read_text())["engines"]:
        out = httpx.post(f"{engine['url']}/generate", timeout=120, json={
            "input_ids": prompt_ids, "return_logprob": True,
            "sampling_params": {"max_new_tokens": new_tokens, "temperature": temperature, "ignore_eos": True}}).json()
        meta = out["meta_info"]
        ids = [int(i) for i in out["output_ids"]]
        sample = {"prompt_ids": prompt_ids, "response_ids": ids}
        [replayed] = replayed_logprobs(run_dir, int(meta["weight_version"]), [sample])
        served = [float(t[0]) for t in meta["output_token_logprobs"]]
        rows.append({"step": f"after the run, {engine['name']}", "version": int(meta["weight_version"]),
                     "tokens": len(ids), "spanned_update": 0,
                     "max_abs_diff": max(abs(a - b) for a, b in zip(replayed, served))})
    return rows


def report(rehearsal: Rehearsal, rows: list[dict], checks: list[dict]) -> tuple[str, bool]:
    """The rehearsal's report (markdown) and whether every sync agreed within REHEARSAL_TOL."""
    cfg = rehearsal.config
    lines = [f"# Rehearsal of {rehearsal.node.model.path} ({cfg.run.mode} mode, {len(rows)} steps)", "",
             "## Plan on the node's GPUs", "", "```", rehearsal.plan or "(no plan was made)", "```", ""]
    if rehearsal.plan_fits is False:
        lines += [f"**{PLAN_VERDICT_FAILED}**: this config does not fit the node's GPUs (python -m tandem.lab.plan "
                  "says what would), whatever the rehearsal below shows.", ""]
    lines += ["## Substituted", "", "| key | on the node | here | why |", "|---|---|---|---|"]
    lines += [f"| {s.key} | {s.node} | {s.here} | {s.why} |" for s in rehearsal.swaps]
    lines += ["", "## Ran for real", ""] + [f"- {item}" for item in rehearsal.real]
    lines += ["", "## Unverified", ""] + [f"- {item}" for item in rehearsal.unverified]
    lines += [f"- `{s.key} = {s.node}`: {s.why}" for s in rehearsal.swaps if s.why.startswith(NOT_REHEARSABLE)]
    lines += ["", f"## Logprob agreement after every sync (tolerance {REHEARSAL_TOL:g})", "",
              "Engine logprobs of every model token against the published weights of the version that served it.",
              "A turn that was generating when weights changed finished on the new ones over the old ones' KV "
              "cache (partial_rollout = 'continue'): no single version generated it, so its tokens are not replayed "
              "(counted per step).",
              "", "| step | version served | tokens | tokens of turns spanning an update | max abs diff |",
              "|---|---|---|---|---|"]
    lines += [f"| {c['step']} | {c['version']} | {c['tokens']} | {c['spanned_update']} | {c['max_abs_diff']:.2e} |"
              for c in checks]
    changes = weight_changes(Path(cfg.run.run_dir))
    lines += ["", "Largest weight change each sync shipped (version against the one before): "
              + ", ".join(f"version {v}: {d:.2e}" for v, d in changes)]
    if cfg.effective_staleness == 0:
        lines += ["", "Trainer forward against the engines (metrics' logprob_mismatch, every sample of the "
                      "trainer's current version): " + ", ".join(f"step {r['step']}: {r['logprob_mismatch']:.2e}"
                                                              for r in rows)]
    agreed = bool(checks) and all(c["max_abs_diff"] <= REHEARSAL_TOL for c in checks)
    agreed = agreed and bool(changes) and all(d > 0 for _, d in changes)  # else the check proved nothing
    if cfg.effective_staleness == 0:
        agreed = agreed and all(r["logprob_mismatch"] <= REHEARSAL_TOL for r in rows)
    lines += ["", "Verdict: every sync agreed." if agreed else "Verdict: a sync DISAGREED (see above)."]
    return "\n".join(lines) + "\n", agreed


def finish(rehearsal: Rehearsal) -> bool:
    """After the run: check every sync, write rehearsal.md beside the run, print it."""
    run_dir = Path(rehearsal.config.run.run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    first = json.loads((run_dir / "rollouts" / "step_000001.json").read_text())["samples"][0]
    checks = agreement(run_dir) + probe_engines(run_dir, first["prompt_ids"][:256])
    text, agreed = report(rehearsal, rows, checks)
    (run_dir / "rehearsal.md").write_text(text)
    print(text, flush=True)
    if rehearsal.plan_fits is False:  # the run here worked; the node's GPUs would not hold it
        print(f"{PLAN_VERDICT_FAILED} (the plan above and in {run_dir / 'rehearsal.md'}): the rehearsal ran, "
              f"but this config does not fit the node's GPUs", flush=True)
        return False
    return agreed


def start(node: TandemConfig, gpu_memory_gb: float = 80.0) -> Rehearsal:
    """Print the node's plan (will it fit?), then return the rehearsal to run here."""
    text, fits = "", None
    try:
        plan = plan_node(node, load_shape(node.model), int(gpu_memory_gb * mem.GIB), None)
        text, fits = plan_report.text(plan), plan.fits
    except PlanError as err:  # no plan (e.g. an unknown model): the rehearsal itself still runs
        text = f"tandem: no plan for this config: {err}"
    print(text, flush=True)
    rehearsal = rehearsal_config(node)
    rehearsal.plan, rehearsal.plan_fits = text, fits
    return rehearsal
