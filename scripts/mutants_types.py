"""The `types` set of scripts/mutate.py: the type checker over tandem/ (tests/test_types.py) catches a
signature that names the wrong config, a None passed where a value is needed, a protocol left unmet."""

T = "tests/test_types.py::test_mypy_finds_no_error_in_tandem"
TYPES = [
 ("the trainer's backend typed with the whole config, not its view", "tandem/trainer/__main__.py",
  [("from tandem.config import TRAINER_VIEW, read_view", "from tandem.config import TRAINER_VIEW, TandemConfig, read_view"),
   ("def make_backend(cfg: TrainerView) -> TrainerBackend:", "def make_backend(cfg: TandemConfig) -> TrainerBackend:")],
  None, T),
 ("agent-reloaded engines polled with a client that may be None", "tandem/weights/reload.py",
  "answers = await asyncio.gather(*(engine_serves(client, url, version, lora) for url in pending))",
  "answers = await asyncio.gather(*(engine_serves(http, url, version, lora) for url in pending))", T),
 ("the virtual trainer without the TrainerLink's checkpoint_only", "tandem/lab/inprocess.py",
  "    async def checkpoint_only(self, step: int, samples: list[Sample], reason: str) -> TrainResult:",
  "    async def checkpoint_only_unused(self, step: int, samples: list[Sample], reason: str) -> TrainResult:", T),
]
