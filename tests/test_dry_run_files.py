"""A dry run reads a model from its files alone (headstats.io.model_files): its cost from config.json equals
what its shapes give, its tokens from tokenizer.json equal transformers' tokenizer's, so the dry run read
that way is the dry run read through transformers, and it imports neither torch nor transformers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from headstats.engine.cost import CONFIG_LAYOUTS, config_cost

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["One short text.", " a leading space", "Tabs\tand  two spaces\n\nand lines.", "émoji 😀 and 中文", ""]


def _saved_config(config, folder: Path) -> dict:
    config.save_pretrained(folder)
    return json.loads((folder / "config.json").read_text())


def _configs():
    from families import COMMON, CONFIGS
    from transformers import GemmaConfig, LlamaConfig

    extra = {
        "gemma": lambda: GemmaConfig(**COMMON, head_dim=16),
        "llama_biased": lambda: LlamaConfig(**COMMON, attention_bias=True, mlp_bias=True),
    }
    return {**CONFIGS, **extra}


@pytest.mark.parametrize("family", list(_configs()))
def test_the_cost_from_a_config_is_the_cost_of_its_shapes_or_none(family: str, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from headstats.engine.speed import inference_cost

    config = _configs()[family]()
    saved = _saved_config(config, tmp_path)
    for dtype in (torch.float32, torch.bfloat16):
        cost = config_cost(saved, torch.empty(0, dtype=dtype).element_size())
        if saved["model_type"] not in CONFIG_LAYOUTS:  # Phi-3's and Falcon's fused projections: not read here
            assert cost is None
            continue
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config, dtype=dtype)
        assert cost == inference_cost(skeleton)
    # A configuration that leaves its layers' windows to its class's defaults is not read alone.
    if saved.get("layer_types") and saved.get("sliding_window"):
        assert config_cost({k: v for k, v in saved.items() if k != "layer_types"}, 4) is None


def _renderings(tokenizer, questions, formats) -> dict:
    """Every (context, continuation) token pair and document encoding each prompt format gives."""
    from headstats.io.tasks import PromptRenderer, resolve_format

    out = {}
    for name in formats:
        renderer = PromptRenderer(resolve_format(name, tokenizer, model_name="tiny"), tokenizer)
        out[name] = (
            [renderer.requests(q) for q in questions],
            [renderer.encode(renderer.document(t)) for t in TEXTS if t],
            [renderer.encode(t) for t in TEXTS],
        )
    return out


@pytest.mark.parametrize("adds_bos", [False, True])
def test_a_tokenizer_read_from_its_files_tokenises_as_transformers_does(
    adds_bos: bool, data_dir: Path, tmp_path: Path
) -> None:
    from test_tasks import make_tokenizer

    from headstats.io.tasks import load_task
    from headstats.io.tokenizer_files import FileTokenizer

    made = make_tokenizer(adds_bos=adds_bos)
    made.save_pretrained(tmp_path)
    read = FileTokenizer(tmp_path)
    assert (read.bos_token, read.bos_token_id, read.eos_token_id) == (made.bos_token, 1, 2)
    questions = [q for task in ("mmlu", "piqa") for q in load_task(task, data_dir=data_dir).questions]
    formats = ("tokenizer", "plain", "bos", "chat", "paper")
    assert _renderings(read, questions, formats) == _renderings(made, questions, formats)


@pytest.mark.integration  # the embedded models' own tokenizers, on the bundled tasks
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_the_embedded_tokenizers_read_from_their_files_tokenise_as_transformers_does(name: str) -> None:
    from transformers import AutoTokenizer

    from headstats.io import assets
    from headstats.io.tasks import load_task
    from headstats.io.tokenizer_files import FileTokenizer

    folder = assets.embedded_model(name)
    made, read = AutoTokenizer.from_pretrained(folder), FileTokenizer(folder)
    questions = [q for task in ("mmlu", "piqa") for q in load_task(task, limit=24, seed=0).questions]
    formats = ("tokenizer", "plain", "bos", "paper") + (("chat",) if made.chat_template else ())
    assert _renderings(read, questions, formats) == _renderings(made, questions, formats)


@pytest.fixture(scope="module")
def study_files(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> list[Path]:
    """An analysis file (a collection of a task's prompts and a zeroing sweep) and a frontier file of a tiny
    Llama saved with the synthetic tokenizer, none of their work done: a dry run reads the model to count
    it. (A collection of a user's own text file is read by the datasets library's streaming reader, which
    imports torch itself where it is installed.)"""
    from families import tiny_model
    from test_tasks import make_tokenizer

    root = tmp_path_factory.mktemp("dry-run-files")
    tokenizer, model = make_tokenizer(adds_bos=True), tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    head = f'results = "{root / "results"}"\nreport = "{root / "report"}"\n[models]\nnames = ["{root / "model"}"]\n'
    analysis, frontier = root / "analysis.toml", root / "frontier.toml"
    analysis.write_text(
        f'{head}[collect]\ndatasets = ["piqa"]\ndata_dir = "{data_dir}"\nbatch_size = 2\n[[ablate]]\ntask = "mmlu"\n'
        f'data_dir = "{data_dir}"\nscores = ["ahon_ln", "random"]\ntargets = [0, 0.1]\nbatch_size = 2\n'
    )
    frontier.write_text(
        f'{head}[prune]\ntasks = ["piqa", "mmlu"]\ndata_dir = "{data_dir}"\nscores = ["random"]\nshares = [0, 0.5]\n'
    )
    return [analysis, frontier]


def test_a_dry_run_read_from_files_is_the_dry_run_read_through_transformers(
    study_files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from headstats.io import model_files
    from headstats.studies import dry_run, load_study
    from headstats.studies.dryrun import FILES_READ

    def needs_transformers(*args: object, **kwargs: object):
        raise model_files.NeedsTransformers("the test asks for it")

    for path in study_files:
        light = dry_run(load_study(path), device="cpu")
        with monkeypatch.context() as patched:
            patched.setattr(model_files, "read_model_files", needs_transformers)
            through = dry_run(load_study(path), device="cpu")
        (model,) = light.read
        assert light.read == {model: FILES_READ}
        assert through.read[model].startswith("with transformers, as the test asks for it")
        assert light.units == through.units and all(u.passes_left and u.tokens for u in light.units)

        def said(run) -> list[str]:
            return [line for line in run.summary().splitlines() if not line.startswith("Read ")]

        assert said(light) == said(through)
        assert f"Read {FILES_READ}: {model}." in light.summary()


def test_a_dry_run_imports_neither_torch_nor_transformers(study_files: list[Path]) -> None:
    """The property, in a fresh process: after a dry run that read its model, neither library was imported."""
    check = (
        "import sys\nfrom headstats.cli import main\n"
        "status = main(['run', sys.argv[1], '--dry-run', '--device', 'cpu', '-q'])\n"
        "print('imported:', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
        "sys.exit(status)\n"
    )
    for path in study_files:
        done = subprocess.run([sys.executable, "-c", check, str(path)], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "Read from their files, without torch or transformers" in done.stdout  # the model was read
        assert done.stdout.rstrip().endswith("imported: []")


def test_a_hub_model_not_in_the_cache_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from headstats.io import model_paths
    from headstats.io.model_files import read_model_files

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(model_paths, "hub_reachable", lambda timeout=3.0: True)  # found on the Hub, not here
    with pytest.raises(model_paths.ModelNotFoundError) as err:
        read_model_files("some-org/some-model")
    assert "not in the local Hugging Face cache" in str(err.value)
    assert "hf download some-org/some-model" in str(err.value) and "--probe" in str(err.value)
