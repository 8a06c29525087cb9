"""Mixture-of-experts policies and routing replay, in process: the tiny Qwen3-MoE, the expert weight
layout, the routed-experts wire and compact forms, the embedded engine's record of them, and the
torch trainer's replay and agreement in a configuration that provokes disagreement (an engine in
bfloat16 against the fp32 trainer, near-tied router logits)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from tandem.config import ConfigError, build_config
from tandem.engine.core import SamplingParams
from tandem.engine.embedded import EmbeddedCore
from tandem.engine.http.native import generate_result
from tandem.engine.request import InvalidRequest
from tandem.engine.weight_loading import WeightLoadError, read_weights
from tandem.model_source import _tiny_key, load_causal_lm, resolve_model_path
from tandem.moe import (decode_routed_experts, encode_routed_experts, extend_routing, from_checkpoint_names,
                        moe_routers, pack_routing, to_checkpoint_names, unpack_routing)
from tandem.rollout.single_turn import sample_from_output
from tandem.sample import Sample
from tandem.trainer.torch_backend import TorchTrainer

ROOT = Path(__file__).resolve().parents[1]
CACHE = str(ROOT / ".cache" / "tandem")
TINY = {"num_experts": 8, "num_experts_per_tok": 2, "router_init_std": 0.002}
PROVOKING = {"run": {"cache_dir": CACHE}, "model": {"dtype": "bfloat16", "tiny": TINY},
             "rollout": {"sampling": {"temperature": 1.0}}}
"""Engine in bfloat16, trainer in fp32 (its master weights), router logits near-tied (router_init_std)."""


def config(**moe) -> object:
    return build_config({**PROVOKING, "trainer": {"device": "cpu", "lr": 1e-9, "moe": moe}})


@pytest.fixture(scope="module")
def moe_path() -> str:
    return resolve_model_path(config())


async def _generate(path: str, dtype: str, prompts: list[list[int]], start: int = 0, n: int = 16,
                    ask: bool = True) -> tuple[list, list[dict], object]:
    core = EmbeddedCore.load(path, dtype=dtype)
    await core.start()
    try:
        reqs = [core.make_request(input_ids=p, sampling=SamplingParams(max_new_tokens=n, temperature=1.0),
                                  return_logprob=True, return_routed_experts=ask, routed_experts_start_len=start)
                for p in prompts]

        async def run(r):
            async for _ in core.generate(r):
                pass
        await asyncio.gather(*(run(r) for r in reqs))
        return reqs, [generate_result(r, core.tokenizer, "", with_text=False) for r in reqs], core
    finally:
        await core.shutdown()


@pytest.fixture(scope="module")
def engine_samples(moe_path: str) -> list[Sample]:
    """Eight samples from the embedded engine in bfloat16, with its routing."""
    prompts = [list(range(40 + i, 50 + 2 * i)) for i in range(8)]
    # 32 tokens each: about 1,100 (token, layer) pairs, of which about 0.7% disagree (measured), so a
    # batch with none at all is not a chance this test takes.
    reqs, outs, _ = asyncio.run(_generate(moe_path, "bfloat16", prompts, n=32))
    samples = [sample_from_output(r.input_ids, o, None) for r, o in zip(reqs, outs)]
    for i, s in enumerate(samples):
        s.advantage = 1.0 if i % 2 else -1.0
    return samples


# --------------------------------------------------------------------------- the tiny model
def test_tiny_moe_is_qwen3_moe_and_dense_models_keep_their_cache_key(tmp_path):
    cfg = build_config({"run": {"cache_dir": str(tmp_path)}, "model": {"tiny": {
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 2,
        "num_layers": 2, "norm_topk_prob": False}}})
    model = load_causal_lm(resolve_model_path(cfg))
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    c = model.config
    assert (c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size, c.norm_topk_prob) == (4, 2, 32, False)
    assert list(moe_routers(model)) == [1]  # decoder_sparse_step 2: layer 0 dense, layer 1 MoE
    assert model.model.layers[1].mlp.experts.gate_up_proj.shape == (4, 64, c.hidden_size)
    dense = build_config({}).model
    moved = build_config({"model": {"tiny": {"router_init_std": 0.5, "num_experts_per_tok": 1}}}).model
    assert _tiny_key(dense, 0) == _tiny_key(moved, 0)  # MoE keys leave dense models' cache alone


# --------------------------------------------------------------------------- expert weights
def test_expert_weights_convert_to_and_from_hf_checkpoint_names_bitwise(moe_path, tmp_path):
    from safetensors.torch import load_file

    model = load_causal_lm(moe_path)
    saved = load_file(str(Path(moe_path) / "model.safetensors"))  # what transformers' save_pretrained wrote
    ours = to_checkpoint_names({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
    ours.pop("lm_head.weight", None)  # tied to the embedding, which save_pretrained keeps once
    assert set(ours) == set(saved)
    for name, t in saved.items():
        assert torch.equal(ours[name].view(torch.int16), t.view(torch.int16)), name
    back = from_checkpoint_names(ours)
    for name, t in model.state_dict().items():
        if name in back:
            assert torch.equal(back[name], t.to(torch.bfloat16)), name
    del ours["model.layers.1.mlp.experts.3.up_proj.weight"]
    with pytest.raises(ValueError, match=r"model.layers.1.mlp.experts: up_proj of experts \[3\] missing"):
        from_checkpoint_names(ours)


def test_engine_loads_checkpoint_named_experts_and_refuses_incomplete_ones(moe_path, tmp_path):
    from safetensors.torch import save_file

    model = load_causal_lm(moe_path)
    tensors = to_checkpoint_names({k: v.clone() for k, v in model.state_dict().items()})
    tensors.pop("lm_head.weight", None)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    read = read_weights(model, str(tmp_path), None, torch.device("cpu"))
    assert torch.equal(read["model.layers.0.mlp.experts.gate_up_proj"], model.model.layers[0].mlp.experts.gate_up_proj)
    del tensors["model.layers.0.mlp.experts.2.down_proj.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(WeightLoadError, match=r"down_proj of experts \[2\] missing"):
        read_weights(model, str(tmp_path), None, torch.device("cpu"))


# --------------------------------------------------------------------------- routed-experts forms
def test_routing_wire_and_compact_forms():
    ids = np.arange(24, dtype=np.int32).reshape(3, 2, 4) % 7
    wire = encode_routed_experts(ids)
    assert np.array_equal(decode_routed_experts(wire, 3), ids.reshape(3, 8))
    with pytest.raises(ValueError, match="not a whole number of ids for each of the 5 token positions"):
        decode_routed_experts(wire, 5)
    small = pack_routing(ids.reshape(3, 8))
    assert small["dtype"] == "uint8" and np.array_equal(unpack_routing(small), ids.reshape(3, 8))
    wide = pack_routing(np.array([[0, 300]]))
    assert wide["dtype"] == "uint16" and unpack_routing(wide).tolist() == [[0, 300]]
    # Rows held are kept (the routing later tokens were generated with); a gap is refused.
    grown = extend_routing(small, np.full((4, 8), 5), 2)
    got = unpack_routing(grown)
    assert got.shape == (6, 8) and np.array_equal(got[:3], ids.reshape(3, 8)) and (got[3:] == 5).all()
    with pytest.raises(ValueError, match="positions 6..6 without any"):
        extend_routing(grown, np.zeros((1, 8)), 7)


def test_multi_turn_sample_keeps_each_turns_rows_in_position_order():
    s = Sample(prompt_ids=[1, 2, 3])
    s.append_model_tokens([4, 5], [-0.1, -0.2])
    s.record_routing({"routed_experts": encode_routed_experts(np.full((4, 2), 1))}, 0)  # positions 0..3
    s.append_context_tokens([6, 7])
    start = s.routed_rows
    s.append_model_tokens([8], [-0.3])
    s.record_routing({"routed_experts": encode_routed_experts(np.full((3, 2), 2))}, start)  # positions 4..6
    assert s.routed_rows == len(s.tokens) - 1 == 7
    assert unpack_routing(s.routed_experts)[:, 0].tolist() == [1, 1, 1, 1, 2, 2, 2]
    s.record_routing({}, s.routed_rows)  # an engine that sent none adds none
    assert s.routed_rows == 7
    # Asked from an earlier position (a plug-in that did not say where it was): only the new row is taken.
    s.append_model_tokens([9], [-0.4])
    s.record_routing({"routed_experts": encode_routed_experts(np.full((8, 2), 3))}, 0)
    assert unpack_routing(s.routed_experts)[:, 0].tolist() == [1, 1, 1, 1, 2, 2, 2, 3]


# --------------------------------------------------------------------------- the embedded engine
def test_engine_records_the_experts_an_hf_forward_routes_to(moe_path):
    prompts = [list(range(10, 15)), list(range(20, 29))]
    reqs, outs, core = asyncio.run(_generate(moe_path, "float32", prompts, start=2, n=6))
    ref = load_causal_lm(moe_path)
    for req, out in zip(reqs, outs):
        rows = len(req.input_ids) + len(req.output_ids) - 1 - 2
        got = decode_routed_experts(out["meta_info"]["routed_experts"], rows).reshape(rows, 2, 2)
        seen = {}
        hooks = [m.register_forward_hook(lambda _m, _a, o, layer=layer: seen.__setitem__(layer, o[2]))
                 for layer, m in moe_routers(ref).items()]
        with torch.no_grad():
            ref(torch.tensor([req.input_ids + req.output_ids[:-1]]))
        for h in hooks:
            h.remove()
        for layer, ids in seen.items():
            assert np.array_equal(np.sort(got[:, layer], -1), np.sort(ids.numpy()[2:], -1)), layer
    with pytest.raises(InvalidRequest, match=r"routed_experts_start_len = 6 must lie in \[0, 5\]"):
        core.make_request(input_ids=[1, 2, 3, 4, 5], sampling=SamplingParams(), return_routed_experts=True,
                          routed_experts_start_len=6)


def test_engine_sends_no_routing_unless_asked(moe_path):
    _, outs, _ = asyncio.run(_generate(moe_path, "float32", [[5, 6, 7]], n=3, ask=False))
    assert "routed_experts" not in outs[0]["meta_info"]


def test_a_multi_turn_trajectory_carries_every_positions_routing(tmp_path):
    """The agent loop asks each turn from the row its trajectory holds (routed_experts_start_len), so
    the observation and template tokens get the routing of the prefill that fed them, and the whole
    trajectory but its last token has the engine's experts, equal to one HF forward over it."""
    from tandem.config.environment_section import EnvironmentConfig
    from tandem.env import ChatFormat, Environment, parse_hermes, run_episode

    class Chatter(Environment):
        def reset(self, row):
            return "hello"

        def step(self, text):
            return "go on"

    path = resolve_model_path(build_config({"run": {"cache_dir": CACHE}, "model": {"tiny": {"num_experts": 4}}}))
    starts: list[int] = []

    async def run():
        core = EmbeddedCore.load(path)
        await core.start()

        class Engine:  # EngineClient's generate, answered by the core in process
            async def generate(self, input_ids, sampling_params, return_logprob=True, routing_key=None,
                               routed_experts_start_len=0):
                starts.append(routed_experts_start_len)
                req = core.make_request(input_ids=input_ids, sampling=SamplingParams.from_dict(sampling_params),
                                        return_logprob=True, return_routed_experts=True,
                                        routed_experts_start_len=routed_experts_start_len)
                async for _ in core.generate(req):
                    pass
                return generate_result(req, core.tokenizer, req.output_text(core.tokenizer), with_text=False)
        try:
            return await run_episode(Chatter(), {}, engine=Engine(), chat=ChatFormat(core.tokenizer),
                                     parse=parse_hermes, limits=EnvironmentConfig(max_turns=3),
                                     sampling_params={"max_new_tokens": 5, "temperature": 1.0})
        finally:
            await core.shutdown()

    episode = asyncio.run(run())
    s = episode.sample
    assert len(episode.turns) == 3 and 0 in s.loss_mask  # observation tokens between the turns
    assert s.routed_rows == len(s.tokens) - 1
    assert starts[0] == 0 and starts[1] > 0 and starts[2] > starts[1]
    routed = unpack_routing(s.routed_experts).reshape(len(s.tokens) - 1, -1, 2)
    ref = load_causal_lm(path)
    seen = {}
    for layer, m in moe_routers(ref).items():
        m.register_forward_hook(lambda _m, _a, out, layer=layer: seen.__setitem__(layer, out[2]))
    with torch.no_grad():
        ref(torch.tensor([s.tokens[:-1]]))
    for layer, ids in seen.items():
        assert np.array_equal(np.sort(routed[:, layer], -1), np.sort(ids.numpy(), -1)), layer


# --------------------------------------------------------------------------- the trainer
def _experts_used(trainer: TorchTrainer) -> dict[int, list[torch.Tensor]]:
    """Every forward's top-k ids as the experts module receives them, per MoE layer."""
    used: dict[int, list[torch.Tensor]] = {}
    for layer in moe_routers(trainer.model):
        experts = trainer.model.model.layers[layer].mlp.experts
        experts.register_forward_pre_hook(lambda _m, args, layer=layer: used.setdefault(layer, []).append(args[1]))
    return used


def test_without_replay_the_fp32_trainer_disagrees_with_the_bf16_engine(moe_path, engine_samples):
    m = TorchTrainer(config(record_routing=True), moe_path).train_step(copy.deepcopy(engine_samples))
    assert m["routing_recorded_tokens"] == sum(len(s.tokens) - 1 for s in engine_samples)
    assert 0.5 < m["routing_agreement"] < 1.0 and m["routing_agreement_tokens"] <= m["routing_agreement"]


def test_with_replay_every_token_uses_the_engines_experts_and_the_mismatch_falls(moe_path, engine_samples):
    free = TorchTrainer(config(record_routing=True), moe_path).train_step(copy.deepcopy(engine_samples))
    trainer = TorchTrainer(config(routing_replay=True), moe_path)
    used = _experts_used(trainer)
    m = trainer.train_step(copy.deepcopy(engine_samples))
    # Padded micro-batch [b, L]: every position with an engine record went to the engine's experts.
    for layer, calls in used.items():
        ids = calls[0].reshape(len(engine_samples), -1, 2)
        for i, s in enumerate(engine_samples):
            rec = unpack_routing(s.routed_experts).reshape(-1, 2, 2)[:, layer]
            assert torch.equal(ids[i, :len(rec)], torch.from_numpy(rec)), (layer, i)
    # Agreement is still the router's own top-k against the engine's (replay does not hide it).
    assert m["routing_agreement"] < 1.0
    assert m["logprob_mismatch"] < free["logprob_mismatch"]


def test_recomputed_layers_replay_the_experts_their_first_pass_used():
    """Activation recomputation (megatron's, like torch's reentrant checkpoint: the first pass without autograd,
    the layer's forward again in the backward, after the micro-batch's record is gone) routes the recomputed
    tokens to the experts the first pass used, micro-batch by micro-batch in the order of the forwards (all
    forwards before their backwards, as a pipeline schedule may run them; one micro-batch without a record,
    like the empty ones expert parallelism adds): the gradients equal those of the same replay without
    recomputation."""
    from torch.utils.checkpoint import checkpoint

    from tandem.trainer.routing_replay import RoutingReplay

    torch.manual_seed(0)
    tokens, experts, top_k = 6, 8, 2
    weight = torch.randn(4, experts)

    def router(x: torch.Tensor, w: torch.Tensor, routing: RoutingReplay) -> torch.Tensor:
        logits = x @ w
        own = logits.topk(top_k, dim=-1).indices
        chosen = routing.route(0, own)
        chosen = own if chosen is None else chosen  # what megatron's router does with no answer
        return logits.gather(1, chosen).softmax(-1).mul(torch.arange(1.0, top_k + 1)).sum()

    # three micro-batches, the middle one without any record (its own routing, kept in the queue all the same)
    records = [torch.randint(0, experts, (1, tokens, 1, top_k), dtype=torch.int32), None,
               torch.randint(0, experts, (1, tokens, 1, top_k), dtype=torch.int32)]
    inputs = [torch.randn(tokens, 4) for _ in range(3)]
    grads = {}
    for recompute in (False, True):
        routing = RoutingReplay([0], 1, top_k, replay=True)
        w = weight.clone().requires_grad_(True)
        losses = []
        for x, record in zip(inputs, records):  # three forwards ...
            routing.set_batch(record, counting=True)
            losses.append(checkpoint(router, x, w, routing, use_reentrant=True) if recompute else router(x, w, routing))
            routing.end_forward()
        for loss in losses:  # ... then their backwards, oldest first
            loss.backward()
        grads[recompute] = w.grad
    assert grads[False].abs().sum() > 0
    torch.testing.assert_close(grads[True], grads[False], rtol=0, atol=0)


def test_replayed_gates_are_the_routers_probabilities_at_the_engines_experts(moe_path, engine_samples):
    trainer = TorchTrainer(config(routing_replay=True), moe_path)
    seen = []
    for router in moe_routers(trainer.model).values():
        router.register_forward_hook(lambda _m, _a, out: seen.append(out))
    trainer.train_step(copy.deepcopy(engine_samples))
    replaced = 0
    for logits, gates, chosen in seen:
        own = torch.topk(logits, 2, dim=-1).indices
        replaced += int((chosen.sort(-1).values != own.sort(-1).values).any(-1).sum())
        probs = torch.softmax(logits.float(), -1).gather(1, chosen)
        assert torch.allclose(gates, probs / probs.sum(-1, keepdim=True))
        assert gates.requires_grad  # the router still learns through the gates
    assert replaced  # some positions really were sent elsewhere than the router's own top-k


def test_packed_micro_batches_replay_the_same_experts(moe_path, engine_samples):
    padded = TorchTrainer(config(routing_replay=True), moe_path).train_step(copy.deepcopy(engine_samples))
    cfg = build_config({**PROVOKING, "trainer": {"device": "cpu", "lr": 1e-9, "max_tokens_per_micro_batch": 128,
                                                 "moe": {"routing_replay": True}}})
    trainer = TorchTrainer(cfg, moe_path)
    used = _experts_used(trainer)
    packed = trainer.train_step(copy.deepcopy(engine_samples))
    # Each sample's positions, wherever packing put it in a row, went to that sample's recorded experts.
    from tandem.trainer.batching import micro_batch_groups

    groups = micro_batch_groups(engine_samples, 16, 128)
    assert len(groups) > 1 and len(used[0]) == len(groups)
    for layer, calls in used.items():
        for group, ids in zip(groups, calls):
            col = 0
            for s in group:
                rec = torch.from_numpy(unpack_routing(s.routed_experts).reshape(-1, 2, 2)[:, layer])
                assert torch.equal(ids[col:col + len(rec)], rec), (layer, col)
                col += len(s.tokens)
    assert packed["logprob_mismatch"] == pytest.approx(padded["logprob_mismatch"], rel=1e-3)


def test_published_weights_are_hf_checkpoint_names(moe_path):
    exported = TorchTrainer(config(), moe_path).export_hf_state_dict()
    assert "model.layers.0.mlp.experts.7.down_proj.weight" in exported
    assert not any(k.endswith("experts.gate_up_proj") for k in exported)


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize("tree,message", [
    ({"model": {"tiny": TINY}, "trainer": {"backend": "megatron", "gpus": 2}},
     r"trainer.megatron.tensor_parallel = 2 with a mixture-of-experts model"),
    ({"model": {"tiny": TINY}, "trainer": {"backend": "megatron", "gpus": 2,
                                           "megatron": {"tensor_parallel": 1, "expert_parallel": 3}}},
     r"trainer.megatron.expert_parallel \(3\) must divide trainer.gpus"),
    ({"model": {"tiny": TINY}, "trainer": {"backend": "megatron", "gpus": 6,
                                           "megatron": {"tensor_parallel": 1, "expert_parallel": 3}}},
     r"trainer.megatron.expert_parallel = 3 does not divide model.tiny.num_experts = 8"),
    ({"trainer": {"backend": "megatron", "gpus": 2, "megatron": {"tensor_parallel": 1, "expert_parallel": 2}}},
     r"trainer.megatron.expert_parallel = 2 with a dense model"),
    ({"trainer": {"moe": {"routing_replay": True}}}, r"trainer.moe.routing_replay = true with a dense model"),
    ({"model": {"tiny": TINY}, "engine": {"backend": "sim"}, "trainer": {"moe": {"record_routing": True}}},
     r"trainer.moe.record_routing = true with engine.backend = 'sim'"),
    ({"model": {"tiny": TINY}, "trainer": {"lora": {"rank": 4}}}, r"trainer.lora.rank > 0 with model.tiny.num_experts"),
    ({"model": {"tiny": {"num_experts": 2, "num_experts_per_tok": 3}}}, r"num_experts_per_tok = 3 exceeds"),
    ({"model": {"path": "/m"}, "trainer": {"backend": "sim", "moe": {"routing_replay": True}}},
     r"trainer.moe.routing_replay = true with trainer.backend = 'sim'"),
])
def test_moe_config_refused_where_it_does_not_run(tree, message):
    with pytest.raises(ConfigError, match=message):
        build_config(tree)


# --------------------------------------------------------------------------- the rollout client
def test_client_asks_for_routing_straight_from_the_routers_engines():
    from tandem.rollout.client import EngineClient

    workers = ["http://e0", "http://e1"]
    reads = []

    async def listed() -> list[str]:
        reads.append(1)
        return list(workers)

    async def run() -> list[tuple[str, dict]]:
        client = EngineClient("http://router", 8, 30, retries=0)
        sent: list[tuple[str, dict]] = []
        gate = asyncio.Event()

        async def post_to(url, payload, headers):
            sent.append((url, dict(payload)))
            if payload["input_ids"] == [9]:
                await gate.wait()  # holds e0 busy while the next key is placed
            return 200, {"output_ids": [1], "meta_info": {"output_token_logprobs": [[-0.1, 1, None]]}}

        client._post_to = post_to
        plain = await client.generate([1], {})  # not asked: no routing fields, through the router
        assert sent[-1][0] == "http://router" and "return_routed_experts" not in sent[-1][1] and plain
        client.ask_routed_experts(listed)
        busy = asyncio.create_task(client.generate([9], {}, routing_key="b"))
        await asyncio.sleep(0)
        await client.generate([2], {}, routing_key="a", routed_experts_start_len=4)  # e0 is busy: e1
        gate.set()
        await busy
        await client.generate([3], {}, routing_key="a")  # both idle: still e1, where its prefix is
        workers.remove("http://e1")
        client.direct.stale()
        await client.generate([4], {}, routing_key="a")
        await client.close()
        return sent

    sent = asyncio.run(run())
    urls = [u for u, _ in sent[1:]]
    assert urls == ["http://e0", "http://e1", "http://e1", "http://e0"]  # least loaded, sticky, re-placed when gone
    assert all(p["return_routed_experts"] is True for _, p in sent[1:])
    assert sent[2][1]["routed_experts_start_len"] == 4 and "routed_experts_start_len" not in sent[1][1]
    assert len(reads) == 2


# --------------------------------------------------------------------------- the planner
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "intermediate_size": 6144,
                 "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
                 "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
                 "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936, "tie_word_embeddings": False}
"""Qwen3-30B-A3B's config.json (the keys the planner reads); its model card: 30.5B parameters, 3.3B activated."""


def test_planner_counts_total_and_active_parameters_of_moe_models():
    from tandem.lab.plan.planner import TrainerSetting, trainer_memory
    from tandem.lab.plan.shape import PlanError, load_shape, shape_from_hf

    shape = shape_from_hf(QWEN3_30B_A3B, "Qwen/Qwen3-30B-A3B")
    assert shape.total_params() == pytest.approx(30.5e9, rel=0.01)
    assert shape.total_params(active=True) == pytest.approx(3.3e9, rel=0.02)
    assert shape.rank_params(1, 1, 0) >= shape.total_params()  # the torch trainer holds every expert
    with pytest.raises(PlanError, match="needs sequence parallelism|only with sequence parallelism"):
        trainer_memory(shape, TrainerSetting(backend="megatron", gpus=2, tp=2, pp=1, micro_batch=1, recompute=False,
                                             seq_len=16))  # Megatron at TP > 1: refused (tests/test_plan_moe.py)
    # Exactly the tiny model transformers builds, with decoder_sparse_step 2 (one dense layer, one MoE).
    cfg = build_config({"run": {"cache_dir": CACHE}, "model": {"tiny": {**TINY, "decoder_sparse_step": 2}}})
    model = load_causal_lm(resolve_model_path(cfg))
    tiny = load_shape(cfg.model)
    assert tiny.total_params() == sum(p.numel() for p in model.parameters())
    assert tiny.total_params(active=True) == tiny.total_params() - 6 * 3 * tiny.hidden * tiny.expert_ffn


def test_routing_that_does_not_fit_the_model_is_refused_naming_the_shapes():
    from tandem.trainer.routing_replay import routed_tensor

    s = Sample(prompt_ids=[1, 2, 3], response_ids=[4], loss_mask=[1], rollout_logprobs=[-0.1])
    s.routed_experts = pack_routing(np.zeros((3, 6), dtype=np.int64))  # 3 ids per position: not 2 layers x top-2
    with pytest.raises(ValueError, match=r"3 positions x 6 ids, the model routes 4 tokens through 2 layers x top-2"):
        routed_tensor([s], 1, 4, [(0, 0)], 2, 2)
    s.routed_experts = {**pack_routing(np.zeros((3, 4))), "dtype": "float32"}
    with pytest.raises(ValueError, match="routing dtype 'float32' is neither uint8 nor uint16"):
        routed_tensor([s], 1, 4, [(0, 0)], 2, 2)
