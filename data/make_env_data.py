"""Generate the bundled environments' datasets: `python data/make_env_data.py`.

data/lookup/train.jsonl: the same prompt on every row, each with a hidden secret digit
(only the lookup tool shows it), one of LOOKUP_SECRETS. data/counter/train.jsonl: a target
of 1-3 calls.
"""

import json
import random
from pathlib import Path

ROWS, SEED = 2000, 1234
LOOKUP_SECRETS = 2
"""Two digits: a policy that looks up and guesses scores 0.65, below the success level (0.8); with
4 or 10 the random tiny model did not learn the copy within 300 steps (tandem/envs/lookup.py)."""


def main() -> None:
    rng = random.Random(SEED)
    here = Path(__file__).parent
    with open(here / "lookup" / "train.jsonl", "w") as f:
        for _ in range(ROWS):
            f.write(json.dumps({"prompt": "secret?", "secret": str(rng.randrange(LOOKUP_SECRETS))}) + "\n")
    with open(here / "counter" / "train.jsonl", "w") as f:
        for _ in range(ROWS):
            target = rng.randint(1, 3)
            f.write(json.dumps({"prompt": f"count to {target}", "target": target}) + "\n")
    print(f"wrote {ROWS} rows each to {here / 'lookup'} and {here / 'counter'}")


if __name__ == "__main__":
    main()
