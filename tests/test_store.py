"""The results layout (docs/design.md#table-layout) and its one owner, headstats.io.store: atomic checksummed writes,
one writer per partition, resume checks, damage detection, reading without duplicates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headstats.io import fingerprint, store
from headstats.io.tasks import sample_order, select_sample

SCORES = ("ahon", "awft")


def score_table(sample_ids, layers: int = 2, heads: int = 3, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(sample_ids) * layers * heads
    return pa.table(
        {
            "sample_id": np.repeat(np.asarray(sample_ids, dtype=np.int64), layers * heads),
            "layer": np.tile(np.repeat(np.arange(layers, dtype=np.int16), heads), len(sample_ids)),
            "head": np.tile(np.arange(heads, dtype=np.int16), len(sample_ids) * layers),
            "kv_head": np.zeros(n, dtype=np.int16),
            "n_tokens": np.full(n, 7, dtype=np.int32),
            **{sid: rng.random(n).astype(np.float32) for sid in SCORES},
        }
    )


def write_partition(root: Path, parts: list[list[int]], settings: dict | None = None) -> Path:
    """A score partition written the way collection writes it (PartWriter under the lock)."""
    partition = store.table_dir(root, "scores", "tiny", "notes")
    prov = store.make_provenance(settings or {"model": "tiny"}, kind="scores", model="tiny", dataset="notes")
    with store.writer_lock(partition):
        writer = store.PartWriter(partition, store.score_schema(SCORES), prov, rows_per_part=1, seconds=60)
        for i, ids in enumerate(parts):
            writer.write(score_table(ids, seed=i))
        writer.close()
    return partition


# -- the vocabulary -------------------------------------------------------------------------------------


def test_one_table_of_partition_keys_names_every_kind_of_table(tmp_path: Path) -> None:
    assert store.PARTITION_KEYS == {"scores": "dataset", "interventions": "task"}
    assert store.table_dir(tmp_path, "interventions", "m", "mmlu") == tmp_path / "model=m" / "task=mmlu"
    assert store.partition_of(tmp_path / "model=m" / "dataset=web") == ("scores", "m", "web")
    assert store.partition_of(tmp_path / "model=m" / "other=web") is None
    assert store.partitioning("scores").schema.names == ["model", "dataset"]
    assert store.point_file_name("baseline", 0.0) == "baseline.parquet"
    assert store.point_file_name("awft", 0.1) == "point-awft-0.1.parquet"


def test_read_scores_gives_partition_columns_at_any_depth_and_from_the_partition_itself(tmp_path: Path) -> None:
    partition = write_partition(tmp_path / "deep" / "er", [[0, 1], [2]])
    for root in (tmp_path, partition):
        frame = store.read_scores(root)
        assert set(frame["model"]) == {"tiny"} and set(frame["dataset"]) == {"notes"} and len(frame) == 3 * 6
    parts, stray = store.find_partitions(tmp_path)
    assert [(p.kind, p.model, p.name) for p in parts] == [("scores", "tiny", "notes")] and stray == []
    assert parts[0].provenance["kind"] == "scores"


# -- writing ----------------------------------------------------------------------------------------------


def test_provenance_is_written_with_the_first_finished_part_not_before(tmp_path: Path) -> None:
    partition = store.table_dir(tmp_path, "scores", "tiny", "notes")
    prov = store.make_provenance({"model": "tiny"}, kind="scores")
    with store.writer_lock(partition):
        writer = store.PartWriter(partition, store.score_schema(SCORES), prov, rows_per_part=10**6, seconds=60)
        writer.write(score_table([0]))
        assert not (partition / store.PROVENANCE_FILE).exists() and not store.data_files(partition)
        writer.abort()
        assert sorted(p.name for p in partition.iterdir()) == [store.HOLDER_FILE, store.LOCK_FILE]
    assert not partition.exists()  # a run that finished nothing leaves no folders behind
    write_partition(tmp_path, [[0]])
    assert json.loads((partition / store.PROVENANCE_FILE).read_text())["settings"] == {"model": "tiny"}


def test_a_failed_write_leaves_the_old_file_intact_and_no_temporary(tmp_path: Path) -> None:
    path = store.write_json_atomic({"version": 1}, tmp_path / "record.json")

    def half_then_fail(tmp: Path) -> None:
        tmp.write_text('{"version": 2, "tru')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.write_atomic(path, half_then_fail)
    assert json.loads(path.read_text()) == {"version": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_every_data_file_carries_page_checksums(tmp_path: Path) -> None:
    partition = write_partition(tmp_path, [[0, 1]])
    path = store.data_files(partition)[0]
    store.write_parquet_atomic(score_table([5]), tmp_path / "single.parquet")
    for file in (path, tmp_path / "single.parquet"):
        meta = pq.read_metadata(file)
        # A checksum is stored in each data page header; reading with verification succeeds.
        assert meta.num_rows > 0
        pq.read_table(file, page_checksum_verification=True)
    assert store.WRITE_OPTIONS["write_page_checksum"] is True


def test_a_flipped_byte_in_a_part_file_is_an_error_naming_the_file_never_wrong_numbers(tmp_path: Path) -> None:
    partition = write_partition(tmp_path, [list(range(40))])
    path = store.data_files(partition)[0]
    clean = store.read_scores(tmp_path).sort_values(list(store.ROW_KEY)).reset_index(drop=True)
    data = path.read_bytes()
    footer = pq.read_metadata(path).serialized_size
    errors = 0
    for offset in np.linspace(4, len(data) - footer - 9, 150).astype(int).tolist():
        broken = bytearray(data)
        broken[offset] ^= 0xFF
        path.write_bytes(bytes(broken))
        try:
            got = store.read_scores(tmp_path).sort_values(list(store.ROW_KEY)).reset_index(drop=True)
        except store.StoreError as err:
            assert str(path) in str(err) and "delete that file" in str(err)
            errors += 1
        else:
            assert got.equals(clean), f"byte {offset} changed the numbers without an error"
    path.write_bytes(data)
    assert errors > 0
    sample_ids = pq.read_metadata(path).row_group(0).column(0)  # what a resumed collection reads
    broken = bytearray(data)
    broken[sample_ids.data_page_offset + sample_ids.total_compressed_size // 2] ^= 0x01
    path.write_bytes(bytes(broken))
    with pytest.raises(store.StoreError, match=str(path)):
        store.stored_sample_ids(partition)


def test_a_truncated_file_is_not_finished(tmp_path: Path) -> None:
    path = store.write_parquet_atomic(score_table([0]), tmp_path / "point-awft-0.1.parquet")
    assert store.is_finished_file(path)
    path.write_bytes(path.read_bytes()[:-20])
    assert not store.is_finished_file(path)
    assert not store.is_finished_file(tmp_path / "missing.parquet")


# -- one writer per partition -------------------------------------------------------------------------


def test_a_second_writer_stops_with_a_message_naming_the_first(tmp_path: Path) -> None:
    partition = tmp_path / "model=a" / "dataset=b"
    inside, release, seen = threading.Event(), threading.Event(), []

    def first() -> None:
        with store.writer_lock(partition):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(10)
    try:
        busy = pytest.raises(store.PartitionBusy, match=rf"being written by another headstats run \(pid {os.getpid()}")
        with busy, store.writer_lock(partition):
            seen.append("entered")
    finally:
        release.set()
        thread.join()
    assert seen == [] and not (partition / store.LOCK_FILE).exists()
    with store.writer_lock(partition):  # free again
        pass


HOLD_LOCK = """
import sys, time
from pathlib import Path
from headstats.io import store

with store.writer_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_writer_in_another_process_excludes_this_one_until_it_dies(tmp_path: Path) -> None:
    partition = tmp_path / "model=a" / "dataset=b"
    env = {**os.environ, "PYTHONPATH": str(Path(store.__file__).parents[3])}
    command = [sys.executable, "-c", HOLD_LOCK, str(partition)]
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        busy = pytest.raises(store.PartitionBusy, match=rf"another headstats run \(pid {holder.pid} on ")
        with busy, store.writer_lock(partition):
            pytest.fail("two writers held one partition")
        assert (partition / store.LOCK_FILE).exists()  # the refused writer leaves the holder's lock alone
    finally:
        holder.kill()
        holder.wait(60)
    with store.writer_lock(partition):  # the operating system released the dead holder's lock
        assert (partition / store.HOLDER_FILE).read_text().startswith(f"pid {os.getpid()} ")


def test_the_lock_cleans_temporaries_of_killed_runs_and_records_of_runs_that_wrote_nothing(tmp_path: Path) -> None:
    partition = tmp_path / "model=a" / "dataset=b"
    partition.mkdir(parents=True)
    (partition / ".part-dead.parquet.tmp").write_bytes(b"half a file")
    (partition / ".baseline.parquet.123.tmp").write_bytes(b"x")
    (partition / store.PROVENANCE_FILE).write_text(json.dumps({"settings": {"max_length": 1}}))
    with store.writer_lock(partition):
        assert sorted(p.name for p in partition.iterdir()) == [store.HOLDER_FILE, store.LOCK_FILE]


def test_read_scores_never_returns_a_row_twice(tmp_path: Path) -> None:
    # Two writers that did not lock (an older headstats) stored samples 1 and 2 twice.
    partition = write_partition(tmp_path, [[0, 1, 2]])
    store.write_parquet_atomic(score_table([1, 2, 3], seed=0), partition / "part-99990101000000-zzzz.parquet")
    frame = store.read_scores(tmp_path)
    assert not frame.duplicated(list(store.ROW_KEY)).any()
    assert sorted(frame["sample_id"].unique()) == [0, 1, 2, 3] and len(frame) == 4 * 6
    layer0 = store.read_scores(tmp_path, columns=["ahon"], filter=pa.compute.field("layer") == 0)
    assert len(layer0) == 4 * 3


# -- resume checks ------------------------------------------------------------------------------------------


def test_resume_check_compares_settings_and_accepts_a_folder_without_data(tmp_path: Path) -> None:
    partition = tmp_path / "model=a" / "dataset=b"
    partition.mkdir(parents=True)
    (partition / store.PROVENANCE_FILE).write_text(json.dumps({"settings": {"max_length": 1}}))
    store.check_resume(partition, {"max_length": 2048})  # no data: a failed first run blocks nothing
    write_partition(tmp_path / "x", [[0]], {"model": "tiny", "max_length": 8, "subjects": ["a"]})
    done = store.table_dir(tmp_path / "x", "scores", "tiny", "notes")
    store.check_resume(done, {"max_length": 8, "subjects": ("a",)})
    with pytest.raises(store.StoreError, match=r"different run, with other settings \(max_length: 8 there, 9 now\)"):
        store.check_resume(done, {"max_length": 9})
    (done / store.PROVENANCE_FILE).write_text(json.dumps({"model": "tiny"}))
    with pytest.raises(store.StoreError, match="without a headstats settings record"):
        store.check_resume(done, {"max_length": 8})


def test_broken_sidecars_name_the_file_and_what_to_do(tmp_path: Path) -> None:
    partition = write_partition(tmp_path, [[0]])
    (partition / store.PROVENANCE_FILE).write_text('{"settings": {"mod')
    with pytest.raises(store.StoreError, match=rf"{store.PROVENANCE_FILE} is damaged.*delete it"):
        store.read_provenance(partition)
    (partition / store.CALIBRATION_FILE).write_text("not json")
    with pytest.raises(store.StoreError, match=rf"{store.CALIBRATION_FILE} is damaged.*calibrates again"):
        store.read_calibration(partition)


def test_writability_is_checked_without_creating_anything(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    assert store.ensure_writable(target, create=False) == target and not (tmp_path / "a").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(store.StoreError, match="is a file"):
        store.ensure_writable(blocker / "sub", create=False)
    assert store.ensure_writable(target).is_dir()


# -- content identity ----------------------------------------------------------------------------------------


def test_a_file_rewritten_in_place_with_the_same_size_gets_another_digest(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HEADSTATS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"A" * 1000)
    first = fingerprint.file_digest(path)
    assert first == fingerprint.file_digest(path) and list((tmp_path / "cache" / "fingerprints").iterdir())
    path.write_bytes(b"B" * 1000)
    assert fingerprint.file_digest(path) != first
    assert fingerprint.data_identity(path, "text") != fingerprint.data_identity(path, "body")


# -- samples ----------------------------------------------------------------------------------------------


def test_stratified_samples_are_proportional_cover_every_stratum_and_nest() -> None:
    rng = np.random.default_rng(1)
    sizes = rng.integers(5, 200, size=57)
    strata = [f"s{k}" for k, n in enumerate(sizes) for _ in range(n)]
    order = sample_order(strata, seed=0)
    assert sorted(order) == list(range(len(strata)))
    assert order == sample_order(strata, seed=0) and order != sample_order(strata, seed=1)
    first57 = {strata[i] for i in order[:57]}
    assert len(first57) == 57  # every subject once at N = 57
    n = 2000
    taken = np.bincount([int(strata[i][1:]) for i in order[:n]], minlength=57)
    expected = sizes / sizes.sum() * n
    assert np.all(np.abs(taken - expected) <= 1.5)  # proportional, to within rounding
    assert set(select_sample(strata, 100, sample="random", seed=3)) <= set(
        select_sample(strata, 300, sample="random", seed=3)
    )
    assert select_sample(strata, 4, sample="first") == [0, 1, 2, 3]
    few = [strata[i] for i in select_sample(strata, 10, sample="random", seed=0)]
    assert len(set(few)) == 10  # fewer units than strata: each from another stratum
    plain = select_sample([None] * 50, 10, sample="random", seed=0)
    assert plain == sorted(plain) and len(set(plain)) == 10 and plain != list(range(10))


def test_the_lazy_dataset_reads_the_layout_only_verifies_checksums_and_refuses_duplicates(tmp_path: Path) -> None:
    partition = write_partition(tmp_path / "deep", [[0, 1], [2]])
    prov = store.make_provenance({"model": "tiny"}, kind="interventions")
    store.write_point(
        tmp_path / "model=tiny" / "task=piqa", "baseline.parquet", pa.table({"question_id": [0]}), prov, prov
    )
    # (an intervention table beside it, which is not a score table)
    dataset = store.open_dataset(tmp_path)
    table = dataset.to_table()
    assert table.num_rows == 3 * 6 and set(table.column("dataset").to_pylist()) == {"notes"}
    assert dataset.to_table(filter=pa.compute.field("model") == "other").num_rows == 0
    path = store.data_files(partition)[0]
    ahon = pq.read_metadata(path).row_group(0).column(pq.read_schema(path).names.index("ahon"))
    data = bytearray(path.read_bytes())
    data[ahon.data_page_offset + ahon.total_compressed_size - 3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match="CRC checksum verification failed"):
        store.open_dataset(partition).to_table()
    path.unlink()
    again = sorted(store.stored_sample_ids(partition))[:1]
    store.write_parquet_atomic(score_table(again), partition / "part-99990101000000-zzzz.parquet")
    with pytest.raises(store.StoreError, match="holds some samples twice"):
        store.open_dataset(tmp_path)
