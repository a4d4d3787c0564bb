"""The core: score functions, the one registered attention function, the probe, zeroing.

- :mod:`~headstats.engine.scores`: the score registry (token statistic + pooling, or a ``Ratio``);
- :mod:`~headstats.engine.attention`: the attention function transformers calls, its kernels, ``RowMask``;
- :mod:`~headstats.engine.probe`: ``Probe.forward(inputs, keys) -> (output, record)``;
- :mod:`~headstats.engine.zeroing`: dynamic, static and random zeroing (:func:`ablate_heads`);
- :mod:`~headstats.engine.scoring`: per-head score tables for token sequences.
"""
