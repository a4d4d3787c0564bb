"""headstats: find and evaluate inactive attention heads in pretrained decoder LLMs.

Data flows one way: model -> per-head scores (:mod:`headstats.engine`) -> Parquet tables
(:mod:`headstats.jobs.collect`, :mod:`headstats.io.store`) -> statistics (:mod:`headstats.stats`)
-> figures and reports (:mod:`headstats.report`). Interventions zero heads inside the same attention
function (:mod:`headstats.engine.zeroing`) and measure task accuracy (:mod:`headstats.jobs.sweep`).

Where things are:

- :mod:`headstats.engine`: the score functions, the attention function, the probe, zeroing, and the surgery
  and speed of pruning;
- :mod:`headstats.io`: everything read or written outside the process (results layout, models, assets, tasks);
- :mod:`headstats.stats`: statistics on headstats' tables (pandas in, pandas out);
- :mod:`headstats.jobs`: what a command runs (collection, sweeps, comparison, pruning, fine-tuning, ...);
- :mod:`headstats.studies`: the study kinds every ``analyses/*.toml`` file is loaded, planned and run through;
- :mod:`headstats.report`: reports of a results folder, rebuilt from its Parquet tables alone, and their figures;
- :mod:`headstats.cli`: the ``headstats`` command line; ``__main__``: ``python -m headstats``, the same;
- :mod:`headstats.pipeline`: the Python API of ``headstats run`` (a study file of any kind) and :func:`compare`;
- :mod:`headstats.specs`: the options of every job, each declared once, with the option machinery of
  :mod:`headstats.options` (every check and flag derives from a field's declaration);
- :mod:`headstats.registry`: the one registry type for everything headstats looks up by name;
- :mod:`headstats.names`: the one rule (:func:`~headstats.names.check_name`) for names that become file or
  folder names;
- :mod:`headstats.scores`: the public name of the score registry, :mod:`headstats.engine.scores` itself;
- :mod:`headstats.lmeval`: any lm-evaluation-harness log-likelihood task under head zeroing (the lm-eval
  model ``headstats``);
- :mod:`headstats.testing`: support for tests and benchmarks (synthetic tables, planted data), not used by
  the package itself.
"""

import importlib

__version__ = "0.1.0"

# The public names and the modules that define them. They are imported on first use (PEP 562), so
# that `import headstats.cli` and `headstats --help` do not pay for torch and transformers; the
# first public name used imports them all, as an eager import would.
_EXPORTS = {
    "headstats.engine.attention": ("ATTN_IMPLEMENTATION", "UnsupportedModelError", "register_attention"),
    "headstats.engine.probe": ("Probe",),
    "headstats.engine.scores": ("SCORES", "Ratio", "Score", "TokenRows", "get_score", "register_score", "score_ids"),
    "headstats.engine.scoring": ("score_sequences", "score_texts"),
    "headstats.engine.zeroing": ("ablate_heads",),
    "headstats.engine.skip": ("generate_skipping", "score_prompt", "select_heads", "skipping"),
    "headstats.io.models": ("load_model",),
    "headstats.io.store": ("read_interventions", "read_scores"),
    "headstats.io.tasks": ("load_task",),
    "headstats.jobs.collect": ("collect_scores",),
    "headstats.jobs.sweep": ("run_sweep",),
    "headstats.stats.inactive": ("inactive_heads",),
    "headstats.stats.summary": ("summarize_curves", "summarize_interventions"),
    "headstats.stats.thresholds": ("threshold_for_fraction", "thresholds_for_fractions"),
}


def _load_all() -> None:
    """Import every module of :data:`_EXPORTS` and bind its public names here."""
    namespace = globals()
    for module_name, names in _EXPORTS.items():
        module = importlib.import_module(module_name)
        for name in names:
            namespace[name] = getattr(module, name)
    # ``headstats.scores`` is the public name of the score registry (``headstats.scores.register(Score(...))``,
    # ``from headstats.scores import Score``); the module lives in the engine (headstats/scores.py aliases it).
    namespace["scores"] = importlib.import_module("headstats.scores")


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    _load_all()
    namespace = globals()
    if name in namespace:
        return namespace[name]
    try:  # a subpackage or module (headstats.report, headstats.lmeval, ...)
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(score: object = None) -> object:
    """Add a score to the registry: ``headstats.register(Score(...))`` is
    :func:`headstats.register_score` (the attention function is registered by
    :func:`headstats.register_attention`, which importing headstats' engine already does)."""
    if score is None:
        raise TypeError(
            "headstats.register(Score(...)) registers a score and needs one; to register headstats' attention "
            "function with transformers call headstats.register_attention()"
        )
    return __getattr__("register_score")(score)


def compare(models: list[str] | tuple[str, ...], *, out: str, **options: object) -> object:
    """Compare ``models[0]`` with the other models on the same texts and write the report to ``out``
    (:func:`headstats.pipeline.compare`; the options are :class:`headstats.specs.CompareSpec`'s)."""
    from headstats.pipeline import compare as _compare

    return _compare(models, out=out, **options)


def connect(root: str) -> object:
    """A DuckDB connection with views ``scores`` and ``interventions`` over a results folder
    (:func:`headstats.io.sql.connect`; needs ``pip install 'headstats[sql]'``)."""
    from headstats.io.sql import connect as _connect

    return _connect(root)


__all__ = [
    "ATTN_IMPLEMENTATION",
    "SCORES",
    "Probe",
    "Ratio",
    "Score",
    "TokenRows",
    "UnsupportedModelError",
    "__version__",
    "ablate_heads",
    "collect_scores",
    "compare",
    "connect",
    "generate_skipping",
    "get_score",
    "inactive_heads",
    "load_model",
    "load_task",
    "read_interventions",
    "read_scores",
    "register",
    "register_attention",
    "register_score",
    "run_sweep",
    "score_ids",
    "score_prompt",
    "score_sequences",
    "score_texts",
    "scores",
    "select_heads",
    "skipping",
    "summarize_curves",
    "summarize_interventions",
    "threshold_for_fraction",
    "thresholds_for_fractions",
]
