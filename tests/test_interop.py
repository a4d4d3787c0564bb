"""headstats beside other interpretability libraries: nnsight traces see headstats' zeroing when
headstats is given the model nnsight wraps; wrappers themselves (nnsight, TransformerLens) are
refused with a message that names the supported route."""

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
    """A tiny llama and nnsight's LanguageModel around it."""
    nnsight = pytest.importorskip("nnsight", reason="nnsight is not installed (pip install nnsight)")
    model = tiny_model("llama")
    tok = make_tokenizer(adds_bos=False)  # nnsight wants one; the tests pass token ids below VOCAB
    with warnings.catch_warnings():  # nnsight 0.8 deprecates the name LanguageModel, which it still documents
        warnings.simplefilter("ignore")
        lm = nnsight.LanguageModel(model, tokenizer=tok)
    return model, lm


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
        "nnsight's LanguageModel wraps a transformers model: pass the wrapped model to headstats (the PreTrainedModel "
        "given to LanguageModel(...)); its zeroing and scores then apply inside LanguageModel.trace(...) too"
    )


class HookedTransformer(torch.nn.Module):
    """A stand-in with TransformerLens' class name, module and config attribute (the package is a
    large install; headstats recognises its classes by their package)."""

    __module__ = "transformer_lens.HookedTransformer"

    def __init__(self) -> None:
        super().__init__()
        self.cfg = type("HookedTransformerConfig", (), {"n_layers": 2, "n_heads": 4})()
        self.embed = torch.nn.Embedding(8, 4)


TL_MESSAGE = (
    "TransformerLens' HookedTransformer is not supported: its hook points compute attention in TransformerLens' own "
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
        call(HookedTransformer())
    assert str(err.value) == TL_MESSAGE


def test_a_real_transformer_lens_model_is_refused() -> None:
    transformer_lens = pytest.importorskip("transformer_lens", reason="transformer_lens is not installed")
    config = transformer_lens.HookedTransformerConfig(
        n_layers=1, d_model=8, n_ctx=8, d_head=4, n_heads=2, d_vocab=16, act_fn="relu"
    )
    with pytest.raises(UnsupportedModelError, match=r"headstats\.load_model"):
        ablate_heads(transformer_lens.HookedTransformer(config), heads=HEADS)
