"""The embedded engine serving a tiny Qwen3-MoE model, against the parts of the SGLang conformance suite
(tests/engine_conformance.py) that a mixture-of-experts model changes: the routed-experts fields of
/generate (SGLang's return_routed_experts), the logprobs against one HF forward, and weight updates
from checkpoints whose experts are stored one by one (the HF and SGLang layout the trainer publishes);
directly and through a real sglang-router."""

from __future__ import annotations

from engine_conformance import (engine_proc, eng, router_url, sglang_server,  # noqa: F401
                                test_logprobs_match_hf_forward, test_routed_experts, test_update_weights_from_disk)

ENGINE_BACKEND = "embedded"
ENGINE_MODEL = {"tiny": {"num_experts": 4, "num_experts_per_tok": 2}}
ENGINE_EXTRA_CAPS = {"moe"}


def test_rollout_client_gets_routed_experts_past_the_real_router(router_url, engine_proc):
    """The router's real worker list (GET /workers) names the engine, and the rollout client with
    trainer.moe's routing asked gets the routed experts the router itself would have dropped."""
    import asyncio

    from tandem.moe import decode_routed_experts
    from tandem.rollout.client import EngineClient
    from tandem.rollout.direct import router_workers

    async def run():
        assert await router_workers(router_url)() == [engine_proc.url]
        client = EngineClient(router_url, 4, 60)
        client.ask_routed_experts(router_workers(router_url))
        try:
            return await client.generate([40, 41, 42, 43], {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True},
                                         routing_key="trajectory-1")
        finally:
            await client.close()

    out = asyncio.run(run())
    rows = 4 + len(out["output_ids"]) - 1
    assert decode_routed_experts(out["meta_info"]["routed_experts"], rows).shape == (rows, 2 * 2)
