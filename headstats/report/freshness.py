"""Is a committed report built from the inputs it sits beside? Content hashes, not timestamps.

A build records its inputs in the report's manifest (``_manifest.json``, key ``inputs``): the
results folder it read with a SHA-256 over every table and record file under it
(:func:`results_digest`), the report options, and the analysis file it was run from with that
file's SHA-256. :func:`check_report` recomputes them from the working tree: a report whose analysis
file or results changed since it was built is stale (a git checkout sets every file's time to the
checkout's, so times cannot tell). Rebuild it with ``headstats run FILE --stages report``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from headstats.io import store
from headstats.io.assets import portable_record

INPUTS_KEY = "inputs"
MANIFEST_FILE = "_manifest.json"  # headstats.report.writer's manifest, which holds INPUTS_KEY


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _input_files(results: Path) -> list[Path]:
    """The files under ``results`` that a report reads: every partition's data files (as
    :func:`headstats.io.store.data_files` finds them), records (provenance, calibration) and the saved
    batches of stopped passes (a confirmation reports what is left to run from them), at any depth (a
    confirmation keeps one results folder per computation path), and the JSON records of a fine-tuning
    seed's chain (``seed-N/_chain/``: its learning, which the report reads); locks, temporary files and
    grid logs are not inputs."""
    partial = f"{store.PARTIAL_PREFIX}*.npz"
    files: set[Path] = {p for p in results.rglob(f"{store.CHAIN_RECORDS}/*.json") if p.is_file()}
    for folder in {p.parent for pattern in ("*.parquet", partial) for p in results.rglob(pattern)}:
        if any(part.startswith((".", "_")) for part in folder.relative_to(results).parts):
            continue
        files.update(store.data_files(folder))
        files.update(p for pattern in ("_*.json", partial) for p in folder.glob(pattern) if p.is_file())
    return sorted(files)


def results_digest(results: str | os.PathLike) -> dict[str, object]:
    """``{"files": n, "sha256": ...}``: one hash over the relative path and content hash of every
    input file under ``results`` (:func:`_input_files`), so that any added, removed, renamed or
    changed table changes it."""
    root = Path(results)
    digest = hashlib.sha256()
    files = _input_files(root)
    for path in files:
        digest.update(f"{path.relative_to(root).as_posix()}\0{file_sha256(path)}\n".encode())
    return {"files": len(files), "sha256": digest.hexdigest()}


FROM_REPORT = "from_report"  # the manifest's entry that says its paths are relative to the report's folder


def report_inputs(
    results: str | os.PathLike,
    options: Mapping[str, object],
    analysis: str | os.PathLike | None = None,
    *,
    report: str | os.PathLike | None = None,
) -> dict[str, object]:
    """What a build read, as its manifest records it: paths as given where they were relative (to
    the folder the command ran in), and when one was absolute, every path relative to the
    ``report``'s folder instead (``from_report``), so that no manifest names a local folder."""
    paths = {"results": results, **({} if analysis is None else {"analysis": analysis})}
    from_report = report is not None and any(Path(p).expanduser().is_absolute() for p in paths.values())

    def recorded(path: str | os.PathLike) -> str:
        if from_report:
            assert report is not None
            return Path(os.path.relpath(Path(path).expanduser().absolute(), Path(report).absolute())).as_posix()
        return Path(path).as_posix()

    inputs: dict[str, object] = {
        "results": recorded(results),
        "results_digest": results_digest(results),
        "options_sha256": hashlib.sha256(
            json.dumps(portable_record(dict(options)), sort_keys=True, default=str).encode()
        ).hexdigest(),
    }
    if analysis is not None:
        inputs["analysis"] = recorded(analysis)
        inputs["analysis_sha256"] = file_sha256(analysis)
    if from_report:
        inputs[FROM_REPORT] = True
    return inputs


def recorded_inputs(report: str | os.PathLike) -> dict | None:
    """The inputs a report's manifest records, or None (no manifest, or a build that predates them)."""
    try:
        data = json.loads((Path(report) / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    inputs = data.get(INPUTS_KEY) if isinstance(data, dict) else None
    return inputs if isinstance(inputs, dict) else None


def check_report(report: str | os.PathLike, *, root: str | os.PathLike = ".") -> list[str]:
    """Why the report in ``report`` is stale, one sentence each (empty when it is not): its manifest
    records no inputs, or its analysis file or results (paths relative to ``root``) differ from what
    it was built from."""
    report = Path(report)
    inputs = recorded_inputs(report)
    rebuild = "rebuild it (headstats run ANALYSIS --stages report)"
    name = report.as_posix()
    if inputs is None:
        return [f"{name} records no inputs in {MANIFEST_FILE} (built before they were recorded): {rebuild}"]
    problems = []
    base = report if inputs.get(FROM_REPORT) else Path(root)
    analysis = inputs.get("analysis")
    if analysis is not None:
        path = base / str(analysis)
        if not path.is_file():
            problems.append(f"{report.as_posix()} was built from {analysis}, which is gone")
        elif file_sha256(path) != inputs.get("analysis_sha256"):
            problems.append(f"{name} is older than {analysis} (the file changed since the build): {rebuild}")
    results = base / str(inputs.get("results"))
    if not results.is_dir():
        problems.append(f"{report.as_posix()} was built from {inputs.get('results')}, which is not here")
    elif results_digest(results) != inputs.get("results_digest"):
        problems.append(
            f"{report.as_posix()} is older than its results {inputs.get('results')} (tables added, removed or "
            f"changed since the build): {rebuild}"
        )
    return problems


__all__ = ["check_report", "file_sha256", "recorded_inputs", "report_inputs", "results_digest"]
