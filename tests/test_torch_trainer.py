"""TorchTrainer on the tiny random Qwen3: gradients, masking, learning direction, export.

Only the edges are fake: the model is the tiny random one the real run uses, the rollout
logprobs come from HF `generate` sampling, and the export is loaded back through
`from_pretrained` the way an engine would load it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from tandem import handoff, losses
from tandem.config import build_config, write_views
from tandem.model_source import resolve_model_path
from tandem.sample import Sample
from tandem.trainer.torch_backend import TorchTrainer


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("TANDEM_TORCH_THREADS", "1")  # shared CI cores


def make_cfg(cache_dir, **trainer):
    loss = trainer.pop("loss", {})
    temperature = trainer.pop("temperature", 1.0)
    return build_config({
        "run": {"cache_dir": cache_dir, "seed": 0},
        "trainer": {"device": "cpu", **trainer, "loss": loss},
        "rollout": {"sampling": {"temperature": temperature}},
    })


def sample(prompt, response, mask=None, adv=1.0, logps=None, group=0):
    mask = [1] * len(response) if mask is None else mask
    logps = [0.0] * len(response) if logps is None else logps
    return Sample(prompt_ids=prompt, response_ids=response, loss_mask=mask,
                  rollout_logprobs=logps, advantage=adv, group_id=group)


def mixed_batch():
    """Different prompt/response lengths (so padding varies) and a multi-turn mask."""
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(7):
        p = torch.randint(0, 256, (2 + i % 3,), generator=g).tolist()
        r = torch.randint(0, 256, (3 + (i * 2) % 5,), generator=g).tolist()
        mask = [1 if (j // 2) % 2 == 0 else 0 for j in range(len(r))] if i % 2 else None
        out.append(sample(p, r, mask, adv=float(i - 3) / 3))
    return out


def step_at_lr0(trainer, batch):
    """One train_step at lr 0, with the gradient each optimizer step was about to apply.

    The gradient is read where the real path hands it to the optimizer (a pre-step hook);
    lr 0 leaves the weights bitwise unchanged, so the model can be scored again afterwards.
    """
    for group in trainer.optimizer.param_groups:
        group["lr"] = 0.0
    seen = []
    handle = trainer.optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: seen.append([p.grad.detach().clone() for p in trainer.params]))
    try:
        metrics = trainer.train_step(batch)
    finally:
        handle.remove()
    return metrics, seen


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean"])
def test_micro_batching_gives_the_full_batch_gradient(cache_dir, aggregation):
    # grad_clip 0: the hook sees the unclipped gradient.
    trainer = TorchTrainer(make_cfg(cache_dir, micro_batch_size=16, grad_clip=0.0, loss={"aggregation": aggregation}))
    batch = mixed_batch()
    full_stats, (full,) = step_at_lr0(trainer, batch)
    trainer.cfg.trainer.micro_batch_size = 3  # 7 samples -> micro-batches of 3, 3, 1
    micro_stats, (micro,) = step_at_lr0(trainer, batch)
    for a, b in zip(full, micro):
        torch.testing.assert_close(b, a, atol=1e-7, rtol=1e-5)
    assert micro_stats["loss"] == pytest.approx(full_stats["loss"], abs=1e-6)
    assert any(g.abs().sum() > 0 for g in full)


def test_packing_by_token_budget_and_the_packed_layout():
    """First fit, longest first, within the budget; a sample over the budget alone; batch order kept
    inside a micro-batch; the packed row's positions, segments, mask and cu_seqlens by hand."""
    from tandem.trainer.batching import collate_packed, pack_by_tokens

    lengths = [6, 3, 9, 4, 12, 2]  # prompt 1 + response (n - 1)
    batch = [sample([i], list(range(10, 9 + n)), adv=float(i)) for i, n in enumerate(lengths)]
    bins = pack_by_tokens(batch, 10)
    got = [[int(s.prompt_ids[0]) for s in b] for b in bins]
    # longest first: 12 alone (over the budget), 9 (+ nothing fits: room 1), 6 + 4, 3 + 2
    assert got == [[4], [2], [0, 3], [1, 5]]
    assert sorted(i for b in got for i in b) == list(range(6))
    assert all(sum(lengths[i] for i in b) <= 10 for b in got if len(b) > 1)
    mb = collate_packed([batch[0], batch[3]], torch.device("cpu"))  # 6 + 4 tokens
    assert mb.input_ids.tolist() == [[0, 10, 11, 12, 13, 14, 3, 10, 11, 12]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3]]
    # shifted positions 0..4 score sample 0's tokens 1..5; position 5 would score sample 1's first token: -1
    assert mb.segments.tolist() == [[0, 0, 0, 0, 0, -1, 1, 1, 1]]
    assert mb.mask.tolist() == [[1, 1, 1, 1, 1, 0, 1, 1, 1]]
    assert mb.advantages.tolist() == [[0, 0, 0, 0, 0, 0, 3, 3, 3]]
    assert mb.cu_seqlens.tolist() == [0, 6, 10] and mb.num_samples == 2 and mb.packed


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean"])
def test_packed_micro_batches_and_the_chunked_head_give_the_padded_whole_head_numbers(cache_dir, aggregation):
    """fp32, every loss term on (KL to a frozen reference, entropy bonus, TIS), two mini-batches: the
    gradient each optimizer step receives and the step's metrics are the same (1e-6 relative) with
    padded micro-batches and the whole LM head, with micro-batches packed by tokens (block-diagonal
    attention, positions restarting per sample, per-sample means over segments), with the LM head and
    log-softmax in chunks of 5 positions, and with both."""
    loss = {"aggregation": aggregation, "kl_coef": 0.1, "entropy_coef": 0.01, "tis": True}
    trainer = TorchTrainer(make_cfg(cache_dir, micro_batch_size=3, minibatches=2, grad_clip=0.0, temperature=0.8,
                                    loss=loss))
    batch = mixed_batch()
    for s in batch:  # engine logprobs near the model's, so TIS weights differ per token
        s.rollout_logprobs = [-5.5 + 0.1 * j for j in range(len(s.response_ids))]
    ref_stats, ref = step_at_lr0(trainer, batch)
    assert len(ref) == 2 and any(g.abs().sum() > 0 for g in ref[0])
    tc = trainer.cfg.trainer
    for packed, chunk in [(24, 0), (0, 5), (24, 5)]:
        tc.max_tokens_per_micro_batch, tc.logprob_chunk_tokens = packed, chunk
        stats, got = step_at_lr0(trainer, batch)
        for step_ref, step_got in zip(ref, got):
            for a, b in zip(step_ref, step_got):
                assert (a - b).abs().max() <= 1e-6 * max(a.abs().max(), 1e-12), (packed, chunk)
        for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ppo_kl", "logprob_mismatch", "tokens"):
            assert stats[key] == pytest.approx(ref_stats[key], rel=1e-6, abs=1e-9), (key, packed, chunk)


def test_loss_covers_exactly_the_masked_response_tokens(cache_dir):
    """Gradient equals a hand-built loss over the mask-1 response tokens only.

    Reference: on-policy rho == 1, so the seq-mean loss is (1/B) sum_i -A_i * mean_{j in M_i} logp_ij,
    with logp_ij from a separate unpadded forward of each sample at temperature 0.7 and
    M_i the loss_mask==1 positions (0-islands in the middle and at the end).
    Rollout logprobs at mask-0 positions are junk (-50, TIS on): a leaked token would get
    weight clamp(exp(logp + 50)) = 2 and a mismatch of ~45.
    """
    trainer = TorchTrainer(make_cfg(cache_dir, micro_batch_size=2, temperature=0.7, grad_clip=0.0,
                                    loss={"tis": True}))
    batch = [
        sample([5, 6, 7], [10, 11, 12, 13, 14, 15, 16], mask=[1, 1, 0, 0, 1, 1, 0], adv=1.5),
        sample([9], [20, 21, 22, 23], mask=[0, 1, 1, 0], adv=-0.5),
        sample([3, 4], [30, 31, 32], mask=[1, 0, 1], adv=2.0),
    ]
    model = trainer.model
    with torch.no_grad():  # rollout logprobs = the model's own at mask 1, junk at mask 0
        for s in batch:
            logits = model(torch.tensor([s.tokens])).logits[0, len(s.prompt_ids) - 1:-1] / 0.7
            lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.response_ids)[:, None])[:, 0]
            s.rollout_logprobs = [v if m else -50.0 for v, m in zip(lp.tolist(), s.loss_mask)]
    stats, (got,) = step_at_lr0(trainer, batch)

    model.zero_grad(set_to_none=True)
    ref = 0.0
    for s in batch:
        logits = model(torch.tensor([s.tokens])).logits[0, len(s.prompt_ids) - 1:-1] / 0.7
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.response_ids)[:, None])[:, 0]
        keep = torch.tensor(s.loss_mask, dtype=torch.bool)
        ref = ref + (-s.advantage) * lp[keep].mean()
    (ref / len(batch)).backward()
    for a, b in zip(got, [p.grad for p in trainer.params]):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-5)
    # tokens = 4 + 2 + 2 trained tokens; loss value = -(1.5 - 0.5 + 2) / 3 = -1
    assert stats["tokens"] == 8
    assert stats["loss"] == pytest.approx(-1.0, abs=1e-5)
    assert stats["logprob_mismatch"] < 1e-5


def test_train_step_calls_the_shared_policy_loss_per_micro_batch(cache_dir, monkeypatch):
    """The torch backend's loss is `losses.PolicyLoss`, called once per micro-batch with the
    mini-batch denominators; the step's loss is the sum of what it returned."""
    calls = []
    original = losses.PolicyLoss.__call__

    def spy(self, logp, entropy, batch, num_samples, num_tokens):
        loss, sums = original(self, logp, entropy, batch, num_samples, num_tokens)
        calls.append((self, float(loss.detach()), num_samples, num_tokens))
        return loss, sums

    monkeypatch.setattr(losses.PolicyLoss, "__call__", spy)
    trainer = TorchTrainer(make_cfg(cache_dir, micro_batch_size=3, loss={"kl_coef": 0.1, "entropy_coef": 0.01}))
    batch = mixed_batch()
    metrics = trainer.train_step(batch)
    n_tokens = float(sum(sum(s.loss_mask) for s in batch))
    assert [(c[0], c[2], c[3]) for c in calls] == [(trainer.policy_loss, 7, n_tokens)] * 3  # 7 samples: 3, 3, 1
    assert trainer.policy_loss == losses.PolicyLoss.from_config(trainer.cfg.trainer.loss)
    assert metrics["loss"] == pytest.approx(sum(c[1] for c in calls), abs=1e-6)


def _response_logp(trainer, batch):
    with torch.no_grad():
        total = 0.0
        for s in batch:
            logits = trainer.model(torch.tensor([s.tokens])).logits[0, len(s.prompt_ids) - 1:-1]
            total += torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.response_ids)[:, None]).sum().item()
    return total


@pytest.mark.parametrize("adv", [1.0, -1.0])
def test_advantage_sign_moves_sampled_token_logprob(cache_dir, adv):
    trainer = TorchTrainer(make_cfg(cache_dir, lr=1e-3))
    batch = [sample([40 + i, 61], [48 + i, 48 + i, 50], adv=adv) for i in range(4)]
    before = _response_logp(trainer, batch)
    metrics = trainer.train_step(batch)
    after = _response_logp(trainer, batch)
    assert (after - before) * adv > 0.05, (before, after)
    assert metrics["optimizer_steps"] == 1 and metrics["clip_frac"] == 0.0 and metrics["ppo_kl"] == 0.0


def test_mismatch_is_zero_against_hf_generate_logprobs(cache_dir):
    """Rollout logprobs as an engine reports them (sampled at T=0.8) agree with the trainer's scores."""
    cfg = make_cfg(cache_dir, temperature=0.8)
    trainer = TorchTrainer(cfg)
    gen = AutoModelForCausalLM.from_pretrained(resolve_model_path(cfg))
    torch.manual_seed(0)
    prompts = torch.tensor([[55, 61], [51, 61], [57, 61], [52, 61]])
    out = gen.generate(prompts, do_sample=True, temperature=0.8, top_k=0, top_p=1.0, max_new_tokens=6,
                       output_logits=True, return_dict_in_generate=True, pad_token_id=256)
    # What an engine reports: log_softmax(raw logits / T) of each sampled token (KV-cached decode).
    logps = torch.log_softmax(torch.stack(out.logits, 1) / 0.8, -1)
    resp = out.sequences[:, 2:]
    lp = logps.gather(-1, resp[..., None])[..., 0]
    batch = []
    for i in range(4):
        ids, lps = resp[i].tolist(), lp[i].tolist()
        if 258 in ids:  # finished early: keep up to and including <|im_end|>, drop the padding
            ids, lps = ids[: ids.index(258) + 1], lps[: ids.index(258) + 1]
        batch.append(sample(prompts[i].tolist(), ids, logps=lps, adv=float(i % 2) - 0.5))
    n_tokens = sum(len(s.response_ids) for s in batch)
    metrics = trainer.train_step(batch)
    assert metrics["logprob_mismatch"] < 1e-4
    assert metrics["tokens"] == n_tokens
    # ... and scoring at the wrong temperature would show up clearly in the metric
    trainer.temperature = 1.0
    assert trainer.train_step(batch)["logprob_mismatch"] > 1e-2


def test_minibatches_take_several_steps_against_fixed_old_logprobs(cache_dir):
    trainer = TorchTrainer(make_cfg(cache_dir, minibatches=2, lr=1e-2))
    batch = mixed_batch()
    m = trainer.train_step(batch)
    assert m["optimizer_steps"] == 2
    # the second mini-batch is scored against the pre-update policy, so rho != 1 there
    assert m["ppo_kl"] != 0.0
    assert m["grad_norm"] > 0


def test_kl_penalty_against_frozen_reference(cache_dir):
    trainer = TorchTrainer(make_cfg(cache_dir, lr=1e-2, loss={"kl_coef": 0.1, "kl_estimator": "k3"}))
    batch = mixed_batch()
    first = trainer.train_step(batch)
    second = trainer.train_step(batch)
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)  # policy == reference before the first update
    assert second["kl"] > 1e-5
    assert all(not p.requires_grad for p in trainer.ref_model.parameters())


def test_export_round_trips_through_from_pretrained(cache_dir, tmp_path):
    cfg = make_cfg(cache_dir, lr=1e-2)
    trainer = TorchTrainer(cfg)
    trainer.train_step(mixed_batch())  # weights now differ from the source model
    sd = trainer.export_hf_state_dict()
    assert "lm_head.weight" not in sd  # tied to embed_tokens; safetensors refuses aliases
    assert not {t.data_ptr() for t in sd.values()} & {p.data_ptr() for p in trainer.model.parameters()}
    src = resolve_model_path(cfg)
    save_file(sd, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(f"{src}/config.json", tmp_path / "config.json")
    fresh = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids).logits, trainer.model(ids).logits, atol=0, rtol=0)


@pytest.mark.e2e
def test_trainer_process_trains_publishes_and_answers(cache_dir, tmp_path):
    """`python -m tandem.trainer` against real handoff files and the real publish_weights.

    every_k_steps = 2 over 3 steps: version 1 is not due, 2 is (2 % 2 == 0), 3 is the last step.
    """
    cfg = make_cfg(cache_dir)
    cfg.run.steps = 3
    cfg.run.mode = "async"
    cfg.rollout.staleness.max = 1
    cfg.sync.every_k_steps = 2
    run_dir = tmp_path / "run"
    cfg.run.run_dir = str(run_dir)
    run_dir.mkdir()
    view = write_views(cfg, run_dir)["trainer"]  # what the launcher hands the trainer
    for step in range(3):
        handoff.write_batch(run_dir, handoff.TrainBatch(step, mixed_batch()))
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "TANDEM_TORCH_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "tandem.trainer", "--run-config", str(view)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [handoff.wait_train_result(run_dir, s, timeout_s=1) for s in range(3)]
    assert [r.published and r.published.version for r in results] == [None, 2, 3]
    for key in ("loss", "kl", "entropy", "clip_frac", "grad_norm", "logprob_mismatch", "tokens", "train_time"):
        assert key in results[0].metrics
    assert sorted(p.name for p in (run_dir / "weights").iterdir()) == ["step_000002", "step_000003"]
    assert results[2].published is not None
    assert results[2].published.weights_path == str(run_dir / "weights" / "step_000003")
    # The published version loads like any HF model and is not the base model any more.
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path(cfg))
    v3 = AutoModelForCausalLM.from_pretrained(results[2].published.weights_path)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert (v3(ids).logits - base(ids).logits).abs().max() > 1e-4
