"""tandem's performance lab: a latency model of one SGLang engine, workload models, profiles.

Everything here is pure Python (no torch) so the sim engine starts fast and the models can be
unit-tested with hand-computed numbers. The HTTP-facing engine lives in `tandem.engine.sim`,
the timed trainer stand-in in `tandem.trainer.sim_backend`.
"""
