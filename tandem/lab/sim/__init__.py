"""tandem's performance lab: a latency model of one SGLang engine, workload models, profiles.

Everything here is pure Python (no torch) so the sim engine starts fast and the models can be
unit-tested with hand-computed numbers. The HTTP-facing engine lives in `tandem.lab.sim_engine`,
the timed trainer stand-in in `tandem.lab.sim_trainer`.

- profiles.py      engine and workload profiles (TOML) and their distributions
- latency.py       prefill / decode / reload time of one engine
- scheduler.py     SGLang's scheduler in model time (`SimScheduler`), with its parts in
                   sched_types.py (requests, phases), prefix_cache.py and busy.py (busy time)
- workload.py      the workload-driven agentic rollout plug-in
- predict.py       one rollout batch on N engines in pure virtual time (`python -m tandem.lab.sim.predict`)
- sweep.py         bench/scaling.py's lower-bound arithmetic on a run's trace
"""
