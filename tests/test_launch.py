"""Grids through submitit: the merged result of a grid equals a single-process run, a killed job
resumes without duplicates, and the SLURM array path submits what it was asked to.

Models are tiny random Llamas saved with ``save_pretrained`` (with a word-level tokenizer), datasets
are user ``.txt`` / ``.jsonl`` files. The local executor runs every job in its own process; the
SLURM test puts a stand-in ``sbatch``/``srun``/``sacct`` on PATH that runs the array's tasks as
local processes with the environment SLURM gives them, so submitit's real SLURM executor and job
environment are exercised end to end.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import headstats
from headstats.cli import build_parser, main
from headstats.cli.options import spec_from_args
from headstats.io import store
from headstats.jobs import grid as launch
from headstats.jobs.collect import collect_scores
from headstats.options import SpecError
from headstats.specs import CollectSpec, Resources

pytest.importorskip("submitit")

WORDS = [f"w{i}" for i in range(60)]
KEY = ["model", "dataset", "sample_id", "layer", "head"]


def _documents(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(4, 24))) for _ in range(n)]


def _save_model(path: Path, seed: int, layers: int, heads: int, kv: int) -> str:
    vocab = {w: i for i, w in enumerate(["<pad>", "<s>", "</s>", "<unk>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=64,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def grid_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("grid-inputs")
    model_a = _save_model(root / "tiny-a", 0, 2, 4, 2)
    model_b = _save_model(root / "tiny-b", 1, 3, 2, 1)
    web = root / "web.txt"
    web.write_text("\n\n".join(_documents(12, 0)) + "\n")
    notes = root / "notes.jsonl"
    notes.write_text("".join(json.dumps({"text": t}) + "\n" for t in _documents(9, 1)))
    big = root / "big.txt"  # long enough that a job can be killed half-way
    big.write_text("\n\n".join(_documents(160, 2)) + "\n")
    return {"models": [model_a, model_b], "web": str(web), "notes": str(notes), "big": str(big)}


def _single_process(models: list[str], datasets: list[str], out: Path) -> pd.DataFrame:
    for name in models:
        model, tokenizer = headstats.load_model(name, device="cpu")
        for dataset in datasets:
            collect_scores(model, tokenizer, dataset, out, batch_size=2, progress=False)
    return _sorted(store.read_scores(out))


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(KEY).reset_index(drop=True)


def test_jobs_that_would_write_the_same_partition_are_refused_before_submission(grid_inputs, tmp_path) -> None:
    model = grid_inputs["models"][0]
    twin = tmp_path / "elsewhere" / "tiny-a"  # a different checkpoint with the same directory name
    twin.parent.mkdir()
    os.symlink(model, twin)
    jobs = launch.collect_jobs([model, str(twin)], [grid_inputs["web"]], tmp_path / "out")
    with pytest.raises(ValueError, match=r"would both write to .*model=tiny-a/dataset=web"):
        launch.run_grid(jobs, "debug", folder=tmp_path / "grid")
    with pytest.raises(ValueError, match=r"unknown collection option.*batchsize"):
        launch.collect_jobs([model], [grid_inputs["web"]], tmp_path / "out", batchsize=4)
    with pytest.raises(ValueError, match=r"model '\./no-such-model' not found"):  # a bare name may be a Hub id
        launch.collect_jobs(["./no-such-model"], [grid_inputs["web"]], tmp_path / "out")
    with pytest.raises(ValueError, match="unknown launcher 'pbs'"):
        launch.run_grid(jobs[:1], "pbs", folder=tmp_path / "grid")  # type: ignore[arg-type]


def test_debug_grid_merges_into_the_single_process_table_and_reruns_skip_finished_jobs(grid_inputs, tmp_path) -> None:
    models, datasets = grid_inputs["models"], [grid_inputs["web"], grid_inputs["notes"]]
    expected = _single_process(models, datasets, tmp_path / "single")
    out = tmp_path / "grid"
    result = launch.collect_grid(models, datasets, out, launcher="debug", device="cpu", batch_size=2, progress=False)
    assert len(result.finished) == 4 and not result.failed
    merged = _sorted(store.read_scores(out))
    pd.testing.assert_frame_equal(merged, expected)
    partitions = {job.outputs()[0] for job in launch.collect_jobs(models, datasets, out)}
    assert len(partitions) == 4 and {p.parent for p in out.rglob(f"{launch.MARKER_PREFIX}.json")} == partitions
    again = launch.collect_grid(models, datasets, out, launcher="debug", device="cpu", batch_size=4, progress=False)
    assert len(again.skipped) == 4 and not again.finished  # batch size does not change what a job produces
    changed = launch.collect_grid(models[:1], datasets[:1], out, launcher="debug", limit=5, progress=False)
    assert len(changed.finished) == 1  # other settings: the job runs again (and resumes: nothing new to score)
    assert changed.finished[0].result.n_new == 0


def _job_process(ancestor: int) -> int:
    """The process running the job's Python code: a descendant of submitit's local controller."""
    parents, commands = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                commands[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue

    def descends(pid: int) -> bool:
        while pid in parents and pid != ancestor:
            pid = parents[pid]
        return pid == ancestor

    (task,) = [p for p, cmd in commands.items() if b"submitit.core._submit" in cmd and descends(p)]
    return task


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the job's process through /proc")
def test_local_grid_resumes_a_killed_job_without_duplicates(grid_inputs, tmp_path) -> None:
    models, datasets = grid_inputs["models"], [grid_inputs["web"], grid_inputs["big"]]
    out, folder = tmp_path / "grid", tmp_path / "grid-logs"
    jobs = launch.collect_jobs(models, datasets, out, device="cpu", batch_size=2, rows_per_part=1, progress=False)
    victim = next(i for i, j in enumerate(jobs) if j.name == f"collect {models[1]} on {grid_inputs['big']}")
    partition = jobs[victim].outputs()[0]
    resources = Resources(
        launcher="local", folder=str(folder), array_parallelism=4, executor_params={"cpus_per_task": 1}, poll_s=0.05
    )
    submission = launch.submit_grid(jobs, resources, progress=False)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(submission.wait)
        deadline = time.monotonic() + 120
        while not (partition.is_dir() and len(store.data_files(partition)) >= 3):
            assert time.monotonic() < deadline, "the job never wrote a part"
            assert not waiting.done(), waiting.exception()
            time.sleep(0.02)
        os.kill(_job_process(submission.submitted[victim]._process.pid), signal.SIGKILL)  # as the OOM killer would
        error = waiting.exception(timeout=120)
    assert not (partition / store.DONE_FILE).exists() and not jobs[victim].marker.exists()
    assert isinstance(error, launch.GridError)
    assert f"collect {models[1]} on {grid_inputs['big']}" in str(error) and "exited without a result" in str(error)
    assert "re-run the same command" in str(error)
    assert [o.status for o in error.result.outcomes].count("finished") == 3
    partial = len(pd.read_parquet(partition, columns=["sample_id"])["sample_id"].unique())
    assert 0 < partial < 160

    rerun = launch.run_grid(jobs, resources, progress=False)
    assert len(rerun.skipped) == 3 and len(rerun.finished) == 1
    resumed = rerun.finished[0].result
    assert resumed.n_samples == 160 and resumed.n_new == 160 - partial  # resumed, not restarted

    merged = _sorted(store.read_scores(out))
    assert not merged.duplicated(KEY).any()
    expected = _single_process(models, datasets, tmp_path / "single")
    # The resumed job batched its sequences differently: equal up to fp32 round-off.
    pd.testing.assert_frame_equal(merged, expected, check_exact=False, rtol=1e-5, atol=1e-6)


FAKE_SBATCH = """#!{python}
import os, re, subprocess, sys
script = sys.argv[-1]
text = open(script).read()
with open(os.environ["FAKE_SLURM_RECORD"], "a") as f:
    f.write(text + "\\n=====\\n")
job_id = str(4242 + sum(1 for _ in open(os.environ["FAKE_SLURM_RECORD"])) % 1000)
array = re.search(r"#SBATCH --array=0-(\\d+)", text)
for i in range(int(array.group(1)) + 1 if array else 1):
    env = dict(os.environ, SLURM_JOB_ID=job_id + str(i), SLURM_NTASKS="1", SLURM_JOB_NUM_NODES="1",
               SLURM_NODEID="0", SLURM_PROCID="0", SLURM_LOCALID="0")
    if array:
        env.update(SLURM_ARRAY_JOB_ID=job_id, SLURM_ARRAY_TASK_ID=str(i))
    else:
        env["SLURM_JOB_ID"] = job_id
    subprocess.Popen(["bash", script], env=env, start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("Submitted batch job " + job_id)
"""

FAKE_SRUN = """#!{python}
import os, sys
args = sys.argv[1:]
streams = {{}}
while args and args[0].startswith("--"):
    flag = args.pop(0)
    if flag in ("--output", "--error"):
        streams[flag] = args.pop(0)
env = os.environ
names = {{"%A": env.get("SLURM_ARRAY_JOB_ID", ""), "%a": env.get("SLURM_ARRAY_TASK_ID", ""),
         "%j": env["SLURM_JOB_ID"], "%t": "0"}}
for flag, fd in (("--output", 1), ("--error", 2)):
    path = streams[flag]
    for k, v in names.items():
        path = path.replace(k, v)
    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), fd)
os.execvp(args[0], args)
"""

FAKE_SACCT = """#!{python}
print("JobID|State|NodeList")
"""


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "fake-slurm-bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", FAKE_SRUN), ("sacct", FAKE_SACCT)):
        (bin_dir / name).write_text(text.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "sbatch-scripts.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_RECORD", str(record))
    return record


def test_slurm_array_runs_every_job_and_reports_a_failure_with_its_traceback(grid_inputs, tmp_path, fake_slurm) -> None:
    out = tmp_path / "grid"
    (good,) = launch.collect_jobs([grid_inputs["models"][0]], [grid_inputs["notes"]], out, device="cpu", progress=False)
    missing = tmp_path / "never-written.txt"
    bad = launch.FunctionJob(
        "remove a file that is not there", os.remove, {"path": str(missing)}, output_paths=(str(tmp_path / "bad"),)
    )
    with pytest.raises(launch.GridError) as caught:
        launch.run_grid(
            [good, bad],
            "slurm",
            folder=str(tmp_path / "grid-logs"),
            array_parallelism=1,
            # submitit's own parameter names, passed through unchanged
            executor_params={
                "slurm_partition": "gpu-small",
                "gpus_per_node": 1,
                "timeout_min": 30,
                "mem_gb": 12,
                "cpus_per_task": 3,
                "slurm_setup": ["echo setting up"],
                "slurm_account": "proj-7",
                "slurm_qos": "high",
                "slurm_constraint": "a100",
            },
            poll_s=0.2,
            progress=False,
        )
    message = str(caught.value)
    assert "1 of 2 jobs failed" in message and "- remove a file that is not there (job " in message
    assert "FileNotFoundError" in message and str(missing) in message and "_log.err" in message
    assert [o.status for o in caught.value.result.outcomes] == ["finished", "failed"]
    assert good.is_complete() and not bad.is_complete()
    table = store.read_scores(out)
    dataset = good.outputs()[0].name.split("=", 1)[1]  # notes-<content hash>
    assert table["sample_id"].nunique() == 9 and set(table["dataset"]) == {dataset} and dataset.startswith("notes")
    script = fake_slurm.read_text()
    for line in ("--array=0-1%1", "--partition=gpu-small", "--gpus-per-node=1", "--mem=12GB", "--time=30"):
        assert f"#SBATCH {line}" in script
    assert "#SBATCH --cpus-per-task=3" in script and "echo setting up" in script
    for line in ("--account=proj-7", "--qos=high", "--constraint=a100"):  # options headstats never renamed
        assert f"#SBATCH {line}" in script


def test_a_failure_read_before_its_log_holds_the_traceback_still_names_the_error(tmp_path) -> None:
    # submitit pickles a raised job's traceback before the job's process prints it to its log, so the
    # failure can be seen while the log lacks it (CI caught exactly that): the pickled trace is quoted.
    import submitit

    missing = tmp_path / "never-written.txt"
    executor = submitit.AutoExecutor(folder=tmp_path / "logs", cluster="local")
    sjob = executor.submit(os.remove, str(missing))
    sjob.wait()
    log = sjob.paths.stderr
    assert "FileNotFoundError" in log.read_text()
    log.write_text("headstats: removing a file\nTraceback (most recent call last):\n")  # the log as seen mid-write
    job = launch.FunctionJob("remove a file that is not there", os.remove, {"path": str(missing)}, output_paths=())
    outcome = launch._outcome(job, sjob)
    assert outcome.status == "failed"
    raised = [line for line in outcome.error.splitlines() if line.startswith("FileNotFoundError")]
    assert len(raised) == 1 and str(missing) in raised[0]


def test_launcher_flags_map_to_submitit_parameters_unchanged(capsys) -> None:
    parser = build_parser()
    base = ["collect", "--model", "m", "--dataset", "mmlu", "--out", "o"]
    options = "--launcher slurm --slurm-partition a100 --gpus-per-node 2 --timeout-min 90 --mem-gb 64"
    options += " --array-parallelism 3 --grid-folder logs"
    extra = ["--slurm-setup", "module load cuda,gcc", "--slurm-setup", "source .venv/bin/activate"]
    extra += ["--executor-param", "slurm_account=abc", "--executor-param", 'slurm_additional_parameters={"x": 1}']
    resources = spec_from_args(parser.parse_args([*base, *options.split(), *extra]), Resources)
    assert resources.launcher == "slurm" and resources.folder == "logs" and resources.array_parallelism == 3
    assert resources.submitit_parameters() == {
        "slurm_partition": "a100",
        "gpus_per_node": 2,
        "timeout_min": 90,
        "mem_gb": 64.0,
        "slurm_setup": ["module load cuda,gcc", "source .venv/bin/activate"],  # a shell line is never split
        "slurm_account": "abc",
        "slurm_additional_parameters": {"x": 1},
    }
    params = launch.executor_parameters(resources)
    assert params["slurm_array_parallelism"] == 3 and params["timeout_min"] == 90 and params["mem_gb"] == 64.0
    # Defaults where nothing was given: slurm 60 minutes, 32 GB; local: no time limit.
    slurm = launch.executor_parameters(Resources(launcher="slurm"))
    assert slurm["timeout_min"] == 60 and slurm["mem_gb"] == 32 and slurm["gpus_per_node"] == 0
    local = spec_from_args(parser.parse_args([*base, "--launcher", "local", "--cpus-per-task", "2"]), Resources)
    assert local.folder is None and local.submitit_parameters() == {"cpus_per_task": 2}
    local_params = launch.executor_parameters(local)
    assert local_params["timeout_min"] == launch.LOCAL_NO_LIMIT_MIN
    assert "export OMP_NUM_THREADS=2" in local_params["local_setup"]
    assert spec_from_args(parser.parse_args(base), Resources).launcher is None
    with pytest.raises(SpecError, match="--array-parallelism must be at least 1"):
        spec_from_args(parser.parse_args([*base, "--launcher", "local", "--array-parallelism", "0"]), Resources)
    with pytest.raises(ValueError, match="no launcher given"):
        launch.make_executor(Resources(), "logs")
    with pytest.raises(SpecError, match="mem_gb: given twice"):
        Resources(launcher="slurm", mem_gb=8, executor_params={"mem_gb": 16})
    # Without a launcher the work runs in this process: a job's setting is refused, not ignored.
    for flags in ("--slurm-partition a100", "--array-parallelism 3", "--grid-folder logs", "--executor-param q=1"):
        flag = flags.split()[0]
        with pytest.raises(SpecError) as bad:
            spec_from_args(parser.parse_args([*base, *flags.split()]), Resources)
        assert str(bad.value) == (
            f"{flag} is a setting of grid jobs, which run only with a launcher: add --launcher slurm (or local, "
            "debug), or leave it out to run here"
        )
    # A confirmation runs its paths in this process: a launcher, or a job's setting, is refused with the
    # way to spread them (not with advice to add the launcher it refuses).
    for flags in ("--launcher local", "--slurm-partition a100"):
        assert main(["run", "analyses/confirm.toml", *flags.split(), "--dry-run"]) == 2
        assert (
            f"{flags.split()[0]}: a confirmation file runs its paths in this process, one after another; to spread "
            "them over jobs, run headstats run analyses/confirm.toml --paths PATH --models MODEL --stages ablate in "
            "each, then --stages report once"
        ) in capsys.readouterr().err


def test_a_job_is_complete_once_its_work_succeeded_with_the_same_settings(tmp_path) -> None:
    """What makes a rerun (or a copy requeued in another process) skip a job: the marker its
    successful work wrote, holding the settings that decide what it produces."""
    out = tmp_path / "o"
    spec = CollectSpec(batch_size=2, limit=5)

    def job(spec: CollectSpec = spec, **kwargs: object) -> launch.FunctionJob:
        kwargs = {"name": str(out / "made"), "exist_ok": True, **kwargs}
        return launch.FunctionJob("make a folder", record_spec, {**kwargs, "spec": spec}, output_paths=(str(out),))

    first = job()
    assert not first.is_complete()
    first()
    copy = pickle.loads(pickle.dumps(first))  # as submitit ships it to a job process
    assert copy.is_complete() and copy.outputs() == first.outputs() and (out / "made").is_dir()
    assert job(replace(spec, batch_size=4)).is_complete()  # a runtime option does not change what it produces
    assert not job(replace(spec, limit=6)).is_complete()
    assert not job(exist_ok=False).is_complete()
    failing = launch.FunctionJob("fail", os.rmdir, {"path": str(tmp_path / "absent")}, output_paths=(str(tmp_path),))
    with pytest.raises(FileNotFoundError):
        failing()
    assert not failing.marker.exists() and not failing.is_complete()


def record_spec(name: str, exist_ok: bool, spec: CollectSpec) -> int:
    os.makedirs(name, exist_ok=exist_ok)
    return spec.limit or 0
