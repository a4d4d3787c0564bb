"""A pass stopped part way resumes from its saved batches and gives the numbers of one that never stopped."""

from __future__ import annotations

import io
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


def test_restored_batches_move_the_progress_bar_but_not_its_rate(monkeypatch) -> None:
    """A resumed pass's bar starts at the restored sequences and times only what runs now: counted as
    work, 3,360 sequences restored in a second made a 5-hour pass read "23 minutes left"."""
    import io

    from tqdm import std

    now = [0.0]
    monkeypatch.setattr(std, "time", lambda: now[0])  # the bar's clock

    def left_after_restoring(restore) -> float:
        now[0] = 0.0
        bar = std.tqdm(total=1000, file=io.StringIO(), miniters=1, mininterval=0)
        now[0] = 1.0
        restore(bar, 900)  # in 1 s
        now[0] = 11.0
        bar.update(10)  # 10 sequences in the next 10 s: 1 per second
        info = bar.format_dict
        rate = info["rate"] or (info["n"] - info["initial"]) / info["elapsed"]
        bar.close()
        return (info["total"] - info["n"]) / rate

    assert left_after_restoring(C.advance_restored) == pytest.approx(90.0)  # 90 left at 10 in the 10 s since
    assert left_after_restoring(lambda bar, n: bar.update(n)) < 10  # counted as work: the restore's speed

    # Restored batch by batch, the bar is redrawn as often as update() would redraw it, not per batch.
    out = io.StringIO()
    now[0] = 0.0
    bar = std.tqdm(total=1000, file=out, mininterval=0.5)
    drawn = len(out.getvalue())
    for _ in range(90):
        C.advance_restored(bar, 10)  # in no time: no redraw
    assert len(out.getvalue()) == drawn and bar.n == 900
    now[0] = 1.0
    C.advance_restored(bar, 10)
    assert "910/1000" in out.getvalue()
    bar.close()


def test_a_resumed_pass_starts_its_bar_at_the_restored_sequences(
    smollm2_tiny_llama, smollm2_tokenizer, tmp_path, monkeypatch
) -> None:
    from headstats.jobs import evaluate, sweep

    bars: list = []

    class Bar(evaluate.tqdm):
        def __init__(self, *args, **kwargs) -> None:
            # Never redrawn by time: only the refresh before the first batch that runs can draw the restored count.
            super().__init__(*args, **{**kwargs, "disable": False, "file": io.StringIO(), "mininterval": 1e9})
            bars.append(self)

    model = smollm2_tiny_llama()
    monkeypatch.setattr(C, "SAVE_EVERY", 0.0)
    _, handle = count_forwards(model, stop_at=3)  # the calibration pass's first two batches saved
    with pytest.raises(Stop):
        run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path, **SWEEP)
    handle.remove()
    monkeypatch.setattr(evaluate, "tqdm", Bar)
    monkeypatch.setattr(sweep, "tqdm", Bar)
    run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path, **SWEEP)
    (points,) = [bar for bar in bars if bar.desc == "sweep points"]
    bars = [bar for bar in bars if bar.desc != "sweep points"]
    assert [(bar.initial, bar.n, bar.total) for bar in bars] == [(8, 16, 16), (0, 16, 16), (0, 16, 16)]
    # The sweep's bar leaves the baseline, which the calibration pass wrote, out of its rate.
    assert (points.initial, points.n, points.total) == (1, 3, 3)
    # The restored count is drawn before the first batch that runs, not left at the last throttled redraw.
    assert " 8/16 " in bars[0].fp.getvalue()
    # Each pass's bar says which pass it is: a log of hours of them otherwise reads "hellaswag" throughout.
    assert [bar.desc for bar in bars] == ["hellaswag baseline", "hellaswag ahon_ln @ p=0.3", "hellaswag random @ p=0.3"]


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


class FakeClocks:
    """perf_counter and process_time that move only when told to."""

    def __init__(self, monkeypatch) -> None:
        self.wall = self.cpu = 0.0
        monkeypatch.setattr(C.time, "perf_counter", lambda: self.wall)
        monkeypatch.setattr(C.time, "process_time", lambda: self.cpu)

    def run(self, wall: float, cpu: float) -> None:
        self.wall += wall
        self.cpu += cpu


def one_batch(first: int) -> C.DoneBatch:
    return C.DoneBatch(np.array([first]), [np.array([-1.0, -2.0])], np.array([0.0]))


def test_a_resumed_pass_counts_the_time_and_machines_of_every_session(tmp_path, monkeypatch) -> None:
    clocks = FakeClocks(monkeypatch)
    path = tmp_path / "_partial-baseline.npz"
    avx512 = {"cpu": "EPYC", "bf16_units": ["avx512_bf16"]}
    avx2 = {"cpu": "EPYC", "bf16_units": []}
    first = C.PassCheckpoint(path, {"k": 1}, every=1e9, machine=avx512)
    for i in range(3):
        first.add(one_batch(i))
    clocks.run(wall=100.0, cpu=180.0)
    first.save()
    clocks.run(wall=40.0, cpu=80.0)  # ran past its last save, then stopped: lost
    clocks.run(wall=5000.0, cpu=0.0)  # the hours between sessions count for nothing
    second = C.PassCheckpoint(path, {"k": 1}, every=1e9, machine=avx2)
    assert second.earlier.seconds == 100.0 and second.earlier.machines == [{"machine": avx512, "batches": 3}]
    second.add(one_batch(3))
    clocks.run(wall=30.0, cpu=50.0)
    second.save()
    third = C.PassCheckpoint(path, {"k": 1}, every=1e9, machine=avx2)
    third.add(one_batch(4))
    clocks.run(wall=20.0, cpu=30.0)
    spent = third.spent()
    assert (spent.seconds, spent.cpu_seconds, spent.untimed_batches) == (150.0, 260.0, 0)
    assert spent.machines == [{"machine": avx512, "batches": 3}, {"machine": avx2, "batches": 2}]

    # A record saved before times were kept: its batches are counted as untimed.
    arrays = store.read_arrays(path)
    del arrays["spent"]
    store.write_arrays_atomic(arrays, path)
    old = C.PassCheckpoint(path, {"k": 1}, machine=avx2)
    assert old.n_sequences == 4 and old.spent().untimed_batches == 4 and old.spent().machines == []


def test_a_resumed_sweep_pass_records_every_batch_it_ran(smollm2_tiny_llama, smollm2_tokenizer, tmp_path, monkeypatch):
    model = smollm2_tiny_llama()
    monkeypatch.setattr(C, "SAVE_EVERY", 0.0)
    _, handle = count_forwards(model, stop_at=3)  # the baseline's third batch: two are saved
    with pytest.raises(Stop):
        run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path, **SWEEP)
    handle.remove()
    partition = run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path, **SWEEP)
    point = store.file_provenance(partition / "baseline.parquet")["point"]
    assert [m["batches"] for m in point["machines"]] == [4] and point["untimed_batches"] == 0
    assert point["machines"][0]["machine"]["cpu"] and point["seconds"] > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_bf16_sweep_refuses_to_join_what_other_bf16_kernels_computed(
    smollm2_tiny_llama, smollm2_tokenizer, tmp_path, monkeypatch, dtype
) -> None:
    import headstats.io.models as M
    from headstats.jobs.checkpoint import MixedKernelsError
    from headstats.jobs.sweep import refused_here
    from headstats.jobs.sweep_plan import plan_sweep

    real = M.machine_info

    def machine(units: list[str]):
        return lambda device: {**real(device), "cpu": "Test CPU", "bf16_units": units}

    model = smollm2_tiny_llama().to(dtype)
    monkeypatch.setattr(C, "SAVE_EVERY", 0.0)
    monkeypatch.setattr(M, "machine_info", machine(["avx512_bf16"]))
    _, handle = count_forwards(model, stop_at=3)
    with pytest.raises(Stop):
        run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path, **SWEEP)
    handle.remove()
    monkeypatch.setattr(M, "machine_info", machine([]))
    if dtype == torch.float32:  # fp32 products agree across machines: the pass resumes
        run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path, **SWEEP)
        return
    with pytest.raises(MixedKernelsError) as saved_batches:
        run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path, **SWEEP)
    partition = next(tmp_path.rglob("_partial-baseline.npz")).parent
    # The results folder alone tells a dry run the same, before any model is loaded.
    plan = plan_sweep(model, out=tmp_path, **SWEEP)
    assert refused_here(plan, "bfloat16", M.machine_info("cpu")) == str(saved_batches.value)
    assert refused_here(plan, "float32", M.machine_info("cpu")) is None
    isa = real("cpu")["cpu_capability"]
    assert str(saved_batches.value) == (
        f"{partition}: _partial-baseline.npz's saved batches ran in bfloat16 on Test CPU, "
        f"{real('cpu')['cores']} cores, {real('cpu')['torch_threads']} threads (avx512_bf16) (CPU kernels with "
        f"avx512_bf16 ({isa} instructions)); this machine has CPU kernels without bf16 units ({isa} instructions), "
        "whose bfloat16 products round differently "
        "(on a SmolLM2 bf16 baseline, an AVX2 CPU moved gold log-likelihoods by a median 0.15 nat from an "
        "AVX512-BF16 CPU's, more than fp32 does), so joining the two would count flips that pruning or zeroing did not "
        f"cause. Run this sweep on a machine like that one, or move {partition} away to run it whole here."
    )
    # Back on a machine like the first, the sweep finishes; a further zeroed pass elsewhere is refused.
    monkeypatch.setattr(M, "machine_info", machine(["avx512_bf16"]))
    run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path, **SWEEP)
    monkeypatch.setattr(M, "machine_info", machine(["amx_bf16", "avx512_bf16"]))
    elsewhere = r"its baseline ran in bfloat16 on Test CPU.*has CPU kernels with amx_bf16 and"
    more = {**SWEEP, "targets": [0.3, 0.6]}
    with pytest.raises(MixedKernelsError, match=elsewhere) as baseline:
        run_sweep(model, tokenizer=smollm2_tokenizer, out=tmp_path, **more)
    assert refused_here(plan_sweep(model, out=tmp_path, **more), "bfloat16", M.machine_info("cpu")) == str(
        baseline.value
    )
    monkeypatch.setattr(M, "machine_info", machine(["avx512_bf16"]))
    assert refused_here(plan_sweep(model, out=tmp_path, **more), "bfloat16", M.machine_info("cpu")) is None
    assert sorted(p.name for p in store.data_files(partition)) == sorted(FILES)


def test_which_machines_round_reduced_precision_products_alike() -> None:
    from headstats.io.machine import other_kernels

    avx2 = {"cpu": "EPYC", "bf16_units": [], "cpu_capability": "AVX2"}
    avx512 = {"cpu": "Xeon", "bf16_units": [], "cpu_capability": "AVX512"}
    bf16 = {"cpu": "EPYC", "bf16_units": ["avx512_bf16"], "cpu_capability": "AVX512"}
    amx = {"cpu": "Xeon", "bf16_units": ["avx512_bf16", "amx_bf16"], "cpu_capability": "AVX512"}
    gpu = {"cpu": "EPYC", "bf16_units": [], "gpu": "NVIDIA H200", "device": "cuda:0"}
    old_bf16 = {"cpu": "EPYC", "bf16_units": ["avx512_bf16"]}  # recorded before the instruction set was
    assert other_kernels(avx2, dict(avx2, cpu="another AVX2 CPU", torch_threads=1), "bfloat16") is None
    assert other_kernels(avx2, avx512, "bfloat16") == (
        "CPU kernels without bf16 units (AVX2 instructions)",
        "CPU kernels without bf16 units (AVX512 instructions)",
    )
    assert other_kernels(bf16, amx, "bfloat16") == (
        "CPU kernels with avx512_bf16 (AVX512 instructions)",
        "CPU kernels with amx_bf16 and avx512_bf16 (AVX512 instructions)",
    )
    assert other_kernels(old_bf16, bf16, "bfloat16") is None  # the units agree; the old record names no ISA
    assert other_kernels(old_bf16, avx2, "bfloat16") == (
        "CPU kernels with avx512_bf16",
        "CPU kernels without bf16 units",
    )
    assert other_kernels(avx2, gpu, "float16") == (
        "CPU kernels without bf16 units",
        "GPU kernels (NVIDIA H200)",
    )
    for dtype in ("float32", "float64"):
        assert other_kernels(avx2, gpu, dtype) is None  # fp32 products agree to rounding that moves no answer
    assert other_kernels(None, avx2, "bfloat16") is None and other_kernels({"cpu": "?"}, avx2, "bfloat16") is None
