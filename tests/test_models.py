"""Loading models: dtypes, Hub revisions and ids without an organisation (from a local Hub cache,
offline), accelerate placement, provenance, and a one-line error for each broken input."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from families import tiny_decoder
from inline_model import InlineConfig, InlineForCausalLM
from transformers import AutoConfig, AutoModelForCausalLM

import headstats
from headstats.engine.attention import UnsupportedModelError
from headstats.io import model_paths, models
from headstats.io.identity import directory_fingerprint, model_identity
from headstats.io.models import ModelLoadError, ModelNotFoundError, load_model, resolve_dtype


def save(path: Path, tokenizer, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> Path:
    model = tiny_decoder("llama", len(tokenizer))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * seed)
    model.to(dtype).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def bf16_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    return save(tmp_path_factory.mktemp("bf16") / "model", tokenizer, dtype=torch.bfloat16)


def first_weight(model) -> torch.Tensor:
    return next(model.parameters()).detach().float()


# -- dtypes -----------------------------------------------------------------------------------------


def test_dtype_auto_keeps_the_checkpoints_dtype(bf16_dir: Path) -> None:
    assert load_model(str(bf16_dir), dtype="auto", device="cpu")[0].dtype == torch.bfloat16
    assert load_model(str(bf16_dir), device="cpu")[0].dtype == torch.float32  # default on CPU: fp32
    assert load_model(str(bf16_dir), dtype="float16", device="cpu")[0].dtype == torch.float16
    config = AutoConfig.from_pretrained(bf16_dir)
    assert resolve_dtype("auto", torch.device("cpu"), config) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32  # before loading: the device default
    with pytest.raises(ValueError, match="unknown dtype 'fp8': choose from auto"):
        load_model(str(bf16_dir), dtype="fp8", device="cpu")


def test_bf16_on_a_cpu_without_bf16_units_warns_with_the_way_out(
    bf16_dir: Path, monkeypatch: pytest.MonkeyPatch, pretend_cpu, caplog: pytest.LogCaptureFixture
) -> None:
    """PyTorch emulates bf16 products on a CPU without AVX512-BF16 or AMX, about 6 times slower than
    fp32 per pass: loading a bf16 body there says so, with the measured cost, and what to pass instead."""
    pretend_cpu("AVX2 EPYC", [])
    with caplog.at_level("WARNING", logger="headstats"):
        load_model(str(bf16_dir), dtype="bfloat16", device="cpu")
    assert [r.getMessage() for r in caplog.records] == [
        f"{bf16_dir} runs in bfloat16 on a CPU without bf16 matrix units (AVX2 EPYC: no AVX512-BF16 or AMX), where "
        "a bf16 pass takes about 6 times as long as a float32 one (SmolLM2-135M's fused HellaSwag baseline, 12,000 "
        "sequences, on a 2-core AVX2 EPYC: 7.6 CPU-hours against 1.3, 4.9 h of wall time against 50 min; one "
        "2048x576 by 576x1536 product: 64 times); pass --dtype float32 (dtype='float32') unless bf16's own numbers "
        "are wanted"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="headstats"):
        with models.bf16_cost_said():  # a caller that said it in its own terms (a confirmation's bf16 path)
            load_model(str(bf16_dir), dtype="bfloat16", device="cpu")
        load_model(str(bf16_dir), dtype="float32", device="cpu")  # fp32: nothing to say
        pretend_cpu("Xeon", ["amx_bf16"])
        load_model(str(bf16_dir), dtype="bfloat16", device="cpu")  # bf16 units: the fast path
    assert caplog.records == []
    assert models.emulated_bf16("cuda") is None  # a GPU computes bf16 itself


def test_dtype_fast_is_bf16_only_where_the_device_computes_it(monkeypatch: pytest.MonkeyPatch, pretend_cpu) -> None:
    """ "fast" picks bf16 on a GPU and on a CPU with bf16 matrix units, fp32 on a CPU that would emulate
    bf16 (about 6 times slower than fp32 there)."""
    cpu = torch.device("cpu")
    pretend_cpu("AVX2 EPYC", [])
    assert resolve_dtype("fast", cpu) == torch.float32
    pretend_cpu("Xeon", ["amx_bf16"])
    assert resolve_dtype("fast", cpu) == torch.bfloat16
    assert resolve_dtype("fast", torch.device("cuda")) == torch.bfloat16


# -- Hub ids and revisions, from a Hub cache laid out as huggingface_hub writes it ------------------

MAIN, STEP = "a" * 40, "b" * 40


@pytest.fixture
def hub_cache(tmp_path: Path, tokenizer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``acme/tiny`` with branches main and step100 (other weights), and ``tinygpt`` (no organisation),
    in an offline Hub cache: what a user has after downloading them once."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"

    def publish(repo: str, refs: dict[str, tuple[str, int]]) -> None:
        folder = cache / ("models--" + repo.replace("/", "--"))
        for ref, (commit, seed) in refs.items():
            if not (folder / "snapshots" / commit).exists():
                save(folder / "snapshots" / commit, tokenizer, seed=seed)
            (folder / "refs").mkdir(parents=True, exist_ok=True)
            (folder / "refs" / ref).write_text(commit)

    publish("acme/tiny", {"main": (MAIN, 0), "step100": (STEP, 1)})
    publish("tinygpt", {"main": ("c" * 40, 2)})
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_revisions_load_their_own_weights_and_are_recorded(hub_cache: Path) -> None:
    main, _ = load_model("acme/tiny", device="cpu")
    step, _ = load_model("acme/tiny", revision="step100", device="cpu")
    by_commit, _ = load_model("acme/tiny", revision=STEP, device="cpu")
    assert not torch.equal(first_weight(main), first_weight(step))
    assert torch.equal(first_weight(step), first_weight(by_commit))
    ident = model_identity(step)
    assert ident["model"] == "acme/tiny" and ident["requested_revision"] == "step100"
    assert ident["commit"] == STEP and ident["revision"] == STEP  # the weights' identity is the commit
    assert model_identity(main)["commit"] == MAIN and model_identity(main)["requested_revision"] == ""


def test_a_hub_id_without_organisation_works(hub_cache: Path) -> None:
    model, tokenizer = load_model("tinygpt", device="cpu")
    assert model_identity(model)["commit"] == "c" * 40 and len(tokenizer) > 0


def test_unknown_revision_and_unknown_model_are_clear_errors(hub_cache: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="model 'acme/tiny' not found"):
        load_model("acme/tiny", revision="step999", device="cpu")
    with pytest.raises(ModelNotFoundError, match="give a local directory, a Hub id"):
        load_model("no-such-model", device="cpu")
    with pytest.raises(ModelNotFoundError, match="not found"):
        load_model("./not/a dir", device="cpu")


def test_revision_of_a_local_directory_is_refused(bf16_dir: Path) -> None:
    with pytest.raises(ValueError, match="local directory"):
        load_model(str(bf16_dir), revision="main", device="cpu")


def _restamped(source: Path, target: Path, **changes) -> Path:
    """A copy of a checkpoint whose config.json is written again as save_pretrained writes it."""
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, **changes}, indent=2, sort_keys=True) + "\n")
    return target


def test_the_fingerprint_ignores_the_transformers_version_that_wrote_the_config(bf16_dir: Path, tmp_path: Path) -> None:
    """The same weights and config converted by another transformers keep their identity (and the
    identity recorded before: the raw bytes of a config stamped 5.24.0); any other config value moves it."""
    from headstats.io.fingerprint import files_digest, weight_files

    old = _restamped(bf16_dir, tmp_path / "old", transformers_version="5.24.0")
    new = _restamped(bf16_dir, tmp_path / "new", transformers_version="5.25.0")
    other = _restamped(bf16_dir, tmp_path / "other", transformers_version="5.25.0", rms_norm_eps=1e-3)
    recorded = hashlib.sha256((old / "config.json").read_bytes())
    recorded.update(files_digest((f.name, f) for f in weight_files(old)).encode())
    assert directory_fingerprint(old) == "sha256:" + recorded.hexdigest()[:16]
    assert directory_fingerprint(new) == directory_fingerprint(old)
    assert directory_fingerprint(other) != directory_fingerprint(new)


@pytest.fixture
def from_pretrained_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    seen: list[dict] = []
    real = AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    return seen


def test_hub_options_reach_transformers(bf16_dir: Path, from_pretrained_calls: list[dict]) -> None:
    load_model(str(bf16_dir), device="cpu")
    call = from_pretrained_calls[-1]
    assert call["trust_remote_code"] is False and call["attn_implementation"] == "headstats"
    assert "device_map" not in call and "token" not in call
    load_model(str(bf16_dir), device="cpu", trust_remote_code=True, token="hf_x")
    assert from_pretrained_calls[-1]["trust_remote_code"] is True and from_pretrained_calls[-1]["token"] == "hf_x"


def test_device_map_places_the_model_with_accelerate(bf16_dir: Path, from_pretrained_calls: list[dict]) -> None:
    model, _ = load_model(str(bf16_dir), device_map="auto")
    assert from_pretrained_calls[-1]["device_map"] == "auto"
    assert {p.device.type for p in model.parameters()} == {"cpu"}  # the only device here
    with pytest.raises(ValueError, match="not both"):
        load_model(str(bf16_dir), device="cpu", device_map="auto")


# -- one clear message per broken input -------------------------------------------------------------


@pytest.fixture(scope="module")
def inline_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    """A model whose attention is computed inline (not through AttentionInterface)."""
    path = tmp_path_factory.mktemp("inline")
    InlineForCausalLM(InlineConfig(vocab_size=len(tokenizer))).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_inline_attention_is_refused_with_the_interface_message(inline_dir: Path) -> None:
    with pytest.raises(UnsupportedModelError, match="does not use transformers' AttentionInterface"):
        load_model(str(inline_dir), device="cpu")
    inline = AutoModelForCausalLM.from_pretrained(inline_dir)
    assert type(inline) is InlineForCausalLM
    with pytest.raises(UnsupportedModelError, match="does not use transformers' AttentionInterface"):
        headstats.score_sequences(inline, [[1, 2, 3]], 1, progress=False)


def broken_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def test_config_without_model_type_names_config_json(bf16_dir: Path, tmp_path: Path) -> None:
    path = broken_copy(bf16_dir, tmp_path / "no_type")
    config = json.loads((path / "config.json").read_text())
    del config["model_type"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"config\.json has no 'model_type'") as err:
        load_model(str(path), device="cpu")
    assert "sentencepiece" not in str(err.value) and "\n" not in str(err.value)


def test_weights_holding_a_pickle_are_a_one_line_error(bf16_dir: Path, tmp_path: Path) -> None:
    path = broken_copy(bf16_dir, tmp_path / "pickled")
    state = load_model(str(bf16_dir), device="cpu")[0].state_dict()
    (path / "model.safetensors").unlink()
    torch.save({**state, "extra": Path("x")}, path / "pytorch_model.bin")  # not plain tensors
    with pytest.raises(ModelLoadError, match="holds a pickle") as err:
        load_model(str(path), device="cpu")
    assert "\n" not in str(err.value)


def test_damaged_safetensors_and_missing_tokenizer(bf16_dir: Path, tmp_path: Path) -> None:
    damaged = broken_copy(bf16_dir, tmp_path / "damaged")
    (damaged / "model.safetensors").write_bytes(b"\x07" * 64)
    with pytest.raises(ModelLoadError, match="damaged"):
        load_model(str(damaged), device="cpu")
    no_tokenizer = broken_copy(bf16_dir, tmp_path / "no_tokenizer")
    for f in no_tokenizer.glob("tokenizer*"):
        f.unlink()
    with pytest.raises(ModelLoadError, match="no usable tokenizer"):
        load_model(str(no_tokenizer), device="cpu")


def test_errors_are_value_errors_so_the_cli_prints_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for cls in (ModelLoadError, ModelNotFoundError, UnsupportedModelError):
        assert issubclass(cls, ValueError)
    from huggingface_hub import constants

    # Where the Hub answers, a Hub id passes as is (offline, one not in the HF cache is refused at once).
    monkeypatch.setattr(model_paths, "_HUB", {"reachable": True})
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert models.resolve_model_path("gpt2") == "gpt2"  # a Hub id without organisation
    assert models.resolve_model_path("EleutherAI/pythia-70m") == "EleutherAI/pythia-70m"
