"""Recorded pass speeds (headstats.io.speeds) and the dry run that times units with them without loading a
model: the closest record is taken, the cache before the table, and says where it comes from; a real run
records what it measured; the estimate is the unit's FLOPs over that speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headstats.io import speeds
from headstats.io.speeds import Speed, lookup

HERE = "AMD EPYC, 2 cores (no bf16 units)"
XEON = "Intel Xeon, 2 cores (avx512_bf16, amx_bf16)"


def _speed(machine=HERE, dtype="float32", work="evaluate", kernel="explicit", model="m", gflops=10.0, **kw) -> Speed:
    return Speed(machine, "cpu", dtype, work, kernel, model, gflops, **kw)


def test_the_closest_record_wins_and_says_how_it_differs() -> None:
    wanted = _speed(gflops=0.0)
    table = [
        _speed(gflops=30.0, machine=XEON, source="results/study"),
        _speed(gflops=20.0, model="other", source="a benchmark"),
        _speed(gflops=12.0, kernel="fused", source="a benchmark"),
    ]
    found = lookup(wanted, table=table, cache=[])
    # Same machine and kernel, another model beats the same model through another kernel (the kernel moves
    # a speed more than the model does), and any record on this machine beats another machine's.
    assert found.gflops == 20.0 and found.source == "the calibration table (a benchmark), for model other"
    exact = _speed(gflops=15.0, source="exact")
    assert lookup(wanted, table=[*table, exact], cache=[]).source == "the calibration table (exact)"
    # The cache of this account's runs beats the table at equal differences; the median of its latest records.
    cache = [_speed(gflops=g, date=f"2026-12-0{i}") for i, g in enumerate((1.0, 9.0, 8.0, 7.0, 6.0, 5.0), 1)]
    found = lookup(wanted, table=[*table, exact], cache=cache)
    assert found.gflops == 7.0 and found.source == "measured by 5 passes of runs here (latest 2026-12-06)"
    # Another dtype is the last thing matched on this device; a GPU record never times a CPU pass.
    bf16 = lookup(_speed(dtype="bfloat16"), table=table, cache=[])
    assert bf16.gflops == 20.0 and "dtype float32" in bf16.source
    gpu = Speed("H100", "cuda", "float32", "evaluate", "explicit", "m", 900.0)
    assert lookup(wanted, table=[gpu], cache=[]) is None


def test_a_run_appends_its_speed_to_the_users_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADSTATS_SPEEDS_FILE", str(tmp_path / "speeds.jsonl"))
    speeds.record(_speed(gflops=3.5))
    speeds.record(_speed(gflops=4.5, work="collect"))
    (tmp_path / "speeds.jsonl").open("a").write("not json\n")  # a damaged line is skipped, not fatal
    cached = speeds.read_cache()
    assert [(s.work, s.gflops) for s in cached] == [("evaluate", 3.5), ("collect", 4.5)]
    assert all(s.date for s in cached)
    assert json.loads((tmp_path / "speeds.jsonl").read_text().splitlines()[0])["machine"] == HERE


def test_the_committed_table_times_every_kind_of_pass_and_says_from_what() -> None:
    table = speeds.read_table()
    assert table and all(s.gflops > 0 and s.source and s.seconds > 0 for s in table)
    assert {s.kernel for s in table} == {"explicit", "fused"} and {s.dtype for s in table} == {"float32", "bfloat16"}
    for work in ("collect", "evaluate"):
        for kernel in ("explicit", "fused"):
            found = lookup(_speed(machine="a machine never seen", work=work, kernel=kernel), cache=[])
            assert found is not None and "machine " in found.source
    # A collection is timed at an evaluation's speed until one is recorded, and says so.
    if not any(s.work == "collect" for s in table):
        assert "work evaluate" in lookup(_speed(work="collect"), cache=[]).source


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    from families import tiny_model

    path = tmp_path_factory.mktemp("tiny-llama")
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_a_dry_run_reads_no_weights_and_times_units_from_recorded_speeds(
    tiny_dir: Path, tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import shutil

    import headstats.io.models as models
    from headstats.cli import main
    from headstats.engine.speed import inference_cost
    from headstats.io.tasks import collection_source
    from headstats.studies import dry_run, load_study

    monkeypatch.setenv("HEADSTATS_SPEEDS_FILE", str(tmp_path / "speeds.jsonl"))
    corpus = tmp_path / "notes.txt"
    corpus.write_text("One short text.\n\nA second text, a little longer than the first one.\n\nThe third.")
    analysis = tmp_path / "tiny.toml"
    analysis.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n'
        f'[models]\nnames = ["{tiny_dir}"]\n[collect]\ndatasets = ["{corpus}"]\nbatch_size = 2\n'
    )
    real_load = models.load_model

    def no_weights(*args, **kwargs):
        raise AssertionError("the dry run loaded a model's weights")

    monkeypatch.setattr(models, "load_model", no_weights)
    (unit,) = dry_run(load_study(analysis)).units
    # The estimate is the FLOPs of the unit's batches, counted independently here, over the recorded speed.
    skeleton, _ = models.load_skeleton(str(tiny_dir))
    lengths = [len(ids) for _, ids in collection_source(str(corpus)).iter_sequences(tokenizer)]
    flops = inference_cost(skeleton).pass_flops(lengths, 2)
    rate = speeds.lookup(
        Speed(
            speeds.machine_kind(models.machine_info("cpu")), "cpu", "float32", "collect", "explicit", str(tiny_dir), 0.0
        )
    )
    assert unit.speed_from == rate.source and rate.source.startswith("the calibration table (")
    assert unit.seconds_left == pytest.approx(flops / (rate.gflops * 1e9), rel=1e-9)
    assert main(["run", str(analysis), "--dry-run"]) == 0
    printed = capsys.readouterr()
    assert "from recorded speeds, no model loaded; speed: a = the calibration table (" in printed.out
    assert f"A real run writes: {tmp_path / 'results'} (results: score tables, sweep points)" in printed.out
    assert "reading its configuration and tokenizer (no weights)" in printed.err
    # A real run records its pass's speed; the next dry run of this model times it from that record.
    monkeypatch.setattr(models, "load_model", real_load)
    monkeypatch.setattr(speeds, "MIN_SECONDS", 0.0)
    assert main(["run", str(analysis), "--stages", "collect"]) == 0
    err = capsys.readouterr().err
    assert f"running {analysis}: 1 unit(s) with work left ({tiny_dir} collect " in err and "it writes" in err
    (measured,) = speeds.read_cache()
    assert (measured.work, measured.kernel, measured.model) == ("collect", "explicit", str(tiny_dir))
    shutil.rmtree(tmp_path / "results")
    (unit,) = dry_run(load_study(analysis)).units
    assert unit.speed_from.startswith("measured by 1 pass of runs here")
    assert unit.seconds_left == pytest.approx(flops / (measured.gflops * 1e9), rel=1e-2)  # gflops rounded
