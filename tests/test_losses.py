"""Hand-derived checks of the shared RL math (tandem/losses.py).

Every expected number below is worked out in the comment next to it, not produced by
running the code under test.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from tandem.advantages import assign_advantages, grpo_advantages
from tandem.config import LossConfig
from tandem.losses import (
    PolicyLoss,
    aggregate,
    chunked_scores,
    cispo_loss,
    entropy_from_logits,
    gspo_loss,
    kl_penalty,
    logprob_mismatch,
    policy_loss,
    tis_weights,
    token_logprobs,
)
from tandem.sample import Sample

EPS = 1e-6


def close(actual, expected, tol=1e-5):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float32),
                               torch.tensor(expected, dtype=torch.float32), atol=tol, rtol=0)


# --------------------------------------------------------------------------- advantages
def test_grpo_advantages_with_std():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 2.0], [0.0, 0.0, 4.0, 4.0]])
    # group 0: mean 2 -> centred [-1, 0, 1, 0]; unbiased var = (1+0+1+0)/3 = 2/3,
    #   std = sqrt(2/3) = 0.816497 -> [-1.224745, 0, 1.224745, 0]
    # group 1: mean 2 -> centred [-2, -2, 2, 2]; var = (4*4)/3 = 16/3, std = 2.309401
    #   -> 2 / 2.309401 = sqrt(3)/2 = 0.866025
    adv = grpo_advantages(rewards, use_std_norm=True)
    close(adv, [[-1.224745, 0.0, 1.224745, 0.0], [-0.866025, -0.866025, 0.866025, 0.866025]])
    # The eps sits in the denominator: 1 / (sqrt(2/3) + 1e-6) differs from 1/sqrt(2/3) in the 6th digit.
    assert adv[0, 2].item() == pytest.approx(1.0 / (math.sqrt(2 / 3) + EPS), rel=1e-6)


def test_grpo_advantages_without_std_is_just_centred():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 2.0], [0.0, 0.0, 4.0, 4.0]])
    # mean 2 in both groups -> r - 2
    close(grpo_advantages(rewards, use_std_norm=False), [[-1.0, 0.0, 1.0, 0.0], [-2.0, -2.0, 2.0, 2.0]])


def test_grpo_advantages_group_of_one_skips_std():
    # G = 1: centred reward is r - r = 0; the (N-1) std would be NaN, so the std step is off.
    adv = grpo_advantages(torch.tensor([[5.0], [3.0]]), use_std_norm=True)
    close(adv, [[0.0], [0.0]])
    assert not torch.isnan(adv).any()


def test_grpo_advantages_all_equal_group_is_zero():
    # centred = [0, 0, 0]; std = 0 -> 0 / (0 + 1e-6) = 0, not NaN.
    close(grpo_advantages(torch.tensor([[0.7, 0.7, 0.7]]), use_std_norm=True), [[0.0, 0.0, 0.0]])


def test_grpo_advantages_flat_with_unequal_groups():
    rewards = torch.tensor([1.0, 7.0, 3.0, 10.0])
    ids = torch.tensor([0, 1, 0, 2])
    # group 0 = rewards {1, 3}: mean 2 -> [-1, +1]; unbiased std = sqrt((1+1)/1) = 1.414214
    #   -> -/+ 0.707107 at positions 0 and 2.
    # group 1 = {7} and group 2 = {10}: single samples -> 0.
    close(grpo_advantages(rewards, True, group_ids=ids), [-0.707107, 0.0, 0.707107, 0.0])


def test_assign_advantages_groups_samples_by_group_id():
    samples = [Sample(prompt_ids=[1], reward=r, group_id=g) for r, g in [(1.0, 3), (0.0, 5), (0.0, 3), (1.0, 5)]]
    assign_advantages(samples, use_std_norm=False)
    # group 3 = {1, 0}: mean 0.5 -> [+0.5, -0.5]; group 5 = {0, 1}: -> [-0.5, +0.5]
    assert [s.advantage for s in samples] == pytest.approx([0.5, -0.5, -0.5, 0.5])
    assign_advantages(samples, use_std_norm=True)
    # centred +-0.5, unbiased std = sqrt((0.25+0.25)/1) = 0.707107 -> +-0.707107
    assert [s.advantage for s in samples] == pytest.approx([0.707107, -0.707107, -0.707107, 0.707107], abs=1e-5)


# --------------------------------------------------------------------------- policy loss
def _logratio(rhos):
    return torch.log(torch.tensor(rhos))


def test_policy_loss_clips_both_sides_asymmetric():
    # eps_clip = 0.2, eps_clip_high = 0.28 -> rho is clipped into [0.8, 1.28].
    rho = [1.5, 1.5, 0.5, 0.5, 1.1, 1.25]
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0, 1.0])
    logp = _logratio(rho)
    old = torch.zeros(6)
    loss, clipped = policy_loss(logp, old, adv, torch.ones(6), eps_clip=0.2, eps_clip_high=0.28)
    # a) rho 1.5, A +1: max(-1.5, -1.28) = -1.28, clipped term larger -> clipped
    # b) rho 1.5, A -1: max(+1.5, +1.28) = 1.5                           -> not clipped
    # c) rho 0.5, A +1: max(-0.5, -0.8) = -0.5                           -> not clipped
    # d) rho 0.5, A -1: max(+0.5, +0.8) = 0.8                            -> clipped
    # e) rho 1.1, A +2: inside the range, max(-2.2, -2.2) = -2.2         -> not clipped
    # f) rho 1.25, A +1: inside [0.8, 1.28]: -1.25                       -> not clipped
    close(loss, [-1.28, 1.5, -0.5, 0.8, -2.2, -1.25])
    close(clipped, [1.0, 0.0, 0.0, 1.0, 0.0, 0.0])

    # Symmetric eps (eps_clip_high None -> 0.2): token f now hits 1.2: max(-1.25, -1.2) = -1.2, clipped.
    loss_sym, clipped_sym = policy_loss(logp, old, adv, torch.ones(6), eps_clip=0.2)
    assert loss_sym[5].item() == pytest.approx(-1.2, abs=1e-6)
    assert clipped_sym[5].item() == 1.0
    # token a is now clipped at 1.2 instead of 1.28: -1.2
    assert loss_sym[0].item() == pytest.approx(-1.2, abs=1e-6)


def test_policy_loss_gradient_is_cut_where_clipped():
    # d loss / d logp = -rho * A for an unclipped token, 0 for a clipped one.
    logp = _logratio([1.5, 1.1]).requires_grad_()
    loss, _ = policy_loss(logp, torch.zeros(2), torch.tensor([1.0, 2.0]), torch.ones(2), 0.2, 0.28)
    loss.sum().backward()
    # token 0: clipped (rho 1.5 > 1.28, A > 0) -> 0; token 1: -1.1 * 2 = -2.2
    close(logp.grad, [0.0, -2.2])


def test_policy_loss_dual_clip_caps_negative_advantages():
    rho = [5.0, 1.5, 5.0]
    adv = torch.tensor([-1.0, -1.0, 1.0])
    loss, clipped = policy_loss(_logratio(rho), torch.zeros(3), adv, torch.ones(3), 0.2, 0.28, dual_clip_c=3.0)
    # a) rho 5, A -1: PPO gives max(5, 1.28) = 5; dual clip min(5, -3*-1 = 3) = 3 -> clipped
    # b) rho 1.5, A -1: PPO gives 1.5 < 3, unchanged                               -> not clipped
    # c) rho 5, A +1: dual clip only applies to A < 0: max(-5, -1.28) = -1.28     -> clipped (PPO)
    close(loss, [3.0, 1.5, -1.28])
    close(clipped, [1.0, 0.0, 1.0])


def test_policy_loss_masks_and_tis_weights():
    logp = _logratio([1.1, 1.1, 1.1])
    adv = torch.tensor([1.0, 1.0, 1.0])
    mask = torch.tensor([1.0, 0.0, 1.0])
    w = torch.tensor([0.5, 2.0, 2.0])
    loss, clipped = policy_loss(logp, torch.zeros(3), adv, mask, 0.2, 0.28, tis_weights=w)
    # unweighted each token is -1.1; times w -> [-0.55, -2.2, -2.2]; the masked token -> 0
    close(loss, [-0.55, 0.0, -2.2])
    close(clipped, [0.0, 0.0, 0.0])


def test_policy_loss_is_minus_advantage_on_policy():
    # rho == 1 exactly when logp == old_logp: loss = -A, nothing clipped.
    logp = torch.tensor([-0.3, -2.0])
    loss, clipped = policy_loss(logp, logp.clone(), torch.tensor([0.7, -1.3]), torch.ones(2), 0.2, 0.28)
    close(loss, [-0.7, 1.3])
    close(clipped, [0.0, 0.0])


# --------------------------------------------------------------------------- KL / TIS
def test_kl_estimators():
    ln2 = math.log(2.0)
    logp = torch.tensor([ln2, -1.0, 0.5])
    ref = torch.tensor([0.0, 0.0, 0.5])
    # x = [ln2, -1, 0]
    # k1 = x                      -> [0.693147, -1, 0]
    # k2 = x^2 / 2                -> [0.480453/2 = 0.240227, 0.5, 0]
    # k3 = exp(-x) - 1 + x        -> [0.5 - 1 + 0.693147 = 0.193147, e - 1 - 1 = 0.718282, 1 - 1 + 0 = 0]
    close(kl_penalty(logp, ref, "k1"), [0.693147, -1.0, 0.0])
    close(kl_penalty(logp, ref, "k2"), [0.240227, 0.5, 0.0])
    close(kl_penalty(logp, ref, "k3"), [0.193147, 0.718282, 0.0])


def test_kl_k3_is_clamped_to_ten():
    # x = -20: exp(20) - 1 - 20 = 4.85e8 -> clamped to 10. k1 is not clamped: -20.
    # x = +20: exp(-20) - 1 + 20 = 19.000000002 -> clamped to 10.
    logp = torch.tensor([-20.0, 20.0])
    ref = torch.zeros(2)
    close(kl_penalty(logp, ref, "k3"), [10.0, 10.0])
    close(kl_penalty(logp, ref, "k1"), [-20.0, 20.0])
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, "k4")


def test_tis_weights_truncate_at_the_configured_high():
    old = torch.log(torch.tensor([0.5, 3.0, 1.2]))
    rollout = torch.zeros(3)
    # w = old/rollout probability ratio = [0.5, 3.0, 1.2]
    close(tis_weights(old, rollout, 2.0), [0.5, 2.0, 1.2])
    close(tis_weights(old, rollout, 1.0), [0.5, 1.0, 1.0])


# --------------------------------------------------------------------------- reductions
def test_aggregate_modes():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    # per sample: (1+2+3)/3 = 2 and 10/1 = 10 -> mean over samples (2+10)/2 = 6
    close(aggregate(x, m, "seq_mean_token_mean"), 6.0)
    # all masked tokens: (1+2+3+10)/4 = 4
    close(aggregate(x, m, "token_mean"), 4.0)
    # A third sample with no trained tokens contributes 0 and still counts: (2+10+0)/3 = 4
    x3 = torch.cat([x, torch.tensor([[5.0, 5.0, 5.0, 5.0]])])
    m3 = torch.cat([m, torch.zeros(1, 4)])
    close(aggregate(x3, m3, "seq_mean_token_mean"), 4.0)


def test_aggregate_micro_batches_sum_to_the_full_batch():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    # seq mean with global num_samples = 2: 2/2 + 10/2 = 6 (the full-batch value)
    parts = [aggregate(x[i:i + 1], m[i:i + 1], "seq_mean_token_mean", num_samples=2) for i in range(2)]
    close(sum(parts), 6.0)
    # token mean with global num_tokens = 4: 6/4 + 10/4 = 4
    parts = [aggregate(x[i:i + 1], m[i:i + 1], "token_mean", num_tokens=4) for i in range(2)]
    close(sum(parts), 4.0)


def test_aggregate_of_a_packed_row_is_the_padded_batch_s():
    # The padded batch of test_aggregate_modes, packed into one row: sample 0's 4 positions, sample 1's
    # 2 (its padding gone), then a position of no sample (-1) whose value must not count.
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 99.0]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]])
    seg = torch.tensor([[0, 0, 0, 0, 1, 1, -1]])
    # per sample: (1+2+3)/3 = 2 and 10/1 = 10 -> (2+10)/2 = 6, as padded (not 116/5 over the row)
    close(aggregate(x, m, "seq_mean_token_mean", segments=seg), 6.0)
    close(aggregate(x, m, "seq_mean_token_mean", num_samples=4, segments=seg), 3.0)  # (2+10)/4
    # token_mean needs no segments: masked tokens of the row, the no-sample one excluded by the mask only,
    # so a packer must never mask a position of no sample: (1+2+3+10)/4 = 4 with that position's mask 0.
    m[0, 6] = 0.0
    close(aggregate(x, m, "token_mean", segments=seg), 4.0)


def test_logprob_mismatch():
    old = torch.tensor([[-1.0, -2.0, -3.0]])
    rollout = torch.tensor([[-1.5, -2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # |diff| = [0.5, 0, 1]; masked mean over the first two = 0.25 (the masked 1.0 is ignored)
    close(logprob_mismatch(old, rollout, mask), 0.25)


def test_entropy_of_known_distributions():
    # uniform over 4: ln 4 = 1.386294
    # p = [0.25, 0.75] (logits ln1, ln3): -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335
    # one-hot-ish (logits 0, -1000): entropy 0 and no NaN from 0 * log 0
    close(entropy_from_logits(torch.zeros(4)), 1.386294)
    close(entropy_from_logits(torch.log(torch.tensor([1.0, 3.0]))), 0.562335)
    close(entropy_from_logits(torch.tensor([0.0, -1000.0])), 0.0)


def test_token_logprobs_uses_temperature():
    logits = torch.log(torch.tensor([[1.0, 3.0]]))
    # T = 1: p(1) = 3/4 -> ln 0.75 = -0.287682
    close(token_logprobs(logits, torch.tensor([1]), 1.0), [-0.287682])
    # T = 2: logits/2 = [0, ln3/2] -> p(1) = sqrt3 / (1 + sqrt3) = 0.633975 -> ln = -0.455746
    close(token_logprobs(logits, torch.tensor([1]), 2.0), [-0.455746])


# --------------------------------------------------------------------------- the micro-batch objective
def test_policy_loss_object_combines_every_term():
    loss_fn = PolicyLoss.from_config(LossConfig(eps_clip=0.2, eps_clip_high=0.28, kl_coef=0.5, kl_estimator="k1",
                                                entropy_coef=0.1, aggregation="token_mean", tis=True,
                                                tis_clip_high=2.0))
    assert loss_fn == PolicyLoss(eps_clip=0.2, eps_clip_high=0.28, dual_clip_c=None, kl_coef=0.5, kl_estimator="k1",
                                 entropy_coef=0.1, aggregation="token_mean", tis=True, tis_clip_high=2.0)
    logp = torch.log(torch.tensor([[1.5, 1.1, 0.9]])).requires_grad_()
    ent = torch.tensor([[1.0, 2.0, 5.0]], requires_grad=True)
    batch = SimpleNamespace(
        mask=torch.tensor([[1.0, 1.0, 0.0]]), advantages=torch.ones(1, 3), old_logp=torch.zeros(1, 3),
        rollout_logp=torch.tensor([[math.log(2.0), -math.log(3.0), 0.0]]), ref_logp=torch.zeros(1, 3))
    # The micro-batch is part of a mini-batch with 4 trained tokens: every term is a sum over 4.
    loss, sums = loss_fn(logp, lambda: ent * 1.0, batch, num_samples=3, num_tokens=4)
    # rho = exp(logp - old) = [1.5, 1.1, 0.9]; TIS w = exp(old - rollout) = [0.5, 3 -> clamped 2, 1].
    # token 0: max(-1.5, -1.28) = -1.28 (clipped), * w 0.5 = -0.64; token 1: -1.1 * w 2 = -2.2;
    # token 2 is masked. pg_loss = (-0.64 - 2.2) / 4 = -0.71.
    # KL k1 vs ref 0 = logp: ln 1.5 + ln 1.1 = ln 1.65 = 0.500775 -> 0.5 * 0.500775 / 4 = 0.062597.
    # entropy (1 + 2) / 4 = 0.75 -> -0.1 * 0.75 = -0.075. loss = -0.71 + 0.062597 - 0.075 = -0.722403.
    close(loss, -0.722403)
    close(sums["loss"], -0.722403)
    close(sums["pg_loss"], -0.71)
    close(sums["kl"], 0.500775)  # token sums from here on
    close(sums["entropy"], 3.0)
    close(sums["clip_frac"], 1.0)
    close(sums["ppo_kl"], -0.500775)  # old - logp = -ln 1.65
    close(sums["mismatch"], math.log(6.0))  # |0 - ln 2| + |0 + ln 3| = ln 6 = 1.791759
    assert set(sums) == set(PolicyLoss.METRICS)
    loss.backward()
    # d/dlogp: token 0 is clipped (pg grad 0), KL adds 0.5 / 4 = 0.125 -> 0.125;
    # token 1: -rho * A * w / 4 = -1.1 * 2 / 4 = -0.55, + 0.125 = -0.425; token 2: masked -> 0.
    close(logp.grad, [[0.125, -0.425, 0.0]])
    # d/d entropy = -0.1 / 4 on trained tokens: the bonus is in the graph.
    close(ent.grad, [[-0.025, -0.025, 0.0]])


def test_policy_loss_object_on_policy_with_defaults():
    loss_fn = PolicyLoss()  # eps 0.2, seq_mean_token_mean, no TIS, no KL, no entropy term
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    grad_mode_of_entropy = []

    def entropy():
        grad_mode_of_entropy.append(torch.is_grad_enabled())
        return torch.tensor([[0.5, 0.7], [0.9, 9.0]])

    batch = SimpleNamespace(
        mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]), advantages=torch.tensor([[2.0, 2.0], [-1.0, -1.0]]),
        rollout_logp=torch.tensor([[-1.5, -2.0], [-0.5, -7.0]]), old_logp=None, ref_logp=None)
    loss, sums = loss_fn(logp, entropy, batch, num_samples=4, num_tokens=3)
    # old_logp None -> rho == 1 -> token loss = -A: sample means -2 and +1 (its 2nd token is masked);
    # seq_mean_token_mean over the mini-batch's 4 samples: (-2 + 1) / 4 = -0.25.
    close(loss, -0.25)
    close(sums["pg_loss"], -0.25)
    close(sums["kl"], 0.0)
    close(sums["clip_frac"], 0.0)
    close(sums["ppo_kl"], 0.0)
    close(sums["entropy"], 2.1)  # 0.5 + 0.7 + 0.9, reported although not in the loss
    close(sums["mismatch"], 0.5)  # |-1 + 1.5| + 0 + 0; the masked |-3 + 7| does not count
    assert grad_mode_of_entropy == [False]  # no graph through the softmax when it is not in the loss
    loss.backward()
    # d/dlogp = -A / (tokens of the sample) / 4: sample 0: -2 / 2 / 4 = -0.25; sample 1: +1 / 1 / 4 = 0.25
    close(logp.grad, [[-0.25, -0.25], [0.25, 0.0]])


# --------------------------------------------------------------------------- GSPO and CISPO
def gspo_case():
    """Two samples: 0 trains 2 tokens with ratios [1.2, 1.5] and A = +1; 1 trains 3 with ratios
    [0.9, 1.1, 1.0] and A = -2 (old logp 0, so logp is the log-ratio)."""
    logp = torch.log(torch.tensor([[1.2, 1.5, 1.0], [0.9, 1.1, 1.0]])).requires_grad_()
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([[1.0] * 3, [-2.0] * 3])
    return logp, mask, adv


def test_gspo_clips_whole_sequences_on_the_sequence_ratio():
    logp, mask, adv = gspo_case()
    loss_fn = PolicyLoss.from_config(LossConfig(objective="gspo", eps_clip=0.2, eps_clip_high=0.28))
    batch = SimpleNamespace(mask=mask, advantages=adv, old_logp=torch.zeros(2, 3), rollout_logp=torch.zeros(2, 3),
                            ref_logp=None)
    loss, sums = loss_fn(logp, lambda: torch.zeros(2, 3), batch, num_samples=2, num_tokens=5)
    # s0 = exp((ln 1.2 + ln 1.5) / 2) = sqrt(1.8) = 1.341641 > 1.28 with A > 0: clipped, loss -1.28
    #   on both its tokens (token PPO would clip only the 1.5 token).
    # s1 = exp(ln(0.9 * 1.1 * 1.0) / 3) = 0.99^(1/3) = 0.996655, inside [0.8, 1.28]: loss -s1 * A = 1.993310.
    # seq_mean_token_mean over 2 samples: (-1.28 + 1.993310) / 2 = 0.356655.
    close(loss, 0.356655)
    close(sums["clip_frac"], 2.0)  # both tokens of sample 0
    close(sums["seq_clip_frac"], 1.0)  # one sequence of two
    loss.backward()
    # sample 0 clipped: no gradient. sample 1: d(-s1 A)/dlogp_t = -A * s1 / 3 = 2 * 0.996655 / 3 = 0.664437,
    # the same for each of its tokens (the sample mean of equal token losses), / 2 samples = 0.332218.
    close(logp.grad, [[0.0, 0.0, 0.0], [0.332218, 0.332218, 0.332218]])


def test_gspo_of_a_packed_row_is_the_padded_batch_s():
    # The two samples of gspo_case end to end in one row, a padding position (-1) between them.
    padded, _, _ = gspo_case()
    logp = torch.cat([padded[0, :2], torch.zeros(1), padded[1]]).detach().unsqueeze(0).requires_grad_()
    segments = torch.tensor([[0, 0, -1, 1, 1, 1]])
    mask, adv = (segments >= 0).float(), torch.tensor([[1.0, 1.0, 0.0, -2.0, -2.0, -2.0]])
    loss, clipped = gspo_loss(logp, torch.zeros(1, 6), adv, mask, 0.2, 0.28, segments=segments)
    total = aggregate(loss, mask, segments=segments)
    close(total, 0.356655)  # as in the padded case above
    close(clipped, [[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    total.backward()
    close(logp.grad, [[0.0, 0.0, 0.0, 0.332218, 0.332218, 0.332218]])


def test_cispo_clips_the_weight_and_keeps_every_gradient():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    old = torch.tensor([-1.5, -2.0, -0.1])
    adv = torch.tensor([1.0, 1.0, -1.0])
    # rho = exp(logp - old) = [e^0.5 = 1.648721 -> 1.28, 1, e^-0.4 = 0.670320 -> 0.8] in [0.8, 1.28].
    loss, clipped = cispo_loss(logp, old, adv, torch.ones(3), eps_clip=0.2, eps_clip_high=0.28)
    # -w * A * logp: -1.28 * 1 * -1 = 1.28; -1 * 1 * -2 = 2; -0.8 * -1 * -0.5 = -0.4
    close(loss, [1.28, 2.0, -0.4])
    close(clipped, [1.0, 0.0, 1.0])
    loss.sum().backward()
    # d/dlogp = -w * A (w is not differentiated): [-1.28, -1, +0.8]. The PPO clip would give 0 at
    # tokens 0 and 2 (clipped on the side of their advantage).
    close(logp.grad, [-1.28, -1.0, 0.8])


def test_cispo_through_the_policy_loss_object():
    loss_fn = PolicyLoss.from_config(LossConfig(objective="cispo", eps_clip=0.2, eps_clip_high=0.28,
                                                aggregation="token_mean"))
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    batch = SimpleNamespace(mask=torch.ones(1, 3), advantages=torch.tensor([[1.0, 1.0, -1.0]]),
                            old_logp=torch.tensor([[-1.5, -2.0, -0.1]]), rollout_logp=torch.zeros(1, 3), ref_logp=None)
    loss, sums = loss_fn(logp, lambda: torch.zeros(1, 3), batch, num_samples=1, num_tokens=3)
    close(loss, (1.28 + 2.0 - 0.4) / 3)  # token_mean of the per-token losses above: 0.96
    close(sums["clip_frac"], 2.0)
    close(sums["seq_clip_frac"], 1.0)
    loss.backward()
    close(logp.grad, [[-1.28 / 3, -1.0 / 3, 0.8 / 3]])


# --------------------------------------------------------------------------- the chunked loss head
def chunked_case(entropy_coef: float):
    """Hidden states [2, 9, 16] of a random LM head over 50 tokens; a loss with every path the
    trainers take (log-probs through a weight, entropy with or without grad)."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 9, 16, generator=g, dtype=torch.float64).float().requires_grad_()
    weight = (torch.randn(50, 16, generator=g) * 0.5).requires_grad_()
    targets = torch.randint(0, 50, (2, 9), generator=g)
    coef = torch.randn(2, 9, generator=g)

    def loss_of(logp, ent):
        return (logp * coef).sum() - entropy_coef * ent.sum()

    return hidden, weight, targets, loss_of


@pytest.mark.parametrize("chunk", [1, 4, 7, 18, 100])
@pytest.mark.parametrize("entropy_coef", [0.0, 0.3])
def test_chunked_scores_equal_the_whole_logits(chunk, entropy_coef):
    """Log-probs, entropy and their gradients (hidden states and head weight) from chunks of positions,
    each chunk's logits recomputed in the backward, against the whole [18, 50] logits at once (fp32,
    1e-6 relative). Chunks of 4 and 7 leave a ragged last chunk; 100 is one chunk."""
    hidden, weight, targets, loss_of = chunked_case(entropy_coef)
    logits = hidden @ weight.t()
    logp_whole = token_logprobs(logits, targets, 0.8)
    ent_whole = entropy_from_logits(logits)
    loss_of(logp_whole, ent_whole).backward()
    grads_whole = hidden.grad.clone(), weight.grad.clone()
    hidden.grad, weight.grad = None, None

    logp, ent = chunked_scores(hidden, lambda rows: rows @ weight.t(), targets, chunk,
                               lambda lg, t: token_logprobs(lg, t, 0.8), entropy_from_logits,
                               entropy_grad=entropy_coef != 0.0)
    assert logp.shape == targets.shape and ent.shape == targets.shape
    assert ent.requires_grad == (entropy_coef != 0.0)  # a metric only: no graph through the softmax
    torch.testing.assert_close(logp, logp_whole, rtol=1e-6, atol=0)
    torch.testing.assert_close(ent, ent_whole, rtol=1e-6, atol=0)
    loss_of(logp, ent if entropy_coef else ent.detach()).backward()
    for mine, whole in zip((hidden.grad, weight.grad), grads_whole):
        assert (mine - whole).abs().max() <= 1e-6 * whole.abs().max()


def test_chunked_scores_never_keep_the_whole_logits_for_the_backward():
    """What autograd keeps for the backward of the chunked head: no [positions, vocab] tensor at all
    (each chunk's logits are recomputed when its backward runs), where the whole head keeps its logits."""
    hidden, weight, targets, _ = chunked_case(0.0)
    kept: list[tuple[int, ...]] = []

    def pack(t):
        kept.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        whole = token_logprobs(hidden @ weight.t(), targets)
    assert any(shape[-1] == 50 for shape in kept)  # the whole head does keep [.., 50] logits
    kept.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = chunked_scores(hidden, lambda rows: rows @ weight.t(), targets, 4, token_logprobs)
    assert kept and not any(shape and shape[-1] == 50 for shape in kept), kept
    logp.sum().backward()  # and the recompute in the backward gives the whole head's gradient
    torch.testing.assert_close(logp, whole, rtol=1e-6, atol=0)


def test_chunked_scores_without_grad_and_bad_chunk():
    hidden, weight, targets, _ = chunked_case(0.0)
    with torch.no_grad():
        logp, ent = chunked_scores(hidden, lambda rows: rows @ weight.t(), targets, 5, token_logprobs)
        torch.testing.assert_close(logp, token_logprobs(hidden @ weight.t(), targets), rtol=1e-6, atol=0)
    assert ent is None and not logp.requires_grad
    with pytest.raises(ValueError, match="chunk_tokens must be >= 1"):
        chunked_scores(hidden, lambda rows: rows @ weight.t(), targets, 0, token_logprobs)
