"""tandem's performance lab: what a run would do, measured without the hardware.

- sim/             latency, scheduler and workload models of SGLang engines (pure Python)
- sim_engine.py    the sim engine: an EngineCore whose outputs cost model time (engine.backend = "sim")
- sim_trainer.py   the timed trainer stand-in (trainer.backend = "sim")
- inprocess.py     sim engines, router and trainer in one process on a virtual clock
- virtual.py       the whole launcher loop over them (`python -m tandem.lab.virtual`)
- plan/            the memory and fit planner (`python -m tandem.lab.plan`)
- rehearse.py      a node's run rehearsed on the sim engine (`python -m tandem.lab.rehearse`)

The core never imports this package: it finds the sim engine, the sim trainer and the planner
by name through tandem.registry.
"""
