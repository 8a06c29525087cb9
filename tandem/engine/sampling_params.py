"""A request's `sampling_params`, read as SGLang 0.5.23 reads them.

SGLang checks every /generate body against its JSON contract (sglang/api/v1) before anything else: a
sampling field it does not know is refused (`unknown field `x`, expected one of ...`), and so is a value of
the wrong JSON type (a string for a number, a float for an integer, anything but true/false for a flag),
with a 400 whose body is {"error": "<that text>"}. The embedded engine refuses the same requests, so a
client that only ever met the embedded engine cannot send something a real server rejects.
Values of the right type that make no sense (a negative temperature) are SGLang's later ValueError, a 400
with {"error": {"message": ...}} (tandem.engine.http.common answers each in its shape).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# SGLang's default when a request names no max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 128

SGLANG_SAMPLING_FIELDS = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
    "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "stream_interval", "logit_bias", "sampling_seed", "custom_params", "beam_width", "watermark", "choice")
"""Every sampling_params field SGLang 0.5.23 accepts, in the order its refusal lists them."""


class InvalidRequest(ValueError):
    """Bad client input; the HTTP layer answers 400 with this message."""


class ContractError(InvalidRequest):
    """The body breaks SGLang's JSON contract (an unknown field, a value of the wrong JSON type)."""


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, (int, float)):
        return f"number `{value}`"
    if isinstance(value, str):
        return f"string {value!r}"
    return "a sequence" if isinstance(value, list) else "a map" if isinstance(value, dict) else "null"


def _typed(name: str, value: Any, kind: type) -> Any:
    """`value` as `kind` when its JSON type is one SGLang takes for it (an int is a number; no bool is)."""
    if isinstance(value, bool):
        ok = kind is bool
    else:
        ok = isinstance(value, (int, float) if kind is float else kind)
    if not ok:
        expected = {int: "an integer", float: "a number", bool: "a boolean", str: "a string"}[kind]
        raise ContractError(f"sampling_params.{name}: invalid type: {_json_kind(value)}, expected {expected}")
    return kind(value)


def _typed_list(name: str, value: Any, kind: type) -> list:
    if not isinstance(value, list):
        raise ContractError(f"sampling_params.{name}: invalid type: {_json_kind(value)}, expected a sequence")
    return [_typed(name, v, kind) for v in value]


def check_known_fields(d: dict[str, Any]) -> None:
    """SGLang's refusal of the first field it does not know, word for word."""
    for key in d:
        if key not in SGLANG_SAMPLING_FIELDS:
            listed = ", ".join(f"`{f}`" for f in SGLANG_SAMPLING_FIELDS)
            raise ContractError(f"unknown field `{key}`, expected one of {listed}")


@dataclass
class SamplingParams:
    """The subset of SGLang's `sampling_params` that tandem's cores honour (names as SGLang)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    seed: int | None = None
    """SGLang's `sampling_seed`: the row's sampling noise at output position t is drawn from a generator
    seeded with (seed, t) alone, so the same request samples the same tokens whatever else shares its
    batch (tandem.engine.sampling.seeded_noise). None: the engine's own stream."""

    # SGLang knobs tandem's cores do not implement: accepted at their neutral value (sglang-router
    # and clients send them), refused otherwise so a request is never silently decoded differently.
    NEUTRAL = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0, "min_new_tokens": 0}
    UNSUPPORTED = ("json_schema", "regex", "ebnf", "structural_tag", "custom_params", "logit_bias", "stop_regex",
                   "beam_width", "watermark", "choice")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, *, vocab_size: int | None = None) -> "SamplingParams":
        """Validate a client's sampling_params dict; raises InvalidRequest naming the bad field."""
        d = dict(d or {})
        check_known_fields(d)
        p = cls()
        p._read_fields(d)
        for name in cls.UNSUPPORTED:
            if d.get(name):
                raise InvalidRequest(f"sampling_params.{name} is not supported by this engine")
        p._check_ranges(vocab_size)
        return p

    def _read_fields(self, d: dict[str, Any]) -> None:
        """Copy the fields present in `d` (null: SGLang's default), each of the JSON type SGLang takes."""
        present = {k: v for k, v in d.items() if v is not None}
        for name, kind in (("temperature", float), ("top_p", float), ("top_k", int), ("min_p", float),
                           ("max_new_tokens", int), ("n", int), ("ignore_eos", bool), ("skip_special_tokens", bool),
                           ("spaces_between_special_tokens", bool), ("no_stop_trim", bool)):
            if name in present:
                setattr(self, name, _typed(name, present[name], kind))
        if "stop" in present:
            stop = present["stop"]
            self.stop = [stop] if isinstance(stop, str) else _typed_list("stop", stop, str)
        if "stop_token_ids" in present:
            self.stop_token_ids = _typed_list("stop_token_ids", present["stop_token_ids"], int)
        if "sampling_seed" in present:
            self.seed = _typed("sampling_seed", present["sampling_seed"], int)
        if "stream_interval" in present:  # how often a stream reports: tokens are the same either way
            _typed("stream_interval", present["stream_interval"], int)
        for name, neutral in self.NEUTRAL.items():
            if name in present and _typed(name, present[name], float) != neutral:
                raise InvalidRequest(f"sampling_params.{name} = {d[name]} is not supported by this engine "
                                     f"(only the neutral value {neutral})")

    def _check_ranges(self, vocab_size: int | None) -> None:
        if self.temperature < 0:
            raise InvalidRequest(f"sampling_params.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequest(f"sampling_params.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise InvalidRequest(f"sampling_params.top_k must be -1 (disabled) or >= 1, got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise InvalidRequest(f"sampling_params.min_p must be in [0, 1], got {self.min_p}")
        if self.max_new_tokens < 0:
            raise InvalidRequest(f"sampling_params.max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.n != 1:
            raise InvalidRequest("sampling_params.n > 1 is not supported; send n separate requests")
        if vocab_size is not None and any(not 0 <= t < vocab_size for t in self.stop_token_ids):
            raise InvalidRequest(f"sampling_params.stop_token_ids must be in [0, {vocab_size})")

    @property
    def greedy(self) -> bool:
        # SGLang treats very small temperatures as greedy too.
        return self.temperature < 1e-6 or self.top_k == 1


__all__ = ["ContractError", "DEFAULT_MAX_NEW_TOKENS", "InvalidRequest", "SGLANG_SAMPLING_FIELDS", "SamplingParams",
           "check_known_fields"]
