"""What the cost of a transformer depends on (its weights, layers, heads), read from its Hugging
Face config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollverify.infra.paths import ASSETS


@dataclass(frozen=True)
class ModelShape:
    """What the cost of a transformer depends on, read from its Hugging Face config."""

    parameters: int  # all weights (embeddings included)
    active_parameters: int  # weights one token's forward uses (MoE: the routed experts only)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    bytes_per_parameter: int = 2  # bf16 weights
    vocab: int = 0  # the logits' width
    intermediate: int = 0  # one token's MLP width (MoE: its routed experts' and shared)

    @property
    def weight_bytes(self) -> int:
        return self.parameters * self.bytes_per_parameter

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token in every layer (bf16 KV cache)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @classmethod
    def from_config(cls, config: dict[str, Any], bytes_per_parameter: int = 2) -> ModelShape:
        """Dense decoders (Llama, Qwen, Mistral) and their MoE variants (num_experts,
        num_experts_per_tok, moe_intermediate_size)."""
        hidden, layers = config["hidden_size"], config["num_hidden_layers"]
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or hidden // heads
        vocab = config["vocab_size"]
        attention = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, o; k, v
        experts = config.get("num_experts") or config.get("n_routed_experts") or 0
        if experts:
            expert = 3 * hidden * config["moe_intermediate_size"]
            routed = config["num_experts_per_tok"]
            shared = 3 * hidden * config.get("shared_expert_intermediate_size", 0)
            mlp_all, mlp_active = experts * expert + shared, routed * expert + shared
            width = routed * config["moe_intermediate_size"] + config.get(
                "shared_expert_intermediate_size", 0
            )
        else:
            mlp_all = mlp_active = 3 * hidden * config["intermediate_size"]  # gate, up, down
            width = config["intermediate_size"]
        embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
        router = hidden * experts  # one score per expert
        norms = 2 * hidden + (2 * head_dim if _has_qk_norm(config) else 0)  # per layer
        fixed = embeddings + hidden  # + the final norm
        return cls(
            parameters=layers * (attention + mlp_all + router + norms) + fixed,
            active_parameters=layers * (attention + mlp_active + router + norms) + fixed,
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            bytes_per_parameter=bytes_per_parameter,
            vocab=vocab,
            intermediate=width,
        )

    @classmethod
    def from_folder(cls, folder: str | Path, bytes_per_parameter: int = 2) -> ModelShape:
        config = json.loads((Path(folder) / "config.json").read_text())
        return cls.from_config(config, bytes_per_parameter)

    @classmethod
    def of(
        cls, model: str, bytes_per_parameter: int = 2, revision: str | None = None
    ) -> ModelShape:
        """The shape of `model.path`: a local folder, a hub id in the local Hugging Face cache
        (at `revision`: model.revision), or one of the configs shipped in
        rollverify/assets/model_configs (the paper's models)."""
        if (Path(model) / "config.json").is_file():
            return cls.from_folder(model, bytes_per_parameter)
        shipped = SHIPPED_CONFIGS / f"{model.replace('/', '--')}.json"
        if shipped.is_file():
            return cls.from_config(json.loads(shipped.read_text()), bytes_per_parameter)
        from huggingface_hub import try_to_load_from_cache  # reads the cache, never the network

        cached = try_to_load_from_cache(model, "config.json", revision=revision)
        if isinstance(cached, str):
            return cls.from_config(json.loads(Path(cached).read_text()), bytes_per_parameter)
        raise ValueError(
            f"model.path: no config.json for {model!r} here; download the model, or point "
            "model.path to a folder with its config.json"
        )


# The paper's models' config.json files, shipped so that their costs need no download.
SHIPPED_CONFIGS = ASSETS / "model_configs"


def _has_qk_norm(config: dict[str, Any]) -> bool:
    """Qwen3 normalizes queries and keys per head (one weight of head_dim each)."""
    return str(config.get("model_type", "")).startswith("qwen3")
