"""Held-out evaluation pinned to weight versions, and the learning alarms.

- heldout.py  the held-out prompts: eval.data_path, or a seeded split of the training data
- measure.py  one evaluation: the run's own rollout function on the held-out prompts at one weight
              version, at the lowest request priority; eval/reward_mean, eval/pass@1, eval/pass@k
- in_run.py   when the run evaluates (every k steps, before the first, after the last, again at a
              resume point) and how it stays out of training's way; eval.jsonl and eval/step_N.json
- alarms.py   entropy collapse, KL spike, response-length collapse or blow-up, tampering, training
              reward rising while evaluation falls: alarm/* metrics ([alarms], run.stop_on_alarm)

`tandem eval RUN_DIR` (evaluating published versions after a run) starts engines, so it lives with
the processes: tandem.orchestrator.eval_command.
"""
