"""tandem's launcher and training loop, as one command.

    python train.py                          # the default CPU job (tiny model, echo task)
    python train.py --engines 3 --mode async # an 8-GPU node: trainer on 0-3, engines on 4-6
    python train.py --help                   # every config key
    python train.py --resume runs/NAME       # continue a run from its latest checkpoint

Same as `tandem train ...` once the project is installed (`pip install -e .`). The launcher
lives in tandem/orchestrator/launcher.py (imported only past --help: tandem/orchestrator/train_command.py),
the loop (sync and async are one loop) in tandem/orchestrator/loop.py.
"""

from tandem.orchestrator.train_command import command

if __name__ == "__main__":
    command()
