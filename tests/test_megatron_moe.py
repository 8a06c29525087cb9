"""The Megatron trainer on a mixture-of-experts model (CPU, gloo), against the torch trainer on the same
tiny Qwen3-MoE and batch, at expert parallelism 1 and across ranks.

What is real: megatron-core's MoE layers (top-k router, SequentialMLP experts, the all-to-all token
dispatcher over the expert-parallel group), our converter and its expert-parallel split, the shim's
expert gradient reduction, routing replay through megatron-core's router seam. The model mixes dense
and MoE layers (decoder_sparse_step 2: layers 1 and 3 are MoE).

The batch carries the engine's routing for half of its samples (random experts, so it disagrees
with both trainers' routers on most tokens) and both trainers replay it (trainer.moe.routing_replay):
the same loss and gradient then also show the replayed gates agree, and the samples without a record
show the router's own routing agrees. Tolerances are the dense parity test's at TP = 2
(tests/test_megatron_cpu.py): logits atol 1e-5 (the experts' outputs are summed in another order),
per-call loss 1e-5, first-step gradient max|diff| / max|grad| < 1e-5 per tensor, update rel-L2 < 1e-3.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tandem.config import build_config
from tandem.model_source import load_causal_lm, resolve_model_path
from tandem.moe import pack_routing, to_checkpoint_names

pytest.importorskip("megatron.core")
from test_megatron_cpu import (PROBE, TRAINER, _free_port, assert_same_first_gradient,  # noqa: E402
                               assert_same_first_step, first_step_recorded, make_batch, resumes_bitwise,
                               run_trainer_process, torch_reference_step)

TINY_MOE = {"num_layers": 4, "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 2,
            "router_init_std": 0.3}
"""Layers 1 and 3 MoE, 0 and 2 dense; router logits spread wide enough that fp32 noise never flips a top-k."""
TOP_K = TINY_MOE["num_experts_per_tok"]
EXPERT_PARALLEL = [int(n) for n in os.environ.get("TANDEM_TEST_EXPERT_PARALLEL", "1,2").split(",")]
"""Expert-parallel sizes to run, one rank per expert-parallel rank (data parallel = EP): 1, and 2 - two gloo
ranks exchanging tokens all-to-all, four experts each. EP 4 and EP 8 (one expert per rank, the most this
model allows) run by hand with TANDEM_TEST_EXPERT_PARALLEL=4,8 (90 s and 130 s here: eight processes on two
cores), the same code paths with more ranks."""


def make_cfg(cache_dir: str, backend: str, ep: int = 1, routing_replay: bool = True):
    trainer = json.loads(json.dumps(TRAINER)) | {"backend": backend, "device": "cpu",
                                                  "moe": {"routing_replay": routing_replay}}
    if backend == "megatron":
        trainer |= {"gpus": ep, "megatron": {"tensor_parallel": 1, "expert_parallel": ep}}
    return build_config({"run": {"cache_dir": cache_dir, "seed": 0}, "model": {"tiny": TINY_MOE},
                         "trainer": trainer, "rollout": {"sampling": {"temperature": 0.9}}})


def routed_batch() -> list:
    """make_batch()'s samples, every other one with the engine's routing: random experts for positions
    [0, len - 1) of every layer (dense layers' entries 0, as SGLang sends them)."""
    rng = np.random.default_rng(7)
    samples = make_batch()
    for i, s in enumerate(samples):
        if i % 2:
            continue
        rows = len(s.tokens) - 1
        ids = np.zeros((rows, TINY_MOE["num_layers"], TOP_K), dtype=np.int64)
        for layer in (1, 3):
            ids[:, layer] = [rng.choice(TINY_MOE["num_experts"], TOP_K, replace=False) for _ in range(rows)]
        s.routed_experts = pack_routing(ids.reshape(rows, -1))
    return samples


def routing_used(trainer, samples) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(the experts each MoE router's routing map sends every token to, the engine's record laid out by hand
    in megatron's [sequence, batch] token order) for every micro-batch and MoE layer of a training forward."""
    from tandem.trainer.megatron_routing import megatron_routers

    maps: list[torch.Tensor] = []
    hooks = [router.register_forward_hook(lambda _m, _a, out: maps.append(out[1]))
             for router in megatron_routers(trainer.model).values()]
    out = []
    try:
        for mb in trainer.step.micro_batches(samples):
            maps.clear()
            trainer.step.forward(trainer.train_model, mb)
            b, s = mb.input_ids.shape
            for layer, used in zip((1, 3), maps if mb.routed is not None else []):
                record = torch.stack([mb.routed[r, t, layer] for t in range(s) for r in range(b)])
                out.append((used, record))
    finally:
        for h in hooks:
            h.remove()
    return out


def _worker(rank: int, world: int, port: int, cache_dir: str, ep: int, out_dir: str) -> None:
    """One rank of the Megatron trainer: scores, one train step, export, checkpoint round trip; rank 0 saves."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), TANDEM_TORCH_THREADS="1")
    import warnings

    warnings.filterwarnings("ignore")
    from tandem.trainer.megatron_backend import MegatronTrainer

    trainer = MegatronTrainer(make_cfg(cache_dir, "megatron", ep))
    res: dict = {"logits_before": trainer.full_logits(PROBE), "layout": (trainer.layout.ep, trainer.layout.dp)}
    res["local_experts"] = len(trainer.model.decoder.layers[1].mlp.experts.local_experts)
    with torch.no_grad():
        res["routing_used"] = routing_used(trainer, routed_batch())
    with first_step_recorded(trainer.optimizer.optimizer, trainer.export_hf_grads) as first_step:
        res["metrics"] = trainer.train_step(routed_batch())
    res["first_step"] = first_step
    res["logits_after"] = trainer.full_logits(PROBE)
    res["export"] = trainer.export_hf_state_dict()
    res["small_step"] = trainer.train_step(routed_batch()[:2])  # one sample per mini-batch: ranks left idle
    res["resume_bitwise"] = resumes_bitwise(trainer, trainer.state_dict_for_checkpoint(), trainer.export_hf_state_dict)
    if rank == 0:
        torch.save(res, Path(out_dir) / "result.pt")
    else:
        assert res["export"] == {}
    trainer.close()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def torch_reference(cache_dir):
    """The torch trainer on the same model and batch; gradients in HF checkpoint names (one tensor per expert)."""
    ref, trainer = torch_reference_step(make_cfg(cache_dir, "torch"), routed_batch(), to_checkpoint_names)
    return ref | {"small_step": trainer.train_step(routed_batch()[:2])}


@pytest.mark.timeout(420)
@pytest.mark.parametrize("world,ep", [(n, n) for n in EXPERT_PARALLEL], ids=[f"ep{n}" for n in EXPERT_PARALLEL])
def test_megatron_moe_matches_the_torch_trainer(tmp_path, cache_dir, torch_reference, world, ep):
    import torch.multiprocessing as mp

    resolve_model_path(make_cfg(cache_dir, "torch"))  # build the tiny model once, before the ranks race
    t0 = time.perf_counter()
    # daemon: should the ranks ever hang in a collective, the timeout fails the test and exiting ends them
    mp.spawn(_worker, args=(world, _free_port(), cache_dir, ep, str(tmp_path)), nprocs=world, join=True, daemon=True)
    res, ref = torch.load(tmp_path / "result.pt", weights_only=False), torch_reference
    assert res["layout"] == (ep, world) and res["local_experts"] == TINY_MOE["num_experts"] // ep
    assert res["resume_bitwise"], "restoring state_dict_for_checkpoint() did not reproduce the next step"

    # 1. replay: at every position with a record, each MoE layer sends the token to the engine's experts
    recorded = 0
    for used, record in res["routing_used"]:
        has = record[:, 0] >= 0
        chosen = torch.zeros_like(used[has]).scatter_(1, record[has].long(), True)
        assert torch.equal(used[has], chosen), "a recorded token went to experts the engine did not choose"
        recorded += int(has.sum())
    assert recorded > 0

    # 2. logits, the per-call loss (one rank: the same micro-batches) and the first mini-batch's gradient
    # (replayed and own routing both in it; across data-parallel ranks, reduced as one big forward's)
    torch.testing.assert_close(res["logits_before"], ref["logits_before"], atol=1e-5, rtol=0.0)
    grad_err = (assert_same_first_step if world == 1 else assert_same_first_gradient)(res["first_step"],
                                                                                        ref["first_step"])

    # 3. the step's metrics, routing agreement included (the random records disagree with the router)
    m, r = res["metrics"], ref["metrics"]
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ppo_kl", "logprob_mismatch"):
        assert m[key] == pytest.approx(r[key], abs=1e-5), (key, m[key], r[key])
    for key in ("routing_agreement", "routing_agreement_tokens", "routing_recorded_tokens"):
        assert m[key] == r[key], (key, m[key], r[key])
    assert 0.0 < m["routing_agreement"] < 0.5 and m["routing_recorded_tokens"] > 0
    assert m["grad_norm"] == pytest.approx(r["grad_norm"], rel=1e-4)
    # a step with fewer samples per mini-batch than ranks: the idle ranks still join every all-to-all
    small, small_ref = res["small_step"], ref["small_step"]
    assert small["samples"] == small_ref["samples"] == 2
    for key in ("loss", "pg_loss", "kl", "entropy", "logprob_mismatch", "routing_agreement"):
        assert small[key] == pytest.approx(small_ref[key], abs=1e-5), (key, small[key], small_ref[key])

    # 4. the weights moved the same way, every expert of every rank in the export
    export = res["export"]
    assert set(export) == set(ref["after"])
    assert {k for k in export if ".experts." in k} == {f"model.layers.{i}.mlp.experts.{e}.{w}_proj.weight"
                                                      for i in (1, 3) for e in range(8) for w in ("gate", "up", "down")}
    worst, rel = 0.0, 0.0
    for k in export:
        delta_mg, delta_torch = export[k] - ref["before"][k], ref["after"][k] - ref["before"][k]
        worst = max(worst, (delta_mg - delta_torch).abs().max().item())
        rel = max(rel, ((delta_mg - delta_torch).norm() / delta_torch.norm()).item())
    assert rel < 1e-3, rel
    assert worst < 0.05 * TRAINER["lr"], worst

    # 5. export -> HF safetensors (the real publish path) -> from_pretrained: the same logits
    from tandem.weights import publish_weights

    path = publish_weights(export, resolve_model_path(make_cfg(cache_dir, "torch")), tmp_path / "run", version=1,
                           keep_last=2)
    with torch.no_grad():
        reloaded = load_causal_lm(str(path))(input_ids=PROBE).logits
    torch.testing.assert_close(reloaded, res["logits_after"], atol=1e-5, rtol=0.0)
    print(f"\n[{world=} {ep=}] logits err {(res['logits_before'] - ref['logits_before']).abs().max().item():.1e}, "
          f"grad err {grad_err:.1e}, update diff max {worst:.2e} rel-L2 {rel:.1e}, loss {m['loss']:.6f} vs "
          f"{r['loss']:.6f}, agreement {m['routing_agreement']:.4f}, {time.perf_counter() - t0:.1f}s")


def test_the_launched_trainer_trains_an_moe_policy_across_expert_parallel_ranks(tmp_path, cache_dir, torch_reference):
    """The real launch path (the trainer's view, torchrun, `python -m tandem.trainer` on 2 ranks, EP 2, routing
    replay): one step on the routed batch, the same metrics as the torch trainer's, and rank 0 publishes every
    rank's experts in HF checkpoint names, moved as the torch trainer moved them."""
    from safetensors.torch import load_file

    proc, result = run_trainer_process(make_cfg(cache_dir, "megatron", ep=2), tmp_path, routed_batch())
    ref = torch_reference
    assert result.routing is not None and result.published is not None
    reported = {**result.metrics, **result.routing.row()}  # the routing numbers as the metrics row names them
    for key in ("loss", "kl", "entropy", "logprob_mismatch", "routing_agreement", "routing_agreement_tokens"):
        assert reported[key] == pytest.approx(ref["metrics"][key], abs=1e-5), key
    published = load_file(str(Path(result.published.weights_path) / "model.safetensors"))
    assert set(published) == set(ref["after"])
    for k, after in ref["after"].items():
        delta_mg, delta_torch = published[k] - ref["before"][k], after - ref["before"][k]
        assert ((delta_mg - delta_torch).norm() / delta_torch.norm()).item() < 1e-3, k
    assert sorted(p.name for p in Path(str(result.checkpoint_tmp)).glob("trainer_rank*.pt")) == \
        ["trainer_rank000.pt", "trainer_rank001.pt"]
