"""The embedded engine serving a tiny Qwen3-MoE model, against the parts of the SGLang conformance suite
(tests/engine_conformance.py) that a mixture-of-experts model changes: the routed-experts fields of
/generate (SGLang's return_routed_experts), the logprobs against one HF forward, and weight updates
from checkpoints whose experts are stored one by one (the HF and SGLang layout the trainer publishes);
directly and through a real sglang-router."""

from __future__ import annotations

from engine_conformance import (engine_proc, eng, router_url, test_logprobs_match_hf_forward,  # noqa: F401
                                test_routed_experts, test_update_weights_from_disk)

ENGINE_BACKEND = "embedded"
ENGINE_MODEL = {"tiny": {"num_experts": 4, "num_experts_per_tok": 2}}
ENGINE_EXTRA_CAPS = {"moe"}
