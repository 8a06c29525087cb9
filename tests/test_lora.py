"""LoRA: the peft trainer, adapter-only weight versions, and engines that serve several adapters.

Only the edges are fake: the tiny random Qwen3 the default run uses, adapters written by peft
itself (`save_pretrained`) or by the trainer's publish, engines as real subprocesses behind the
real sglang-router, and the reference logprobs from peft's own forward. Tolerance: 1e-4 absolute
on fp32 CPU logprobs, as for whole-weight sync (tests/test_weight_sync.py).
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import httpx
import pytest
import torch

from tandem import losses
from tandem.config import ConfigError, TandemConfig, build_config
from tandem.engine.adapters import LoraLimits
from tandem.engine.core import InvalidRequest, SamplingParams
from tandem.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_name, adapters_kept, doomed_adapters
from tandem.model_source import resolve_model_path
from tandem.sample import Sample

REPO = Path(__file__).resolve().parents[1]
TOL = 1e-4
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]


def lora_tree(run_dir: Path, **over) -> dict:
    tree = {"run": {"run_dir": str(run_dir), "cache_dir": str(REPO / ".cache/tandem")},
            "engine": {"count": 2}, "trainer": {"lr": 0.05, "lora": {"rank": 4, "target_modules": TARGETS}}}
    for section, values in over.items():
        tree[section] = {**tree.get(section, {}), **values}
    return tree


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    return resolve_model_path(TandemConfig.model_validate(lora_tree(tmp_path_factory.mktemp("m"))))


def peft_adapter(model_path: str, out: Path, seed: int, rank: int = 4, targets: list[str] = TARGETS):
    """A peft model with random (non-zero) adapters, saved by peft itself; returns the model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=8, target_modules=targets, task_type="CAUSAL_LM"))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    model.save_pretrained(out, save_embedding_layers=False)
    return model.eval()


def reference_logprobs(model, prompt: list[int], output: list[int]) -> list[float]:
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]
    return losses.token_logprobs(logits, ids[:, 1:], 1.0)[0, len(prompt) - 1:].tolist()


def max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


# --------------------------------------------------------------------------- config
def test_lora_is_off_by_default_and_refused_where_it_is_not_built(tmp_path):
    assert not TandemConfig().trainer.lora.enabled
    assert build_config(lora_tree(tmp_path, trainer={"backend": "megatron", "gpus": 2})).trainer.lora.enabled
    megatron = {"backend": "megatron", "gpus": 2}
    for over, words in ((dict(trainer={**megatron, "lora": {"rank": 4, "dropout": 0.1}}), "apply no dropout"),
                        (dict(trainer={**megatron, "lora": {"rank": 4, "target_modules": ["c_attn"]}}),
                         "no Megatron layer"),
                        (dict(trainer={"backend": "sim"}), "stand-in weights"),
                        (dict(sync={"encoding": "delta"}), "sync.encoding = 'full'")):
        with pytest.raises(ConfigError, match=words):
            build_config(lora_tree(tmp_path, **over))
    for bad, key in (({"target_modules": []}, "target_modules"), ({"target_modules": ["q proj"]}, "target_modules"),
                     ({"rank": -1}, "trainer.lora.rank"), ({"dropout": 1.0}, "trainer.lora.dropout")):
        with pytest.raises(ConfigError, match=key):
            build_config(lora_tree(tmp_path, trainer={"lora": {"rank": 4, **bad}}))


def test_the_shipped_lora_config_loads():
    from tandem.config.loading import load_config

    cfg = load_config(["--config", str(REPO / "configs/lora.toml")])
    assert cfg.trainer.lora.enabled and cfg.trainer.backend == "torch" and "lm_head" in cfg.trainer.lora.target_modules


def test_sglang_launch_carries_the_lora_flags(tmp_path):
    from tandem.engine.sglang_launch import load_server_args, sglang_command

    cfg = build_config(lora_tree(tmp_path, engine={"backend": "sglang"}, rollout={"staleness": {"max": 2}}))
    cmd = sglang_command(cfg, 30000, "/models/qwen")
    _, flags = load_server_args()
    assert "--enable-lora" in cmd and cmd[cmd.index("--max-lora-rank") + 1] == "4"
    i = cmd.index("--lora-target-modules")
    assert cmd[i + 1:i + 1 + len(TARGETS)] == TARGETS
    assert cmd[cmd.index("--max-loaded-loras") + 1] == "6"  # window 2 + current + 1, the next, one unloading
    assert cmd[cmd.index("--max-loras-per-batch") + 1] == "6"  # SGLang: per-batch <= loaded
    assert all(f in flags for f in cmd if f.startswith("--"))
    with pytest.raises(ConfigError, match="trainer.lora.rank"):
        sglang_command(build_config(lora_tree(tmp_path, engine={"backend": "sglang",
                                                                 "sglang": {"args": {"max_lora_rank": 64}}})), 1, "m")


def test_the_window_of_loaded_adapters():
    # staleness 1: keep the current version and the two before it; older ones go.
    assert adapters_kept(1) == 3
    assert doomed_adapters([1, 2, 3, 4], 4, 1) == [1]
    assert doomed_adapters([2, 3, 4], 4, 1) == []
    assert doomed_adapters([1, 5, 9], 9, 0) == [1, 5]


# --------------------------------------------------------------------------- the engine, in process
def run(coro):
    return asyncio.run(coro)


async def generate(core, prompt: list[int], adapter: str | None, n: int = 6):
    req = core.make_request(input_ids=prompt, sampling=SamplingParams(temperature=1.0, max_new_tokens=n,
                                                                      ignore_eos=True),
                            return_logprob=True, lora_name=adapter)
    async for _ in core.generate(req):
        pass
    return req


def embedded(model_path: str, max_loaded: int = 3, rank: int = 4):
    from tandem.engine.embedded import EmbeddedCore

    return EmbeddedCore.load(model_path, lora=LoraLimits(rank, TARGETS, max_loaded))


def test_one_batch_serves_each_row_on_its_own_adapter(model_path, tmp_path):
    refs = {"a": peft_adapter(model_path, tmp_path / "a", 1), "b": peft_adapter(model_path, tmp_path / "b", 2)}

    async def main():
        core = embedded(model_path)
        await core.start()
        try:
            for name in refs:
                assert (await core.adapters.load(name, str(tmp_path / name))).success
            prompt = [22, 28, 30]
            # Submitted together, so the scheduler decodes them in one batch: a, b and the base.
            reqs = await asyncio.gather(*(generate(core, prompt, name) for name in ("a", "b", None, "a")))
            assert core.engine_backend.scheduler.max_batch_seen == 4
        finally:
            await core.shutdown()
        for req, name in zip(reqs, ("a", "b", None, "a")):
            model = refs[name or "a"]
            if name is None:
                with model.disable_adapter():
                    want = reference_logprobs(model, prompt, req.output_ids)
            else:
                want = reference_logprobs(model, prompt, req.output_ids)
            assert max_diff(req.output_logprobs, want) < TOL, name
        with refs["a"].disable_adapter():  # the adapters really change what the model says
            assert max_diff(reqs[0].output_logprobs, reference_logprobs(refs["a"], prompt, reqs[0].output_ids)) > 0.01

    run(main())


def test_adapter_requests_and_loads_are_checked(model_path, tmp_path):
    peft_adapter(model_path, tmp_path / "a", 1)
    peft_adapter(model_path, tmp_path / "r8", 1, rank=8)
    peft_adapter(model_path, tmp_path / "qonly", 1, targets=["q_proj"])
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / ADAPTER_CONFIG).write_text((tmp_path / "a" / ADAPTER_CONFIG).read_text())
    (tmp_path / "broken" / ADAPTER_WEIGHTS).write_bytes(b"not safetensors")

    async def main():
        core = embedded(model_path, max_loaded=2)
        await core.start()
        try:
            with pytest.raises(InvalidRequest, match="not loaded: nope"):
                await generate(core, [1, 2], "nope")
            assert (await core.adapters.load("a", str(tmp_path / "a"))).success
            again = await core.adapters.load("a", str(tmp_path / "a"))
            assert not again.success and "already loaded" in again.error_message
            big = await core.adapters.load("big", str(tmp_path / "r8"))
            assert not big.success and "rank 8 exceeds" in big.error_message
            broken = await core.adapters.load("broken", str(tmp_path / "broken"))
            assert not broken.success and ADAPTER_WEIGHTS in broken.error_message
            assert (await core.adapters.load("q", str(tmp_path / "qonly"))).success  # a subset of targets
            full = await core.adapters.load("c", str(tmp_path / "a"))
            assert not full.success and "--max-loaded-loras" in full.error_message
            assert full.loaded_adapters == {"a": str(tmp_path / "a"), "q": str(tmp_path / "qonly")}
            gone = await core.adapters.unload("nope")
            assert not gone.success and "not loaded" in gone.error_message
        finally:
            await core.shutdown()
        plain = embedded(model_path)
        plain.adapters.limits = None
        with pytest.raises(InvalidRequest, match="not started with LoRA"):
            plain.make_request(input_ids=[1], sampling=SamplingParams(), lora_name="a")

    run(main())


def test_an_unload_waits_for_the_requests_on_its_adapter(model_path, tmp_path):
    peft_adapter(model_path, tmp_path / "a", 1)

    async def main():
        core = embedded(model_path)
        await core.start()
        try:
            await core.adapters.load("a", str(tmp_path / "a"))
            long = asyncio.create_task(generate(core, [1, 2], "a", n=400))
            while not core.get_load().num_running_reqs:
                await asyncio.sleep(0.001)
            unload = asyncio.create_task(core.adapters.unload("a"))
            await asyncio.sleep(0.05)
            with pytest.raises(InvalidRequest, match="not loaded"):  # no new request may name it
                await generate(core, [1, 2], "a")
            assert not unload.done() and not long.done()  # ...but the running one finishes on it
            again = await core.adapters.load("a", str(tmp_path / "a"))
            assert not again.success and "still being unloaded" in again.error_message
            req = await long
            assert len(req.output_ids) == 400
            result = await unload
            assert result.success and result.loaded_adapters == {}
            assert core.engine_backend.scheduler.lora.adapters == {}
        finally:
            await core.shutdown()

    run(main())


def test_a_request_that_goes_away_leaves_the_batch_before_its_adapter_is_freed():
    """The order that keeps a running row from meeting a freed adapter: the abort of a request whose
    client went away reaches the backend before the unload its release lets through. The backend
    is a recording fake (the edge); the core is real."""
    from tandem.engine.backend import EngineBackend, LoadInfo
    from tandem.engine.core import EngineCore

    calls: list[tuple] = []

    class Recorder(EngineBackend):
        name = "recorder"

        def submit(self, req): pass  # admitted, never finishes: the client leaves first
        async def abort(self, rids): calls.append(("abort", tuple(rids or ()))); return 1
        async def pause(self, mode): return 0
        async def resume(self): pass
        async def flush_cache(self): return True, ""
        async def load_weights(self, path, fmt): return True, ""
        def get_load(self): return LoadInfo(0, 0, 0, 1, 1, 0)
        def alive(self): return True
        async def load_lora(self, name, path, limits): return True, "ok"
        async def unload_lora(self, name): calls.append(("unload", name))

    class Tok:
        eos_token_id = None

        def __len__(self):
            return 10

    async def main():
        core = EngineCore(Recorder(), tokenizer=Tok(), model_path="m", lora=LoraLimits(4, TARGETS, 4))
        await core.start()
        await core.adapters.load("a", "/nowhere")
        req = core.make_request(input_ids=[1], sampling=SamplingParams(max_new_tokens=5), lora_name="a")
        task = asyncio.create_task(anext(core.generate(req).__aiter__()))
        while not req.admitted:
            await asyncio.sleep(0)
        unload = asyncio.create_task(core.adapters.unload("a"))
        await asyncio.sleep(0)
        task.cancel()
        assert (await unload).success
        assert calls == [("abort", (req.rid,)), ("unload", "a")]

    run(main())


def test_sim_engine_serves_the_same_endpoints(model_path, tmp_path):
    from tandem.lab.sim_engine import SimEngineCore

    peft_adapter(model_path, tmp_path / "a", 1)
    cfg = build_config(lora_tree(tmp_path, engine={"backend": "sim"}))

    async def main():
        core = SimEngineCore.from_config(cfg, model_path=model_path)
        await core.start()
        try:
            assert (await core.adapters.load(adapter_name(1), str(tmp_path / "a"))).success
            req = await generate(core, [1, 2], adapter_name(1), n=3)
            assert len(req.output_ids) == 3
            with pytest.raises(InvalidRequest, match="not loaded"):
                await generate(core, [1, 2], adapter_name(2))
            assert (await core.adapters.unload(adapter_name(1))).loaded_adapters == {}
        finally:
            await core.shutdown()

    run(main())


def test_a_request_refused_for_an_unloaded_adapter_is_retried_on_the_current_one():
    from tandem.rollout import EngineClient

    sent = []

    async def post(payload, headers):
        sent.append(dict(payload))
        if len(sent) == 1:
            client.weight_version, client.adapter = 5, adapter_name(5)  # a sync lands meanwhile
            return 400, '{"message": "The following requested LoRA adapters are not loaded: policy-v1"}'
        return 200, {"output_ids": [1], "meta_info": {"weight_version": "0"}}

    client = EngineClient("http://unused", 4, 10, post=post)
    client.weight_version, client.adapter = 1, adapter_name(1)
    out = run(client.generate([1, 2], {"max_new_tokens": 1}))
    assert [p["lora_path"] for p in sent] == ["policy-v1", "policy-v5"]
    assert out["meta_info"]["weight_version"] == "5"  # the adapter it ran on, not the engine's base version


# --------------------------------------------------------------------------- the trainer
def batch(prompt: list[int], seed: int) -> list[Sample]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for adv in (1.0, -1.0, 0.5, -0.5):
        s = Sample(prompt_ids=prompt, group_id=0)
        s.append_model_tokens(torch.randint(20, 40, (4,), generator=gen).tolist(), [-1.0] * 4)
        s.advantage = adv
        out.append(s)
    return out


def test_only_the_adapter_trains_and_its_export_is_a_standard_peft_adapter(model_path, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tandem.trainer.torch_backend import TorchTrainer
    from tandem.weights.transport import WeightPublisher

    cfg = build_config(lora_tree(tmp_path, trainer={"loss": {"kl_coef": 0.1}}))
    trainer = TorchTrainer(cfg)
    assert trainer.ref_model is None  # the reference is the base, with the adapter disabled
    trained = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trained and all(".lora_A." in n or ".lora_B." in n for n in trained)
    in_optimizer = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for n, p in trainer.model.named_parameters() if n in trained}
    base_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if n not in trained}
    for step in range(2):
        metrics = trainer.train_step(batch([22, 28], step))
    assert metrics["kl"] > 0  # the adapter moved away from the base, which scored the KL
    assert all(torch.equal(p, base_before[n]) for n, p in trainer.model.named_parameters() if n not in trained)
    out = WeightPublisher(cfg, model_path).publish(trainer.export_adapter(), 2)
    path = Path(out.weights_path)
    assert out.weights_kind == "lora" and sorted(f.name for f in path.iterdir()) == sorted(
        [ADAPTER_CONFIG, ADAPTER_WEIGHTS, "manifest.json"])
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["adapter_name"] == "policy-v2" and manifest["adapters_kept"] == 3
    full_bytes = sum(f.stat().st_size for f in Path(model_path).glob("*.safetensors"))
    assert out.publish_bytes < full_bytes / 2
    base = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, path).eval()  # peft reads what tandem published
    prompt, output = [22, 28], [30, 31, 32, 33]
    assert max_diff(reference_logprobs(loaded, prompt, output), reference_logprobs(trainer.model, prompt, output)) < 1e-6


def test_a_checkpoint_resumes_the_adapter_and_its_optimizer_exactly(model_path, tmp_path):
    from tandem.trainer.torch_backend import TorchTrainer

    cfg = build_config(lora_tree(tmp_path))
    torch.manual_seed(0)
    a = TorchTrainer(cfg)
    a.train_step(batch([22, 28], 0))
    saved = io.BytesIO()
    torch.save(a.state_dict_for_checkpoint(), saved)  # as the checkpoint does: no tensor shared with `a`
    state = torch.load(io.BytesIO(saved.getvalue()), weights_only=False)
    assert all(".lora_" in k for k in state["model"])  # the frozen base is not saved again
    torch.manual_seed(1)
    b = TorchTrainer(cfg)
    b.load_checkpoint_state(state)
    for step in (1, 2):
        a.train_step(batch([22, 28], step))
        b.train_step(batch([22, 28], step))
    ea, eb = a.export_adapter(), b.export_adapter()
    assert ea.keys() == eb.keys() and all(torch.equal(ea[k], eb[k]) for k in ea)
    other = build_config(lora_tree(tmp_path, trainer={"lora": {"rank": 8, "target_modules": TARGETS}}))
    with pytest.raises(ValueError, match="resume with the same settings"):
        TorchTrainer(other).load_checkpoint_state(state)


def test_targets_must_be_linear_layers_of_the_model(tmp_path):
    from tandem.trainer.torch_backend import TorchTrainer

    with pytest.raises(ValueError, match="embed_tokens"):
        TorchTrainer(build_config(lora_tree(tmp_path, trainer={"lora": {"rank": 4, "target_modules": ["embed_tokens"]}})))
    with pytest.raises(ValueError, match="no_such_proj"):
        TorchTrainer(build_config(lora_tree(tmp_path, trainer={"lora": {"rank": 4, "target_modules": ["no_such_proj"]}})))


# --------------------------------------------------------------------------- the whole sync, real processes
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tandem.orchestrator.cluster import start_engines, start_router
    from tandem.supervisor import Supervisor
    from tandem.placement import plan_placement

    run_dir = tmp_path_factory.mktemp("lora_sync")
    cfg = build_config(lora_tree(run_dir))
    (run_dir / "config.json").write_text(cfg.model_dump_json())
    sup = Supervisor(run_dir, REPO)
    try:
        engines = start_engines(cfg, sup, plan_placement(cfg, 0), run_dir, resolve_model_path(cfg))
        yield cfg, sup, engines, start_router(cfg, sup, engines)
    finally:
        sup.shutdown()


def test_every_engine_serves_each_new_adapter_as_the_trainer_scores_it(cluster):
    """Eight versions through the orchestrator's own Fleet: after each sync every engine (and the
    router) answers on the new adapter within 1e-4 of the trainer; the rollout client labels
    each answer with its adapter's version; each engine keeps at most the window's adapters."""
    from tandem.orchestrator.fleet import Fleet
    from tandem.rollout import EngineClient
    from tandem.trainer.torch_backend import TorchTrainer
    from tandem.weights.transport import WeightPublisher

    cfg, sup, engines, router = cluster
    trainer = TorchTrainer(cfg)
    publisher = WeightPublisher(cfg, resolve_model_path(cfg))
    prompt = [22, 28]
    kept = adapters_kept(cfg.effective_staleness)
    worst: list[float] = []

    stale = Path(cfg.run.run_dir) / "earlier_run_adapter"
    peft_adapter(resolve_model_path(cfg), stale, 9)

    async def main():
        client = EngineClient(router, 8, 60)
        fleet = Fleet(cfg, sup, engines, router)
        async with httpx.AsyncClient() as http:  # an earlier run's adapters, on engines that outlived it
            for name in (adapter_name(1), adapter_name(50)):
                await http.post(f"{engines['engine0']}/load_lora_adapter", json={"lora_name": name,
                                                                                  "lora_path": str(stale)})
        try:
            for version in range(1, 9):
                trainer.train_step(batch(prompt, version))
                out = publisher.publish(trainer.export_adapter(), version)
                await fleet.sync(client, out.weights_path, version, "continue", 60)
                assert client.adapter == adapter_name(version)
                answer = await client.generate(prompt, {"max_new_tokens": 8, "temperature": 1.0, "ignore_eos": True})
                assert answer["meta_info"]["weight_version"] == str(version)
                async with httpx.AsyncClient() as http:
                    for url in engines.values():
                        body = {"input_ids": prompt, "return_logprob": True, "lora_path": adapter_name(version),
                                "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}
                        got = (await http.post(f"{url}/generate", json=body, timeout=60)).json()
                        engine_lp = [t[0] for t in got["meta_info"]["output_token_logprobs"]]
                        want = reference_logprobs(trainer.model, prompt, got["output_ids"])
                        worst.append(max_diff(engine_lp, want))
                        assert worst[-1] < TOL, (url, version)
                    await asyncio.gather(*fleet._unloads)
                    for url in engines.values():
                        loaded = (await http.get(f"{url}/get_server_info")).json()["loaded_lora_adapters"]
                        expected = {adapter_name(v) for v in range(max(1, version - kept + 1), version + 1)}
                        assert set(loaded) == expected, (url, version, loaded)
                    # OpenAI clients pick the adapter by model name, as SGLang serves it.
                    greedy = {"input_ids": prompt, "lora_path": adapter_name(version),
                              "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}}
                    one = engines["engine0"]
                    native = (await http.post(f"{one}/generate", json=greedy, timeout=60)).json()["text"]
                    chat = (await http.post(f"{one}/v1/completions", json={
                        "model": adapter_name(version), "prompt": prompt, "max_tokens": 6, "temperature": 0,
                        "ignore_eos": True}, timeout=60)).json()
                    assert chat["choices"][0]["text"] == native, (chat, native)
        finally:
            await client.close()
            await fleet.close()

    run(main())
    print(f"\nengine vs trainer logprob, 8 adapter versions x 2 engines: max |diff| {max(worst):.1e}")


def test_resume_with_lora_continues_on_the_checkpoints_adapter(tmp_path):
    """A LoRA run checkpointed at step 2 and 4, then extended to 6 with --resume: the numbering,
    versions and batches carry on as for full fine-tuning (tests/test_launcher.py), the checkpoint
    holds only the adapter and its optimizer state, and in sync mode the engines score every
    step's samples as the trainer does, after the resume too: they serve the checkpoint's adapter."""
    from _faults import SMALL, Launch, check_batches, metrics

    run = tmp_path / "run"
    common = ["--engines", "1", "--mode", "sync", "--checkpoint.interval", "2", *SMALL, "--trainer.lr", "0.05",
              "--trainer.lora.rank", "4", "--trainer.lora.target_modules", json.dumps(TARGETS)]
    first = Launch(run, ["--steps", "4", *common], tag="first")
    assert first.wait(300) == 0, first.describe()
    extend = Launch(run, ["--steps", "6"], resume=True, tag="extend")
    assert extend.wait(300) == 0, extend.describe()
    assert "resuming at step 5" in extend.stdout, extend.describe()  # after checkpoint 4
    rows = metrics(run)
    assert [r["weight_version"] for r in rows] == list(range(1, 7))
    assert check_batches(run, 6) == []
    assert all(r["logprob_mismatch"] < 1e-5 for r in rows), [r["logprob_mismatch"] for r in rows]
    ckpt = run / "checkpoints" / "step_000006"
    state = torch.load(ckpt / "trainer_rank000.pt", weights_only=False)["backend"]
    assert state["model"] and all(".lora_" in k for k in state["model"]) and state["lora"]["rank"] == 4
    assert sorted(f.name for f in (ckpt / "hf").iterdir()) == sorted([ADAPTER_CONFIG, ADAPTER_WEIGHTS, "manifest.json"])


def test_a_weight_agent_loads_each_adapter_and_unloads_the_old_ones(cluster, tmp_path):
    """Multi-node: versions in a store (a shared directory here; any fsspec URL in a run), an agent
    beside the engine loads each as policy-vV, the engine itself lists it, the window holds."""
    from tandem.trainer.torch_backend import TorchTrainer
    from tandem.weights.agent import WeightAgent
    from tandem.weights.reload import engine_adapters
    from tandem.weights.store import WeightStore
    from tandem.weights.transport import WeightPublisher

    cfg, _, engines, _ = cluster
    store_dir = tmp_path / "store"
    agent_cfg = build_config({**json.loads(cfg.model_dump_json()), "sync": {"url": str(store_dir)}})
    trainer = TorchTrainer(agent_cfg)
    publisher = WeightPublisher(agent_cfg, resolve_model_path(agent_cfg))
    url = engines["engine0"]
    kept = adapters_kept(cfg.effective_staleness)

    async def main():
        async with httpx.AsyncClient() as http:
            for name in await engine_adapters(http, url):  # what the other tests left loaded
                await http.post(f"{url}/unload_lora_adapter", json={"lora_name": name})
            agent = WeightAgent(WeightStore(str(store_dir)), tmp_path / "local", url, http, log=lambda line: None)
            for version in range(1, 7):
                trainer.train_step(batch([22, 28], version))
                publisher.publish(trainer.export_adapter(), version)
                assert await agent.poll_once() == f"loaded version {version}"
                if agent._unloading is not None:
                    await agent._unloading  # unloads run beside the polls
                assert await agent.poll_once() == f"engine serves version {version}"
                listed = await engine_adapters(http, url)
                assert listed == {adapter_name(v) for v in range(max(1, version - kept + 1), version + 1)}, listed

    run(main())


def test_an_external_engine_behind_an_agent_rejoins_once_it_lists_the_current_adapter(cluster, tmp_path):
    """Multi-node with LoRA: a loaded adapter changes no engine's weight_version, so an engine
    that dropped out rejoins the router when it lists the current version's adapter, not before."""
    from tandem.orchestrator.external import ExternalFleet
    from tandem.trainer.torch_backend import TorchTrainer
    from tandem.weights.transport import WeightPublisher

    cfg, sup, engines, router = cluster
    url = engines["engine1"]
    ext_cfg = build_config({**json.loads(cfg.model_dump_json()),
                            "engine": {"backend": "external", "external": {"urls": [url]}},
                            "sync": {"url": str(tmp_path / "store"), "reload_by": "agent"}})
    trainer = TorchTrainer(ext_cfg)
    trainer.train_step(batch([22, 28], 0))
    path = WeightPublisher(ext_cfg, resolve_model_path(ext_cfg)).publish(trainer.export_adapter(), 77).weights_path

    async def main():
        fleet = ExternalFleet(ext_cfg, sup, {"engine1": url}, router)
        try:
            fleet.weights = (path, 77)
            fleet.recovering.add("engine1")
            assert not await fleet._rejoin("engine1", url)  # back on /health, but not on version 77
            async with httpx.AsyncClient() as http:  # what its weight agent does
                await http.post(f"{url}/load_lora_adapter", json={"lora_name": adapter_name(77), "lora_path": path})
            assert await fleet._rejoin("engine1", url)
            assert "engine1" not in fleet.recovering
        finally:
            await fleet.close()
            async with httpx.AsyncClient() as http:
                await http.post(f"{url}/unload_lora_adapter", json={"lora_name": adapter_name(77)})

    run(main())
