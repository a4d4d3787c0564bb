"""headstats beside other interpretability libraries: nnsight traces see headstats' zeroing when
headstats is given the model nnsight wraps; wrappers themselves (nnsight, TransformerLens), a model
whose attention modules TransformerLens' bridge replaced, and any forward pass that bypasses
headstats' attention are refused with a message that names the supported route, never run silently."""

from __future__ import annotations

import warnings

import pytest
import torch
from families import tiny_model
from test_tasks import make_tokenizer

import headstats
from headstats import UnsupportedModelError, ablate_heads

IDS = torch.tensor([[3, 5, 7, 11, 13, 17, 19]])
HEADS = [(0, 1), (1, 2)]


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=torch.ones_like(IDS)).logits


@pytest.fixture(scope="module")
def traced():
    """A tiny llama and nnsight's TransformersModel around it."""
    nnsight = pytest.importorskip("nnsight", reason="nnsight is not installed (pip install nnsight)")
    model = tiny_model("llama")
    tok = make_tokenizer(adds_bos=False)  # nnsight wants one; the tests pass token ids below VOCAB
    return model, nnsight.TransformersModel(model, tokenizer=tok)


def test_ablate_heads_composes_with_an_nnsight_trace(traced) -> None:
    """Zeroing is set up on the wrapped model; the trace runs through it and sees the zeroed heads."""
    model, lm = traced
    with ablate_heads(model, heads=HEADS):
        expected = logits(model)
    d = model.config.hidden_size // model.config.num_attention_heads
    with ablate_heads(model, heads=HEADS) as ablation, lm.trace(IDS, attention_mask=torch.ones_like(IDS)):
        before_w_o = lm.model.layers[1].self_attn.o_proj.input.detach().save()  # the head outputs O, before W_O
        out = lm.output.save()
    torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(out.logits, logits(model), atol=1e-3)  # the zeroing changed the output
    assert float(before_w_o[0, :, 2 * d : 3 * d].abs().max()) == 0.0  # head (1, 2) is zero at every position
    assert float(before_w_o[0, :, 1 * d : 2 * d].abs().max()) > 0.0
    assert ablation.zero_masks().shape == (1, 3, 4) and ablation.realised_fraction() == pytest.approx(2 / 12)
    with lm.trace(IDS, attention_mask=torch.ones_like(IDS)):  # leaving the block restored the model
        plain = lm.output.save()
    torch.testing.assert_close(plain.logits, logits(model), rtol=0, atol=0)


def test_nnsight_wrapper_is_refused_with_the_route(traced) -> None:
    _, lm = traced
    with pytest.raises(UnsupportedModelError) as err:
        ablate_heads(lm, heads=HEADS)
    assert str(err.value) == (
        "nnsight's TransformersModel wraps a transformers model: pass the wrapped model to headstats (the "
        "PreTrainedModel given to TransformersModel(...)); its zeroing and scores then apply inside "
        "TransformersModel.trace(...) too"
    )


class TransformerBridge(torch.nn.Module):
    """A stand-in with TransformerLens' class name and module (headstats recognises a wrapper's classes by
    their package, so the refusal is tested without importing TransformerLens)."""

    __module__ = "transformer_lens.model_bridge.transformer_bridge"

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(8, 4)


TL_MESSAGE = (
    "TransformerLens' TransformerBridge is not supported: its hook points compute attention in TransformerLens' own "
    "modules, outside transformers' AttentionInterface, where headstats sees heads. Load the same weights as a "
    "transformers model: model, tok = headstats.load_model(NAME_OR_DIR) (or "
    "transformers.AutoModelForCausalLM.from_pretrained(NAME_OR_DIR)) and pass that model"
)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: ablate_heads(m, heads=HEADS),
        lambda m: ablate_heads(m, score="ahon_ln", threshold=0.5),
        lambda m: headstats.score_sequences(m, [[1, 2, 3]]),
        lambda m: headstats.Probe(m, ["ahon_ln"]),
    ],
    ids=["static", "dynamic", "score_sequences", "Probe"],
)
def test_a_transformer_lens_model_is_refused_with_the_supported_route(call) -> None:
    with pytest.raises(UnsupportedModelError) as err:
        call(TransformerBridge())
    assert str(err.value) == TL_MESSAGE


# -- TransformerLens 4's bridge around a transformers model ---------------------------------------------

ALL_HEADS = [(layer, head) for layer in range(3) for head in range(4)]
BOOTED = (
    "model.layers.0.self_attn of this LlamaForCausalLM is TransformerLens' PositionEmbeddingsAttentionBridge: "
    "TransformerBridge.boot_transformers(..., hf_model=model) replaced the model's attention modules with its own, "
    "which compute attention outside transformers' AttentionInterface, so headstats can neither see nor zero heads "
    "there. Give headstats a copy that was not booted (headstats.load_model(PATH) or "
    "AutoModelForCausalLM.from_pretrained(PATH)), or zero heads in the bridge with hooks on blocks.L.attn.hook_z "
    "(docs/guides/transformerlens.md)"
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory):
    """A tiny random llama and a tokenizer saved as a checkpoint folder (what boot_transformers reads)."""
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(path)
    make_tokenizer(adds_bos=False).save_pretrained(path)
    return path


def _boot(path, hf_model=None):
    bridge_module = pytest.importorskip("transformer_lens.model_bridge", reason="transformer-lens is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bridge_module.TransformerBridge.boot_transformers(str(path), hf_model=hf_model, device="cpu")


def test_a_model_booted_into_a_transformer_lens_bridge_is_refused_with_the_route(checkpoint) -> None:
    """boot_transformers(path, hf_model=model) swaps the model's attention modules for TransformerLens' own:
    zeroing there would change nothing (0.0 in every logit), so every headstats entry point refuses it."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    plain = logits(model)
    with ablate_heads(model, heads=ALL_HEADS):  # before booting, zeroing every head changes the logits
        assert float((logits(model) - plain).abs().max()) > 1e-2
    bridge = _boot(checkpoint, hf_model=model)
    tok = make_tokenizer(adds_bos=False)
    calls = {
        "static": lambda: ablate_heads(model, heads=ALL_HEADS),
        "dynamic": lambda: ablate_heads(model, score="ahon_ln", threshold=0.5),
        "score_texts": lambda: headstats.score_texts(model, tok, ["The cat sat on the mat."]),
        "Probe": lambda: headstats.Probe(model, ["ahon_ln"]),
    }
    for name, call in calls.items():
        with pytest.raises(UnsupportedModelError) as err:
            call()
        assert str(err.value) == BOOTED, name
    with pytest.raises(UnsupportedModelError) as err:
        ablate_heads(bridge, heads=ALL_HEADS)
    assert str(err.value) == TL_MESSAGE


def test_the_transformer_lens_route_zeroes_the_heads_headstats_zeroes(checkpoint) -> None:
    """The documented route: headstats on a copy that was not booted, the bridge on its own copy; zeroing
    heads in the bridge through hook_z (the head outputs before W_O) equals headstats' zeroing."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    bridge = _boot(checkpoint)
    with ablate_heads(model, heads=HEADS) as ablation:
        expected = logits(model)
    assert ablation.realised_fraction() == pytest.approx(len(HEADS) / 12)

    def zero(heads: list[int]):
        def hook(z: torch.Tensor, hook: object) -> torch.Tensor:  # z: (batch, position, head, d_head)
            z[:, :, heads] = 0.0
            return z

        return hook

    layers = sorted({layer for layer, _ in HEADS})
    hooks = [(f"blocks.{layer}.attn.hook_z", zero([h for li, h in HEADS if li == layer])) for layer in layers]
    with torch.no_grad():
        zeroed = bridge.run_with_hooks(IDS, fwd_hooks=hooks)
        plain = bridge(IDS)
    torch.testing.assert_close(zeroed, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(plain, logits(model), rtol=0, atol=1e-5)
    assert float((zeroed - plain).abs().max()) > 1e-2


class OwnAttention(torch.nn.Module):
    """A wrapper that computes its layer's attention output itself (here: W_O of the input), as a
    library replacing attention modules does, without calling transformers' attention function."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, hidden_states: torch.Tensor, *args: object, **kwargs: object) -> tuple[torch.Tensor, None]:
        return self.inner.o_proj(hidden_states), None


def test_a_pass_that_bypasses_headstats_attention_raises_and_realised_fraction_says_so() -> None:
    """Whatever replaced the attention modules, a forward pass under ablate_heads that reached no
    attention layer raises, and the ablation does not claim that nothing ran."""
    model = tiny_model("llama")
    for layer in model.model.layers:
        layer.self_attn = OwnAttention(layer.self_attn)
    with ablate_heads(model, heads=ALL_HEADS) as ablation, pytest.raises(UnsupportedModelError) as err:
        logits(model)
    assert str(err.value) == (
        "LlamaForCausalLM ran, but none of its 3 attention layers called headstats' attention function, so no head "
        "was scored or zeroed: something replaced the model's attention modules or its attention implementation; give "
        "headstats the model as transformers loads it"
    )
    with pytest.raises(ValueError) as err:
        ablation.realised_fraction()
    assert str(err.value) == (
        "the model ran 1 forward pass(es) inside ablate_heads(...), but none reached headstats' attention function, "
        "so no head was zeroed (see the UnsupportedModelError each pass raised)"
    )
    with pytest.raises(UnsupportedModelError, match="none of its 3 attention layers"):
        headstats.score_sequences(model, [[3, 5, 7]])
