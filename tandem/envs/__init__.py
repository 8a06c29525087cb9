"""Bundled tool-use environments that a random tiny model learns on a CPU (configs/lookup.toml,
configs/counter.toml). Each needs credit carried across turns: the reward comes at the end,
and only tool calls made turns earlier make it reachable."""
