"""Autoscaling the inference fleet during a run ([engine.autoscale]): the policy
(tandem.autoscale.policy), who starts and stops engines (tandem.autoscale.providers) and the
controller the loop calls after every step (tandem.autoscale.controller)."""

from tandem.autoscale.policy import Decision, Policy, Signals, StepModel, TargetPolicy

__all__ = ["Decision", "Policy", "Signals", "StepModel", "TargetPolicy"]
