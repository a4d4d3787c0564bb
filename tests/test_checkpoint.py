"""A pass stopped part way resumes from its saved batches and gives the numbers of one that never stopped."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from headstats.engine.probe import ForwardRecord
from headstats.io import store
from headstats.jobs import checkpoint as C
from headstats.jobs.sweep import run_sweep

# 4 HellaSwag questions are 16 sequences (one per choice): 4 batches of 4 per pass.
SWEEP = dict(task="hellaswag", scores="ahon_ln,random", targets=[0.3], limit=4, batch_size=4, progress=False)
FILES = ["baseline.parquet", "point-ahon_ln-0.3.parquet", "point-random-0.3.parquet"]


class Stop(Exception):
    """The kill of a run, at a chosen forward pass."""


def count_forwards(model: torch.nn.Module, stop_at: int | None = None) -> tuple[list[int], object]:
    calls: list[int] = []

    def hook(module: torch.nn.Module, args: object) -> None:
        calls.append(1)
        if stop_at is not None and len(calls) == stop_at:
            raise Stop

    return calls, model.register_forward_pre_hook(hook)


def partition_frames(partition: Path) -> dict[str, pd.DataFrame]:
    return {name: store.read_table(partition / name).to_pandas() for name in FILES}


def thresholds(partition: Path) -> dict:
    return store.read_calibration(partition)["thresholds"]


def test_a_sweep_stopped_inside_its_calibration_pass_and_a_zeroing_pass_resumes_bit_for_bit(
    smollm2_tiny_llama, smollm2_tokenizer, tmp_path, monkeypatch
) -> None:
    model = smollm2_tiny_llama()
    calls, handle = count_forwards(model)
    reference = run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path / "a", **SWEEP)
    handle.remove()
    assert len(calls) == 12  # calibration baseline, then ahon_ln @ 0.3 and random @ 0.3: 4 batches each

    monkeypatch.setattr(C, "SAVE_EVERY", 0.0)  # save after every batch
    out = tmp_path / "b"
    partition = out / reference.relative_to(tmp_path / "a")
    # Killed in the calibration pass's third batch: its first two are saved with their scores.
    calls, handle = count_forwards(model, stop_at=3)
    with pytest.raises(Stop):
        run_sweep(model, tokenizer=smollm2_tokenizer, out=out, **SWEEP)
    handle.remove()
    partial = store.partial_file(partition, "baseline.parquet")
    assert partial.is_file() and not store.data_files(partition)
    saved = store.read_arrays(partial)
    assert saved["sizes"].tolist() == [4, 4] and set(saved) >= {"score.ahon_ln", "n_tokens", "sample_keys"}

    # Resumed, then killed again in the second zeroing pass's second batch (after 2 + 4 + 2 forwards).
    calls, handle = count_forwards(model, stop_at=8)
    with pytest.raises(Stop):
        run_sweep(model, tokenizer=smollm2_tokenizer, out=out, **SWEEP)
    handle.remove()
    assert not partial.exists()  # the baseline and the thresholds are written: its record is gone
    assert sorted(p.name for p in store.data_files(partition)) == FILES[:2]
    assert store.read_arrays(store.partial_file(partition, FILES[2]))["sizes"].tolist() == [4]

    calls, handle = count_forwards(model)
    run_sweep(model, tokenizer=smollm2_tokenizer, out=out, **SWEEP)
    handle.remove()
    assert len(calls) == 3  # only the last pass's three unfinished batches ran
    assert not list(partition.glob("_partial-*")) and not list(partition.glob(".*"))
    assert thresholds(partition) == thresholds(reference)
    got, want = partition_frames(partition), partition_frames(reference)
    for name in FILES:
        pd.testing.assert_frame_equal(got[name], want[name], check_exact=True)
        assert (got[name]["n_zeroed"] > 0).any() or name == "baseline.parquet"


def test_a_record_of_another_pass_or_a_damaged_one_is_run_again(tmp_path, caplog) -> None:
    path = tmp_path / "_partial-point-x-0.5.npz"
    batch = C.DoneBatch(np.array([0, 3]), [np.array([-1.5, -2.25]), np.array([-0.5])], np.array([2.0, 1.0]))
    first = C.PassCheckpoint(path, {"point": "a"}, every=1e9)
    first.add(batch)
    assert not path.exists()  # not yet due
    first.save()
    again = C.PassCheckpoint(path, {"point": "a"})
    done = again.restore([0, 3])
    assert done is not None and again.n_sequences == 2 and again.restore([0]) is None and again.restore([3]) is None
    assert [v.tolist() for v in done.logliks] == [[-1.5, -2.25], [-0.5]] and done.zeroed.tolist() == [2.0, 1.0]
    with caplog.at_level(logging.INFO, logger="headstats"):
        other = C.PassCheckpoint(path, {"point": "b"})
    assert other.restore([0, 3]) is None and "another key" in caplog.text
    path.write_bytes(b"PK\x03\x04 not a zip")
    with caplog.at_level(logging.WARNING, logger="headstats"):
        damaged = C.PassCheckpoint(path, {"point": "a"})
    assert damaged.restore([0, 3]) is None and "is damaged" in caplog.text
    again.discard()
    assert not path.exists()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_recorded_scores_round_trip_exactly_in_their_own_dtype(tmp_path, dtype) -> None:
    torch.manual_seed(0)
    record = ForwardRecord(
        scores={"ahon_ln": torch.randn(2, 3, 4).to(dtype), "awft": torch.rand(2, 3, 4).to(dtype)},
        zero_mask=torch.rand(2, 3, 4) > 0.5,
        n_tokens=torch.tensor([7, 5]),
        sample_keys=torch.tensor([11, 12]),
    )
    path = tmp_path / "_partial-baseline.npz"
    saving = C.PassCheckpoint(path, {"k": 1})
    saving.add(C.DoneBatch(np.array([4, 5]), [np.zeros(2), np.ones(2)], np.zeros(2), record))
    saving.save()
    back = C.PassCheckpoint(path, {"k": 1}).restore([4, 5]).record
    for sid, tensor in record.scores.items():
        assert back.scores[sid].dtype == dtype and torch.equal(back.scores[sid], tensor)
    assert torch.equal(back.zero_mask, record.zero_mask) and torch.equal(back.sample_keys, record.sample_keys)
    assert json.loads(str(store.read_arrays(path)["key"])) == {"k": 1}
