"""A pruned folder is portable: plain transformers loads it where headstats cannot be imported, and it
generates the tokens of the unpruned model with the same heads zeroed (static zeroing with a KV
cache); its files are world-readable, and its weights are saved in the dtype asked for."""

from __future__ import annotations

import ast
import copy
import json
import os
import stat
import subprocess
import sys

import pytest
import torch
from families import tiny_model
from transformers import AutoModelForCausalLM

import headstats
from headstats.engine.prune import prune_heads
from headstats.jobs.prune import REMOTE_CODE_FILE, save_pruned

# Llama (4 query heads in 2 KV groups): layer 0 loses one head of group 0 (uneven groups, the gather),
# layer 1 the whole of group 0 (its K/V rows go), layer 2 every head (no attention computed).
# Gemma-3-like (4 query heads, 1 KV head, sliding and global layers): uneven losses per layer.
HEADS = {
    "llama": [(0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (2, 3)],
    "gemma3": [(0, 1), (1, 0), (1, 3), (2, 0), (2, 1), (2, 2), (2, 3)],
}
STEPS = 10

# Run in a fresh interpreter: `import headstats` fails there (a meta-path finder refuses it), the
# folder is loaded by transformers alone, and greedy tokens are printed as JSON.
LOAD_WITHOUT_HEADSTATS = """
import json, sys

class NoHeadstats:
    def find_spec(self, name, path=None, target=None):
        if name == "headstats" or name.startswith("headstats."):
            raise ImportError("headstats is not installed here")

sys.meta_path.insert(0, NoHeadstats())
try:
    import headstats
except ImportError:
    pass
else:
    raise SystemExit("headstats was importable")

import torch
from transformers import AutoModelForCausalLM

folder, ids = sys.argv[1], torch.tensor(json.loads(sys.argv[2]))
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
with torch.no_grad():
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False,
        pad_token_id=0,
    )
assert not any(name.split(".")[0] == "headstats" for name in sys.modules)
print(json.dumps({"tokens": out[:, ids.shape[1]:].tolist(), "dtype": str(model.dtype), "class": type(model).__name__}))
""".replace("STEPS", str(STEPS))


def _ids(seed: int = 1, batch: int = 2, length: int = 6) -> torch.Tensor:
    return torch.randint(3, 128, (batch, length), generator=torch.Generator().manual_seed(seed))


def _generate(model: torch.nn.Module, ids: torch.Tensor) -> list:
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=STEPS,
            min_new_tokens=STEPS,
            do_sample=False,
            pad_token_id=0,
        )
    return out[:, ids.shape[1] :].tolist()


def _zeroed_tokens_without_cache(model: torch.nn.Module, ids: torch.Tensor, heads: list) -> list:
    """Greedy tokens of the zeroed model by whole forward passes at every step (no cache)."""
    seq = ids
    for _ in range(STEPS):
        with torch.no_grad(), headstats.ablate_heads(model, heads=heads):
            logits = model(input_ids=seq, attention_mask=torch.ones_like(seq), use_cache=False).logits
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq[:, ids.shape[1] :].tolist()


def _imported(source: str) -> set[str]:
    """Top-level packages a module's source imports."""
    tree = ast.parse(source)
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    return {name.split(".")[0] for name in names}


def _load_without_headstats(folder, ids: torch.Tensor, tmp_path) -> dict:
    env = {
        **os.environ,
        "HF_MODULES_CACHE": str(tmp_path / "hf_modules"),  # transformers copies the modeling file here
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": "",  # not the checkout: headstats is not on the path either
    }
    done = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_HEADSTATS, str(folder), json.dumps(ids.tolist())],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("family", sorted(HEADS))
def test_folder_loads_and_generates_without_headstats(family: str, tmp_path) -> None:
    model = tiny_model(family, attn="sdpa")
    heads = HEADS[family]
    ids = _ids()
    # Static zeroing runs with the KV cache (generate) and gives the tokens of whole forward passes.
    with headstats.ablate_heads(model, heads=heads):
        zeroed = _generate(model, ids)
    assert zeroed == _zeroed_tokens_without_cache(model, ids, heads)
    assert model.config._attn_implementation == "sdpa"  # restored when the block is left
    pruned = copy.deepcopy(model)
    prune_heads(pruned, heads)
    assert _generate(pruned, ids) == zeroed
    out = save_pruned(pruned, None, tmp_path / "pruned", {"removed_heads": heads})
    assert _imported((out / REMOTE_CODE_FILE).read_text()) <= {
        "__future__",
        "collections",
        "dataclasses",
        "sys",
        "types",
        "warnings",
    } | {
        "torch",
        "transformers",
    }
    loaded = _load_without_headstats(out, ids, tmp_path)
    assert loaded["tokens"] == zeroed
    assert loaded["class"] == "HeadstatsPrunedForCausalLM" and loaded["dtype"] == "torch.float32"


def test_files_are_world_readable(tmp_path) -> None:
    pruned = tiny_model("llama")
    prune_heads(pruned, HEADS["llama"])
    out = save_pruned(pruned, None, tmp_path / "pruned", {"removed_heads": HEADS["llama"]})
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    files = sorted(p.name for p in out.iterdir())
    assert {"config.json", "model.safetensors", REMOTE_CODE_FILE, "pruning.json"} <= set(files)
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == dict.fromkeys(files, 0o644)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_save_dtype(dtype: torch.dtype, tmp_path) -> None:
    """Weights written in the dtype asked for, loaded in it by default; the model saved stays as it was."""
    from safetensors import safe_open

    model = tiny_model("llama")
    prune_heads(model, HEADS["llama"])
    before, config_dtype = {k: v.clone() for k, v in model.state_dict().items()}, model.config.dtype
    name = str(dtype).removeprefix("torch.")
    out = save_pruned(model, None, tmp_path / "pruned", {"removed_heads": HEADS["llama"]}, dtype=name)
    assert all(torch.equal(v, before[k]) and v.dtype == torch.float32 for k, v in model.state_dict().items())
    assert model.config.dtype == config_dtype
    with safe_open(out / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {dtype}  # noqa: SIM118 (safe_open is no mapping)
    assert json.loads((out / "config.json").read_text())["dtype"] == name
    loaded = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
    assert loaded.dtype == dtype
    weights = loaded.state_dict()
    assert weights.keys() == before.keys()
    assert all(torch.equal(weights[k], v.to(dtype)) for k, v in before.items())
    ids = _ids(2)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        got = loaded(input_ids=ids).logits.float()
    assert float((got - expected).abs().max() / expected.abs().max()) < 0.03  # the weights' rounding alone


def test_scored_zeroing_refuses_a_cache_and_says_static_zeroing_takes_one() -> None:
    model = tiny_model("llama", attn="sdpa")
    ids = _ids()
    with (
        pytest.raises(ValueError, match=r"static zeroing \(ablate_heads\(model, heads=...\) or mask=...\) runs with a"),
        headstats.ablate_heads(model, score="ahon_ln", threshold=0.5),
    ):
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, do_sample=False, pad_token_id=0)
