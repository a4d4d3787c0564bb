"""A tiny decoder that computes its attention inline, as Bloom, GPT-Neo and MPT do (and Falcon did
before transformers 5.25), registered with the Auto classes under its own model type.

headstats must refuse such a model with one clear message. Transformers keeps moving families onto
its attention interface, so the tests build their own inline model rather than borrow one that a
later release may convert."""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

MODEL_TYPE = "headstats_inline_test"


class InlineConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(self, vocab_size: int = 128, hidden_size: int = 32, num_attention_heads: int = 4, **kwargs) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        super().__init__(**kwargs)


class InlineAttention(nn.Module):
    def __init__(self, config: InlineConfig) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).chunk(3, dim=-1))
        logits = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        weights = logits.masked_fill(~causal, float("-inf")).softmax(-1)
        return self.o_proj((weights @ v).transpose(1, 2).reshape(b, t, d))


class InlineForCausalLM(PreTrainedModel):
    config_class = InlineConfig
    base_model_prefix = "model"

    def __init__(self, config: InlineConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.attn = InlineAttention(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs) -> CausalLMOutput:
        h = self.embed(input_ids)
        return CausalLMOutput(logits=self.lm_head(h + self.attn(h)))


AutoConfig.register(MODEL_TYPE, InlineConfig, exist_ok=True)
AutoModelForCausalLM.register(InlineConfig, InlineForCausalLM, exist_ok=True)
