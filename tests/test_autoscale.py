"""The autoscaling policy with hand-derived inputs (tandem.autoscale.policy), thrash included, and
the [engine.autoscale] config rules."""

from __future__ import annotations

import json

import pytest

from tandem.autoscale import Signals, StepModel, TargetPolicy
from tandem.config import ConfigError, load_config
from tandem.config.autoscale_section import AutoscaleConfig


def policy(**kw) -> TargetPolicy:
    base = dict(enabled=True, min=1, max=4, target_idle_ratio=0.15, hysteresis=0.1, cooldown_steps=2,
                max_change=1, window_steps=1)
    return TargetPolicy(AutoscaleConfig(**{**base, **kw}))


def signals(step: int, engines: int, rollout: float, train: float = 4.0, longest: float = 2.0, mode: str = "async",
            **kw) -> Signals:
    """A step as the loop measures it: async step = max(train, rollout), idle = (step - train) / step."""
    step_time = max(train, rollout) if mode == "async" else rollout + train
    idle = (step_time - train) / step_time
    return Signals(step=step, engines=engines, step_time=step_time, rollout_time=rollout, train_time=train,
                   trainer_idle_ratio=idle, longest_group_s=longest, mode=mode, **kw)


def test_the_step_model_by_hand():
    model = StepModel(window=2)
    model.observe(signals(0, 1, rollout=10.0))   # work 10 engine-s
    model.observe(signals(1, 2, rollout=6.0))    # work 12 engine-s -> mean 11
    assert (model.work, model.straggler, model.train) == (11.0, 2.0, 4.0)
    assert [model.step(n, "async") for n in (1, 2, 3, 4, 6)] == [11.0, 5.5, 4.0, 4.0, 4.0]  # max(train, 11/n, 2)
    assert model.step(2, "sync") == 9.5 and model.step(8, "sync") == 6.0                 # 11/n (or 2) + 4
    assert model.idle(2, "async") == pytest.approx(1.5 / 5.5) and model.idle(3, "async") == 0.0
    model.observe(signals(2, 4, rollout=0.5))    # work 2 engine-s, but no group runs under 2 s
    assert model.rollout(4) == 2.0


def test_scales_up_to_what_meets_the_target_one_step_at_a_time():
    # 1 engine: work 10, train 4 -> idle(1) 0.6, idle(2) (5-4)/5 = 0.2, idle(3) = 0: 3 meets 0.15
    d = policy().decide(signals(0, 1, rollout=10.0))
    assert d.engines == 2 and d.reason.startswith("up to 2:") and "3 predicted" in d.reason  # max_change 1
    assert d.predicted_step_s == {1: 10.0, 2: 5.0, 3: 4.0, 4: 4.0}
    assert policy(max_change=3).decide(signals(0, 1, rollout=10.0)).engines == 3
    assert policy(max=2).decide(signals(0, 1, rollout=10.0)).engines == 2  # nothing meets it: the most allowed


def test_scales_down_only_when_a_smaller_fleet_stays_inside_the_target():
    # 4 engines, work 10 (2.5 s each), train 4: trainer-bound, idle 0. idle(3) = 0 <= 0.15 - 0.1; idle(2) = 0.2
    assert policy().decide(signals(0, 4, rollout=2.5)).engines == 3
    assert policy(max_change=2).decide(signals(0, 4, rollout=2.5)).engines == 3  # 2 would miss the target
    held = policy().decide(signals(0, 4, rollout=2.5, waiting=5))
    assert held.engines == 4 and "5 request(s) wait" in held.reason
    assert policy().decide(signals(0, 4, rollout=2.5, kv_usage=0.95)).engines == 4


def test_no_thrash_inside_the_band_or_during_the_cooldown():
    p = policy()
    # idle wanders between 0.1 and 0.24 on 2 engines: never past 0.25 (target + hysteresis), and one
    # engine would leave the trainer waiting 55-60% of the step: hold, every step.
    for step, rollout in enumerate([5.0, 4.44, 5.26, 4.6, 5.2, 4.5]):
        d = p.decide(signals(step, 2, rollout=rollout))
        assert d.engines == 2 and d.reason.startswith("hold"), (step, d.reason)
    # A burst: idle 0.6 -> up to 3; the next two steps hold whatever they show (cooldown 2) ...
    assert p.decide(signals(6, 2, rollout=10.0)).engines == 3
    for step in (7, 8):
        d = p.decide(signals(step, 3, rollout=1.0))
        assert d.engines == 3 and "cooling down" in d.reason
    # ... then the quiet phase (work 3: idle 0 on any fleet) takes engines away, one per cooldown.
    assert p.decide(signals(9, 3, rollout=1.0)).engines == 2
    assert p.decide(signals(10, 2, rollout=1.5)).engines == 2  # cooling down again
    assert p.decide(signals(12, 2, rollout=1.5)).engines == 1


def test_a_step_time_target_in_sync_mode():
    p = policy(target="step_time", target_step_time_s=6.0, max_change=4)
    # sync: step(N) = max(10/N, 2) + 2 -> 12, 7, 5.33, 4.5: three engines hold 6 s
    d = p.decide(signals(0, 1, rollout=10.0, train=2.0, mode="sync"))
    assert d.engines == 3 and d.predicted_step_s[2] == 7.0


def test_config_rules_name_the_keys():
    on = ["--engine.autoscale.enabled", "true"]
    with pytest.raises(ConfigError, match="engine.autoscale.min = 3 is above engine.autoscale.max = 2"):
        load_config(on + ["--engine.autoscale.min", "3", "--engine.autoscale.max", "2"])
    with pytest.raises(ConfigError, match="engine.count = 5 .* within engine.autoscale.min = 1 and .*max = 4"):
        load_config(on + ["--engine.count", "5"])
    with pytest.raises(ConfigError, match="run.mode = 'sync'.*target = 'step_time'"):
        load_config(on + ["--run.mode", "sync"])
    with pytest.raises(ConfigError, match="provider = 'command' needs engine.autoscale.command"):
        load_config(on + ["--engine.autoscale.provider", "command"])
    assert load_config(on).engine.autoscale.enabled and not load_config([]).engine.autoscale.enabled


def test_growing_demand_is_met_for_the_next_step_not_the_last():
    # Rollout work per step 273 then 661 engine-s on 1 engine, train 310 (the bench's ramp).
    # Least-squares slope over (10, 273), (11, 661) = 388/step -> next step's work 661 + 388 = 1049.
    model = StepModel(window=2)
    model.observe(signals(10, 1, rollout=273.0, train=310.0))
    model.observe(signals(11, 1, rollout=661.0, train=310.0))
    assert model.work == 467.0 and model.work_ahead == 1049.0
    model.observe(signals(12, 1, rollout=300.0, train=310.0))   # falling: never projected below the last
    assert model.work_ahead == 300.0
    # Measured idle over the window, time-weighted: (0 * 310 + 351/661 * 661) / 971 = 0.3615, past 0.1 + 0.05.
    # For 1049: idle(2) = (524.5 - 310) / 524.5 = 0.41, idle(3) = (349.7 - 310) / 349.7 = 0.113, idle(4) = 0.
    p = policy(window_steps=2, max_change=3, target_idle_ratio=0.1, hysteresis=0.05)
    assert p.decide(signals(10, 1, rollout=273.0, train=310.0)).engines == 1
    d = p.decide(signals(11, 1, rollout=661.0, train=310.0))
    assert d.engines == 4 and d.reason.startswith("up to 4:") and "4 predicted to meet it" in d.reason
    # Sized for the window's mean work (467) instead, 2 engines would have looked enough: 233.5 < 310.
    assert p.model.step(2, "async") == 310.0


def test_alternating_async_steps_are_judged_over_the_window():
    # Async steps alternate long and short. Alone, the long one (idle 0.2) is past 0.1 + 0.05; over the
    # window it is (0.2 * 5 + 0 * 4) / 9 = 0.111, inside the band: hold.
    p = policy(window_steps=2, target_idle_ratio=0.1, hysteresis=0.05)
    assert p.decide(signals(1, 2, rollout=3.0)).engines == 2
    d = p.decide(signals(2, 2, rollout=5.0))
    assert d.engines == 2 and d.reason.startswith("hold") and "+0.01 from the target" in d.reason
    assert policy(window_steps=1, target_idle_ratio=0.1, hysteresis=0.05).decide(signals(2, 2, rollout=5.0)).engines == 3


def test_a_size_measured_before_at_the_same_demand_is_believed_over_the_model():
    # 4 engines, rollout 210 s for 1100 tokens (latency-bound), train 310. The throughput model
    # (work 840 engine-s) says 1 engine needs 840 s, 2 need 420 (idle 0.26): only 3 fit.
    alone = policy(window_steps=1, max_change=3, target_idle_ratio=0.1, hysteresis=0.05)
    assert alone.decide(signals(2, 4, rollout=210.0, train=310.0, tokens=1100)).engines == 3
    # Earlier the run measured 1 engine at 1000 tokens for three steps in a row (settled): 250 s.
    # Scaled to 1100 tokens, 275 s < 310: idle 0 on one engine, so the fleet drops to 1 (4 - max_change 3).
    p = policy(window_steps=1, max_change=3, target_idle_ratio=0.1, hysteresis=0.05)
    for step in (1, 2, 3):
        assert p.decide(signals(step, 1, rollout=250.0, train=310.0, tokens=1000)).engines == 1
    assert [s.step for s in p.model.memory] == [3]     # steps 1 and 2 had no settled size behind them
    d = p.decide(signals(4, 4, rollout=210.0, train=310.0, tokens=1100))
    assert d.engines == 1 and d.reason.startswith("down to 1:")
    assert p.model.remembered_rollout(1) == pytest.approx(275.0) and p.model.remembered_rollout(2) is None
    assert p.model.remembered_rollout(4) is None       # the first step on 4 engines is not a measurement of 4
    # At twice the demand, that measurement no longer applies.
    assert policy().model.remembered_rollout(1) is None
    p.model.observe(signals(5, 4, rollout=420.0, train=310.0, tokens=2200))
    assert p.model.remembered_rollout(1) is None


def test_a_smaller_fleet_by_the_latency_model():
    # A decode step takes 10 ms + 1 ms per request (a stand-in for the sim's latency model). The
    # step measured 8 requests on 4 engines, 2 each: 12 ms. On 2 engines, 4 each: 14 ms, so the
    # 240 s rollout takes 240 * 14/12 = 280 s < the 310 s of training: idle 0. On 1 engine, 18 ms:
    # 360 s, idle 50/360 = 0.14, past 0.1 - 0.05. So 4 -> 2 (max_change 3).
    cfg = AutoscaleConfig(enabled=True, min=1, max=4, target_idle_ratio=0.1, hysteresis=0.05, window_steps=1,
                          max_change=3)
    p = TargetPolicy(cfg, lambda batch, kv: 0.010 + 0.001 * batch)
    d = p.decide(signals(1, 4, rollout=240.0, train=310.0, requests_mean=8.0, context_tokens_mean=100.0))
    assert d.engines == 2 and d.reason.startswith("down to 2:")
    assert p.model.latency_rollout(1) == pytest.approx(360.0) and d.predicted_step_s[2] == pytest.approx(310.0)
    # The throughput model alone (work 960 engine-s, split evenly) would only let 3 go: 320 s, 480 s on 2.
    assert TargetPolicy(cfg).decide(signals(1, 4, rollout=240.0, train=310.0, requests_mean=8.0)).engines == 3
    # A size whose engines could not hold the batch (past KV or running capacity: an infinite step)
    # is left out of the predictions, and the decision stays plain JSON.
    full = TargetPolicy(cfg, lambda batch, kv: float("inf") if batch > 4 else 0.010 + 0.001 * batch)
    d = full.decide(signals(1, 4, rollout=240.0, train=310.0, requests_mean=8.0, context_tokens_mean=100.0))
    assert d.engines == 2 and sorted(d.predicted_step_s) == [2, 3, 4]
    json.dumps(d.to_json(), allow_nan=False)
