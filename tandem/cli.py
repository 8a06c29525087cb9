"""The `tandem` command: one entry point for the project's processes.

    tandem train [ARGS]    the launcher (= python train.py ARGS)
    tandem engine [ARGS]   tandem's own engine server (= python -m tandem.engine ARGS)
    tandem inspect RUN_DIR one HTML page of a run: curves, queues, trajectories (= python -m tandem.inspect)
    tandem eval RUN_DIR    evaluate a run's weight versions on its held-out prompts (--version N | --all)
"""

from __future__ import annotations

import sys

from tandem import registry

USAGE = __doc__.split("\n\n", 1)[1]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command in registry.COMMANDS:  # imported on demand: `tandem train` loads no engine
        return registry.load(registry.COMMANDS[command])(rest) or 0
    if command in ("-h", "--help"):
        print(f"usage:\n{USAGE}")
        return 0
    print(f"tandem: unknown command {command!r}\nusage:\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
