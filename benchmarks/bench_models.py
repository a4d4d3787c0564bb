"""Models for the benchmarks: an embedded checkpoint by name, or a randomly initialised model of a
real architecture (``config:llama-3.1-8b``), built from its configuration on the device, so that no
weights travel (speed does not depend on weight values).

    from bench_models import load
    model, tokenizer = load("config:llama-3.2-1b", device="cuda", dtype="bfloat16")

A ``config:`` model gets SmolLM2's tokenizer (its ids lie inside every configured vocabulary): the
prompts are the same real text, tokenised the same way, whatever the architecture.
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

import headstats
from headstats.io.assets import embedded_model
from headstats.io.models import resolve_dtype

# Architectures of real checkpoints, as in their config.json (no weights needed).
CONFIGS: dict[str, dict] = {
    "smollm2-135m": {
        "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0},
    },
    "llama-3.2-1b": {
        "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    },
    "llama-3.1-8b": {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    },
    "qwen2.5-7b": {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "use_sliding_window": False, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    },
    "olmo-2-7b": {
        "model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
    },
}  # fmt: skip


def build_model(name: str, layers: int | None, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    spec = dict(CONFIGS[name])
    if layers:
        spec["num_hidden_layers"] = min(layers, spec["num_hidden_layers"])
    config = AutoConfig.for_model(**spec)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def load(name: str, *, device: str | None = None, dtype: str | None = None):
    """(model, tokenizer): ``config:NAME`` is a random model of :data:`CONFIGS` [NAME] with SmolLM2's
    tokenizer; anything else goes to :func:`headstats.load_model`."""
    if not name.startswith("config:"):
        return headstats.load_model(name, dtype=dtype, device=device)
    arch = name.removeprefix("config:")
    if arch not in CONFIGS:
        raise SystemExit(f"unknown configuration {arch!r}: choose from {', '.join(sorted(CONFIGS))}")
    where = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = build_model(arch, None, where, resolve_dtype(dtype, where))
    model.headstats_name = name
    tokenizer = AutoTokenizer.from_pretrained(embedded_model("smollm2-135m"))
    return model, tokenizer
