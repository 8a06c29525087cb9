"""Fakes at the edge for the harness tests: an engine client answering /generate from a script."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from tandem.config import TandemConfig
from tandem.rollout import REQUEST_PRIORITY, RolloutContext, sampling_params_from_config
from tests._fakes import fake_logprob
from tests._swe import REPO, tiny_tokenizer


class ScriptedClient:
    """EngineClient.generate's shape: `reply(prompt text, call number)` is the model's text; its ids
    (+ eos) come back with position-dependent log-probs and `version`."""

    def __init__(self, reply: Callable[[str, int], str], version: int = 2):
        self.tok, self.reply, self.version = tiny_tokenizer(), reply, version
        self.requests: list[dict] = []

    async def generate(self, input_ids, sampling_params, return_logprob=True, routing_key=None) -> dict:
        self.requests.append({"input_ids": list(input_ids), "params": dict(sampling_params), "key": routing_key,
                              "priority": REQUEST_PRIORITY.get()})
        text = self.reply(self.tok.decode(input_ids, skip_special_tokens=False), len(self.requests))
        out = list(self.tok.encode(text, add_special_tokens=False)) + [self.tok.eos_token_id]
        return {"text": text, "output_ids": out, "meta_info": {
            "finish_reason": {"type": "stop"}, "weight_version": str(self.version),
            "output_token_logprobs": [[fake_logprob(t, len(input_ids) + k), t, None] for k, t in enumerate(out)]}}


def harness_cfg(tmp_path, **rollout) -> TandemConfig:
    return TandemConfig.model_validate({"run": {"run_dir": str(tmp_path / "run"), "cache_dir": str(REPO / ".cache" / "tandem")},
                                        "rollout": rollout})


def harness_ctx(cfg: TandemConfig, engine, reward_fn=None) -> RolloutContext:
    return RolloutContext(cfg, tiny_tokenizer(), engine, ThreadPoolExecutor(4), reward_fn,
                          sampling_params_from_config(cfg))
