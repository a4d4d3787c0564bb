"""Adding an option to a group that several planners read is two edits at most: its field, and its use
in the one function that applies the group (docs/developing.md#adding-an-option).

The test makes those edits on a copy of the package, nothing else touched: a new
:class:`~headstats.specs.Sampling` option, ``skip_first`` (leave out the first N documents or questions
before sampling), declared in the group and applied in ``Sampling.select``; and a new
:class:`~headstats.specs.Calibration` option, ``calibration_skip`` (leave out the first N calibration
sequences drawn), applied in ``Calibration.sequences``. Then, in a fresh process that imports the copy,
it plans every job that samples (a collection, a sweep, a prune's certification, a frontier) and
dry-runs an analysis file and a frontier file that set the option in TOML, and draws every calibration
(a sweep's thresholds, prune's and the frontier's ranking): each one's planned documents, questions or
sequences, and each dry-run row's count, must change with its option. A planner that unpacked a
group's fields itself (``limit=spec.limit, sample=spec.sample``) would plan the same work with and
without the option, and fail here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

# The edits, all in headstats/specs/groups.py (the option groups): each option's field, and its use in
# its group's one function (the method as it stands is kept under another name and wrapped, so the test
# does not depend on its body). anchor -> what replaces it.
EDITS = {
    "    def select(self, strata: Sequence[Hashable | None], seed: int) -> list[int]:\n": """\
    skip_first: int = option(0, "leave out the first N documents or questions before sampling", minimum=0)

    def select(self, strata: Sequence[Hashable | None], seed: int) -> list[int]:
        rest = self.select_before_the_edit(strata[self.skip_first :], seed)
        return [self.skip_first + i for i in rest]

    def select_before_the_edit(self, strata: Sequence[Hashable | None], seed: int) -> list[int]:
""",
    "    def sequences(\n": """\
    calibration_skip: int = option(0, "leave out the first N calibration sequences drawn", minimum=0)

    def sequences(self, tokenizer, **how):
        source, pairs = self.sequences_before_the_edit(tokenizer, **how)
        return source, pairs[self.calibration_skip :]

    def sequences_before_the_edit(
""",
}
SKIPPED = {"skip_first": 2, "calibration_skip": 2}  # each new option, set
SAMPLED = ("collection", "sweep", "prune", "frontier")  # what a Sampling option reaches
CALIBRATED = ("sweep calibration", "prune calibration", "frontier calibration")  # what a Calibration one does


def planned(folder: str, sampling: dict, calibration: dict) -> dict:
    """What every sampling planner, every calibration and the dry run plan with the options ``sampling``
    (of :class:`Sampling`) and ``calibration`` (of :class:`Calibration`) added, run in the process
    whose ``headstats`` is the one under test: the ids of the documents, questions or calibration
    sequences each plans, and each dry-run row's (stage, what, items)."""
    import random

    import torch
    from families import tiny_model
    from test_tasks import make_tokenizer

    from headstats.io.tasks import load_task
    from headstats.jobs.collect import plan_collection
    from headstats.jobs.prune import spec_calibration, task_options
    from headstats.jobs.sweep_plan import plan_sweep
    from headstats.specs import CollectSpec, FrontierSpec, PruneSpec, SweepSpec
    from headstats.studies import dry_run, load_study

    random.seed(0)
    torch.manual_seed(0)
    root = Path(folder)
    data, corpus, model_dir = str(root / "data"), str(root / "corpus.jsonl"), root / "model"
    tokenizer = make_tokenizer(adds_bos=False)
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.headstats_name = "tiny"
    if not model_dir.is_dir():
        model.config.max_position_embeddings = 2048
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
    out = root / "out"
    out.mkdir(exist_ok=True)
    ranked = {"calibration": corpus, "calibration_limit": 6, **calibration}
    collection = plan_collection(model, tokenizer, corpus, out, CollectSpec(scores=("ahon",), **sampling))
    sweep_spec = SweepSpec(scores=("ahon_ln",), targets=(0.1,), data_dir=data, **ranked, **sampling)
    sweep = plan_sweep(model, "mmlu", out=out, spec=sweep_spec)
    prune = PruneSpec(names=("tiny",), out=str(out / "pruned"), certify="piqa", data_dir=data, **ranked, **sampling)
    frontier = FrontierSpec(tasks=("piqa",), data_dir=data, **ranked, **sampling)
    toml = "".join(f"{key} = {json.dumps(value)}\n" for key, value in sampling.items())
    head = f'results = "{root / "results"}"\nreport = "{root / "report"}"\n[models]\nnames = ["{model_dir}"]\n'
    analysis = root / "analysis.toml"
    analysis.write_text(
        f'{head}[collect]\ndatasets = ["{corpus}"]\n{toml}[[ablate]]\ntask = "mmlu"\ndata_dir = "{data}"\n'
        f'scores = ["random"]\ntargets = [0.1]\n{toml}'
    )
    frontier_file = root / "frontier.toml"
    frontier_file.write_text(
        f'{head}[prune]\ntasks = ["piqa"]\ndata_dir = "{data}"\nscores = ["random"]\nshares = [0, 0.5]\n{toml}'
    )
    rows = [*dry_run(load_study(analysis), device="cpu").units, *dry_run(load_study(frontier_file), device="cpu").units]
    return {
        "collection": sorted(collection.wanted),
        "sweep": [q.sample_key for q in sweep.task.questions],
        "prune": [q.question_id for q in load_task(prune.certify, **task_options(prune)).questions],
        "frontier": [q.question_id for t in frontier.tasks for q in load_task(t, **task_options(frontier)).questions],
        "dry run": [[u.stage, Path(u.what).name, u.items] for u in rows],
        "sweep calibration": sweep.calibration_sequences(tokenizer, "tokenizer"),
        "prune calibration": spec_calibration(prune, tokenizer, "tiny").identity["sample_ids"],
        "frontier calibration": spec_calibration(frontier, tokenizer, "tiny").identity["sample_ids"],
    }


def edited_package(folder: Path) -> Path:
    """A copy of the package with the edits made; the folder to put first on the import path."""
    shutil.copytree(ROOT / "headstats", folder / "headstats", ignore=shutil.ignore_patterns("__pycache__"))
    specs = folder / "headstats" / "specs" / "groups.py"
    text = specs.read_text()
    for anchor, edit in EDITS.items():
        moved = f"{anchor.strip()!r} moved: keep the recipe of docs/developing.md true, and EDITS with it"
        assert text.count(anchor) == 1, moved
        text = text.replace(anchor, edit)
    specs.write_text(text)
    return folder


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    from test_tasks import build_data_dir

    build_data_dir(tmp_path / "data")
    rows = [{"text": f"document number {i} reads well enough."} for i in range(12)]
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return tmp_path


def test_a_new_option_is_two_edits_and_every_planner_and_the_dry_run_follow_it(workspace: Path) -> None:
    package = edited_package(workspace / "edited")
    runs = [({}, {}), ({"skip_first": 2}, {}), ({}, {"calibration_skip": 2})]
    script = (
        "import json, sys\n"
        f"sys.path[:0] = [{str(package)!r}, {str(TESTS)!r}]\n"
        "from test_option_recipe import planned\n"
        f"print(json.dumps([planned({str(workspace)!r}, *run) for run in {runs!r}]))\n"
    )
    env = {**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=workspace)
    assert done.returncode == 0, done.stderr[-3000:]
    default, skipped, calibrated = json.loads(done.stdout.strip().splitlines()[-1])
    # The edited package at the options' defaults plans what this one plans: the defaults keep the old work.
    assert default == planned(str(workspace), {}, {})
    for planner in SAMPLED:
        assert skipped[planner] != default[planner], f"the {planner} planner ignores the new Sampling option"
        assert len(skipped[planner]) == len(default[planner]) - 2, planner
    assert [row[:2] for row in skipped["dry run"]] == [row[:2] for row in default["dry run"]]
    for (stage, what, before), (_, _, after) in zip(default["dry run"], skipped["dry run"], strict=True):
        assert after == before - 2, f"the dry run's {stage} row of {what} ignores the new Sampling option"
    assert {row[0] for row in default["dry run"]} == {"collect", "ablate"} and len(default["dry run"]) == 3
    for planner in CALIBRATED:
        assert calibrated[planner] == default[planner][2:], f"the {planner} ignores the new Calibration option"
        assert len(default[planner]) == 6 and skipped[planner] == default[planner], planner
    for planner in SAMPLED:  # each option reaches what its group decides, and nothing else
        assert calibrated[planner] == default[planner], planner
