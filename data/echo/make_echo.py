"""Generate the default echo task: `python data/echo/make_echo.py` writes train.jsonl.

Each prompt shows a digit; the answer is that digit repeated `length` times. It is small
enough that a random-init tiny model learns it by RL on two CPU cores in minutes, and it
needs the prompt (attention), not just a fixed output, to score well.
"""

import json
import random
from pathlib import Path

ROWS, LENGTH, SEED = 2000, 8, 1234


def main() -> None:
    rng = random.Random(SEED)
    out = Path(__file__).with_name("train.jsonl")
    with open(out, "w") as f:
        for _ in range(ROWS):
            digit = str(rng.randrange(10))
            f.write(json.dumps({"prompt": f"{digit}=", "label": digit, "length": LENGTH}) + "\n")
    print(f"wrote {ROWS} rows to {out}")


if __name__ == "__main__":
    main()
