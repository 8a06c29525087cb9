"""A model's shape, read from its HF config.json without any weights, and its parameter counts.

Where the config comes from (`load_shape`): "tiny" is tandem's locally built model
(model.tiny); a local directory is read from its config.json; a hub id is looked up first in
model_configs/ beside this file (the published config.json of the models tandem plans for,
so the planner and its tests run offline), then through `transformers.AutoConfig`, which
fetches config.json only.

Parameter counts (h hidden, q = heads x head_dim, kv = kv_heads x head_dim, f intermediate,
V vocab, per layer):
    attention   h.q + 2.h.kv + q.h            (q/k/v/o projections; GQA: kv < q)
    q/k norm    2.head_dim                    (Qwen3: RMSNorm over each head's q and k)
    MLP         3.h.f (SwiGLU gate/up/down)  or  2.h.f (GeLU)
    norms       2.h (RMSNorm)  or  4.h (LayerNorm: weight and bias)
    biases      qkv: q + 2.kv (Qwen2);  all linears (GPT): q + 2.kv + h + f + h (+ f when gated)
    MoE layer   E.3.h.fe + E.h                (Qwen3-MoE: E experts of width fe and the router, no
                                              shared experts, in place of the MLP; active: k of the E)
plus the embedding V.h, the output layer V.h unless tied, the final norm and, for GPT-style
models, learned position embeddings P.h. A Megatron rank holds the column- and row-parallel
matrices (and column-parallel biases) / TP; norms, row-parallel biases and position
embeddings whole; the embedding and output layer / TP over a vocab padded to 128.TP rows.
Mixture of experts (megatron-core's MoE layer, expert tensor parallel 1): a rank of expert-parallel
size EP holds E / EP whole experts of each MoE layer of its pipeline stage (its expert parameters,
`rank_expert_params`), and the rest - attention, norms, the router [E, h], the embedding and
output layer - like a dense model (`rank_dense_params`). Layer i (from 0) is an MoE layer when
(i + 1) is a multiple of decoder_sparse_step (transformers' Qwen3-MoE).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUNDLED_CONFIGS = Path(__file__).with_name("model_configs")
VOCAB_MULTIPLE = 128
"""Megatron pads the vocab to a multiple of this times TP (tandem's converter does the same)."""


class PlanError(ValueError):
    """Input the planner cannot plan for; the message names the cause."""


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied: bool
    qk_norm: bool = False
    gated: bool = True
    """SwiGLU MLP (gate, up, down); False: a GeLU MLP (fc1, fc2)."""
    layer_norm: bool = False
    """LayerNorm (weight and bias) instead of RMSNorm."""
    qkv_bias: bool = False
    linear_bias: bool = False
    """A bias on every linear layer (GPT / Megatron's default)."""
    positions: int = 0
    """Learned absolute position embeddings (GPT); 0 for RoPE models."""
    max_positions: int = 4096
    experts: int = 0
    """Routed experts per MoE layer (Qwen3-MoE's num_experts); 0: a dense model."""
    experts_per_token: int = 0
    expert_ffn: int = 0
    """Each expert's MLP width (moe_intermediate_size)."""
    moe_step: int = 1
    """Every moe_step-th layer is an MoE layer (decoder_sparse_step)."""

    @property
    def moe_layers(self) -> int:
        return self.layers // self.moe_step if self.experts else 0

    def stage_moe_layers(self, pp: int, stage: int) -> int:
        """MoE layers among pipeline stage `stage`'s layers (of `pp` equal stages)."""
        if not self.experts:
            return 0
        per_stage = self.layers // pp
        first = stage * per_stage
        return sum(1 for i in range(first, first + per_stage) if (i + 1) % self.moe_step == 0)

    @property
    def expert_params(self) -> int:
        """One expert's parameters: a SwiGLU MLP of width expert_ffn (gate, up, down)."""
        return 3 * self.hidden * self.expert_ffn

    @property
    def router_params(self) -> int:
        """One MoE layer's router: a linear map from the hidden size to the E experts' logits."""
        return self.experts * self.hidden

    def moe_mlp_delta(self, active: bool = False) -> int:
        """What one MoE layer holds beyond a dense layer's: its experts (k of them when `active`) and its
        router, in place of the dense MLP."""
        if not self.experts:
            return 0
        experts = self.experts_per_token if active else self.experts
        return experts * self.expert_params + self.router_params - 3 * self.hidden * self.ffn

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def norm_params(self) -> int:
        return self.hidden * (2 if self.layer_norm else 1)

    # ------------------------------------------------------------------ per layer
    def sharded_layer_params(self) -> int:
        """Parameters of one layer that tensor parallelism splits (matrices, column-parallel biases)."""
        h, q, kv, f = self.hidden, self.q_dim, self.kv_dim, self.ffn
        mats = h * q + 2 * h * kv + q * h + (3 if self.gated else 2) * h * f
        col_bias = (q + 2 * kv if self.qkv_bias or self.linear_bias else 0) + \
                   ((2 * f if self.gated else f) if self.linear_bias else 0)
        return mats + col_bias

    def replicated_layer_params(self) -> int:
        """Parameters of one layer every TP rank holds whole (norms, row-parallel biases)."""
        qk = 2 * self.head_dim if self.qk_norm else 0
        row_bias = 2 * self.hidden if self.linear_bias else 0
        return 2 * self.norm_params + qk + row_bias

    def layer_params(self) -> int:
        return self.sharded_layer_params() + self.replicated_layer_params()

    # ------------------------------------------------------------------ whole model
    def embedding_params(self, vocab: int | None = None) -> int:
        return (self.vocab if vocab is None else vocab) * self.hidden

    def total_params(self, active: bool = False) -> int:
        """Parameters of the HF model (unpadded vocab); `active`: those one token uses (k experts per MoE layer)."""
        out = 0 if self.tied else self.embedding_params()
        return (self.layers * self.layer_params() + self.moe_layers * self.moe_mlp_delta(active)
                + self.embedding_params() + out + self.norm_params + self.positions * self.hidden)

    def padded_vocab(self, tp: int) -> int:
        step = VOCAB_MULTIPLE * tp
        return math.ceil(self.vocab / step) * step

    def rank_dense_params(self, tp: int, pp: int, stage: int) -> int:
        """Parameters other than the experts' on one Megatron rank of pipeline stage `stage` (module
        docstring): what TP splits and data parallelism replicates."""
        per_layer = self.sharded_layer_params() // tp + self.replicated_layer_params()
        # An MoE layer has the router (whole on every TP rank) where a dense layer has its MLP.
        moe_delta = self.router_params - 3 * self.hidden * self.ffn // tp if self.experts else 0
        params = (self.layers // pp) * per_layer + self.stage_moe_layers(pp, stage) * moe_delta
        vocab_shard = self.embedding_params(self.padded_vocab(tp)) // tp
        last = stage == pp - 1
        if stage == 0:
            params += vocab_shard + self.positions * self.hidden
        if last:
            params += self.norm_params
            # Untied: the output layer. Tied with PP > 1: the last stage keeps its own copy of
            # the embedding as the output layer (Megatron syncs the two); tied, PP = 1: shared.
            params += vocab_shard if (not self.tied or pp > 1) else 0
        return params

    def rank_expert_params(self, pp: int, stage: int, ep: int = 1) -> int:
        """Expert parameters on one rank of pipeline stage `stage`: E / EP whole experts per MoE layer."""
        return self.stage_moe_layers(pp, stage) * (self.experts // ep) * self.expert_params

    def rank_params(self, tp: int, pp: int, stage: int, ep: int = 1) -> int:
        """Parameters one Megatron rank of pipeline stage `stage` holds (module docstring)."""
        return self.rank_dense_params(tp, pp, stage) + self.rank_expert_params(pp, stage, ep)

    def lora_params(self, rank: int, targets: list[str]) -> int:
        """Adapter parameters: rank x (in + out) per targeted projection and layer (lm_head once)."""
        h, q, kv, f = self.hidden, self.q_dim, self.kv_dim, self.ffn
        dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}
        per_layer = sum(rank * sum(dims[t]) for t in targets if t in dims)
        head = rank * (h + self.vocab) if "lm_head" in targets else 0
        return self.layers * per_layer + head


# --------------------------------------------------------------------------- reading configs
def shape_from_hf(cfg: dict[str, Any], name: str) -> ModelShape:
    """A ModelShape from an HF config.json dict (a text_config inside is used when present)."""
    cfg = cfg.get("text_config") or cfg
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        arch = " ".join(cfg.get("architectures") or [cfg.get("model_type", "")]).lower()
        return ModelShape(
            name=name, layers=int(cfg["num_hidden_layers"]), hidden=hidden, heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads), ffn=int(cfg["intermediate_size"]),
            vocab=int(cfg["vocab_size"]), tied=bool(cfg.get("tie_word_embeddings", False)),
            qk_norm="qwen3" in arch, qkv_bias="qwen2" in arch or bool(cfg.get("attention_bias")),
            max_positions=int(cfg.get("max_position_embeddings") or 4096), **_moe_fields(cfg))
    except KeyError as err:
        raise PlanError(f"model config of {name!r} has no {err.args[0]!r}: not a decoder LM config") from None


def _moe_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """A Qwen3-MoE config's expert keys as ModelShape fields ({} for a dense model)."""
    if not cfg.get("num_experts"):
        return {}
    if cfg.get("shared_expert_intermediate_size") or cfg.get("mlp_only_layers"):
        raise PlanError("shared experts and mlp_only_layers are not counted by the planner (Qwen3-MoE has neither)")
    return {"experts": int(cfg["num_experts"]), "experts_per_token": int(cfg["num_experts_per_tok"]),
            "expert_ffn": int(cfg["moe_intermediate_size"]), "moe_step": int(cfg.get("decoder_sparse_step") or 1)}


def tiny_shape(tiny: Any) -> ModelShape:
    """model.path = 'tiny': the byte-level tokenizer has 256 bytes + 3 chat specials + tool tokens."""
    moe = {"num_experts": tiny.num_experts, "num_experts_per_tok": tiny.num_experts_per_tok,
           "moe_intermediate_size": tiny.moe_intermediate_size, "decoder_sparse_step": tiny.decoder_sparse_step}
    return ModelShape(name="tiny", layers=tiny.num_layers, hidden=tiny.hidden_size, heads=tiny.num_heads,
                      kv_heads=tiny.num_kv_heads, head_dim=tiny.head_dim, ffn=tiny.intermediate_size,
                      vocab=259 + tiny.tool_tokens, tied=tiny.tie_word_embeddings, qk_norm=True,
                      max_positions=tiny.max_position_embeddings, **_moe_fields(moe))


def bundled_config(model_id: str) -> dict[str, Any] | None:
    path = BUNDLED_CONFIGS / (model_id.replace("/", "--") + ".json")
    return json.loads(path.read_text()) if path.exists() else None


def hub_config(model_id: str, trust_remote_code: bool) -> dict[str, Any]:
    """config.json of a hub model through transformers (config only, no weights)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model_id, trust_remote_code=trust_remote_code).to_dict()
    except Exception as err:  # noqa: BLE001 - offline, gated, unknown id: all one cause for the user
        bundled = sorted(p.stem.replace("--", "/") for p in BUNDLED_CONFIGS.glob("*.json"))
        raise PlanError(f"cannot read the config of model.path = {model_id!r} ({type(err).__name__}: {err}); "
                        f"bundled configs: {', '.join(bundled)}") from None


def hf_config(model: Any) -> dict[str, Any]:
    """The HF config.json of a non-tiny ModelConfig: a local directory's, a bundled one, or the hub's."""
    local = Path(model.path)
    if local.is_dir():
        if not (local / "config.json").exists():
            raise PlanError(f"model.path {model.path!r} is a directory without config.json")
        return json.loads((local / "config.json").read_text())
    return bundled_config(model.path) or hub_config(model.path, model.trust_remote_code)


def load_shape(model: Any) -> ModelShape:
    """The shape of the model a ModelConfig (model.path, model.tiny) names (module docstring)."""
    if model.path == "tiny":
        return tiny_shape(model.tiny)
    return shape_from_hf(hf_config(model), model.path)
