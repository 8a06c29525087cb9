"""Where the policy weights come from: a tiny model built locally, or an HF model.

`model.path = "tiny"` builds a Qwen3-architecture model (Qwen3-MoE with `model.tiny.num_experts`)
with random weights and a byte-level BPE tokenizer (256 byte symbols, no merges, Qwen-style chat
template) using only `transformers` and `tokenizers`, so a laptop with no network can run the
whole loop. Anything else is handed to transformers as a hub id or local directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from tandem.config import ModelConfig
from tandem.config.views import AnyView
from tandem.paths import cache_root

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    # With tools (apply_chat_template(tools=...)): one system turn listing them, each after the
    # token that calls it (tool_tokens) -- the tiny family's compact stand-in for Qwen's <tools> JSON.
    "{% if tools %}<|im_start|>system\n"
    "{% for tool in tools %}<|tool_{{ loop.index0 }}|>{{ (tool.function or tool).name }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tool_token(index: int) -> str:
    """The tiny tokenizer's token that calls an environment's tool number `index`."""
    return f"<|tool_{index}|>"


def build_byte_tokenizer(tool_tokens: int = 0):
    """A byte-level tokenizer: every UTF-8 byte is one token, plus chat specials and `tool_tokens`
    tool-call tokens (ordinary added tokens, so decoding keeps them like Qwen's <tool_call>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIAL_TOKENS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    if tool_tokens:
        tok.add_tokens([tool_token(k) for k in range(tool_tokens)], special_tokens=False)
    return tok


MOE_FIELDS = {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step", "norm_topk_prob",
              "router_init_std"}
"""model.tiny's mixture-of-experts keys: a dense tiny model's cache key leaves them out, so models built
before they existed are found again."""


def _tiny_key(cfg: ModelConfig, seed: int) -> str:
    tiny = cfg.tiny.model_dump(exclude=MOE_FIELDS if not cfg.tiny.num_experts else None)
    blob = json.dumps({"tiny": tiny, "dtype": cfg.dtype, "seed": seed, "v": 2}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _tiny_hf_config(cfg: ModelConfig, tok):
    """The transformers config of the tiny model: Qwen3, or Qwen3-MoE when model.tiny.num_experts > 0."""
    from transformers import Qwen3Config, Qwen3MoeConfig

    t = cfg.tiny
    moe = {}
    if t.num_experts:
        moe = {"num_experts": t.num_experts, "num_experts_per_tok": t.num_experts_per_tok,
               "moe_intermediate_size": t.moe_intermediate_size, "decoder_sparse_step": t.decoder_sparse_step,
               "norm_topk_prob": t.norm_topk_prob, "mlp_only_layers": [], "output_router_logits": False}
    return (Qwen3MoeConfig if t.num_experts else Qwen3Config)(
        vocab_size=len(tok),
        hidden_size=t.hidden_size,
        intermediate_size=t.intermediate_size,
        num_hidden_layers=t.num_layers,
        num_attention_heads=t.num_heads,
        num_key_value_heads=t.num_kv_heads,
        head_dim=t.head_dim,
        max_position_embeddings=t.max_position_embeddings,
        tie_word_embeddings=t.tie_word_embeddings,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        dtype=cfg.dtype,
        **moe,
    )


def build_tiny_model(cfg: ModelConfig, out_dir: Path, seed: int) -> Path:
    """Write a tiny Qwen3 (or Qwen3-MoE) model + tokenizer to out_dir (atomically) and return it."""
    import torch
    from transformers import Qwen3ForCausalLM, Qwen3MoeForCausalLM

    tok = build_byte_tokenizer(cfg.tiny.tool_tokens)
    hf_cfg = _tiny_hf_config(cfg, tok)
    torch.manual_seed(seed)
    model = (Qwen3MoeForCausalLM if cfg.tiny.num_experts else Qwen3ForCausalLM)(hf_cfg)
    if cfg.tiny.num_experts:
        with torch.no_grad():  # the routers' spread sets how near-tied their logits are (router_init_std)
            for name, param in model.named_parameters():
                if name.endswith(".mlp.gate.weight"):
                    param.normal_(0.0, cfg.tiny.router_init_std)
    model = model.to(getattr(torch, cfg.dtype))
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    tmp = out_dir.with_name(out_dir.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    if out_dir.exists():  # another process built it first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)
    return out_dir


def resolve_model_path(cfg: AnyView) -> str:
    """The directory or hub id that engines and trainers load; builds the tiny model on first use."""
    if cfg.model.path != "tiny":
        return cfg.model.path
    family = "qwen3moe" if cfg.model.tiny.num_experts else "qwen3"
    out = cache_root(cfg.run.cache_dir) / "models" / f"tiny-{family}-{_tiny_key(cfg.model, cfg.run.seed)}"
    if not (out / "config.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        build_tiny_model(cfg.model, out, cfg.run.seed)
    return str(out)


def load_tokenizer(path: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)


def load_causal_lm(path: str, dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code
    )
    return model.to(device)


def pick_device(setting: str) -> str:
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return setting
