"""The core: score functions, the one registered attention function, the probe, zeroing, and the
surgery and speed of pruning.

- :mod:`~headstats.engine.scores`: the score registry (token statistic + pooling, or a ``Ratio``);
- :mod:`~headstats.engine.attention`: the attention function transformers calls, its kernels, ``RowMask``;
- :mod:`~headstats.engine.probe`: ``Probe.forward(inputs, keys) -> (output, record)``;
- :mod:`~headstats.engine.zeroing`: dynamic, static and random zeroing (:func:`ablate_heads`);
- :mod:`~headstats.engine.scoring`: per-head score tables for token sequences;
- :mod:`~headstats.engine.batching`: padding token-id lists into batches, the one place that decides
  how padding looks;
- :mod:`~headstats.engine.prefix`: shared-prefix reuse: a few-shot prompt's common prefix run once, each
  sequence's own tokens against its cached keys and values; :mod:`~headstats.engine.prefix_groups`: which
  sequences share such a prefix, on token lists alone;
- :mod:`~headstats.engine.prune`: removing heads from a model's weights (:func:`prune_heads`, the surgery
  behind ``headstats prune``);
- :mod:`~headstats.engine.pruned_model`: the structure of a pruned model in one self-contained file,
  copied into every saved pruned folder (torch and transformers only);
- :mod:`~headstats.engine.speed`: what a model costs per token, by arithmetic (:func:`inference_cost`,
  the roof of a speed-up) and by the clock (:func:`time_inference`, :func:`phase_timer`);
- :mod:`~headstats.engine.cost`: what a pass costs by arithmetic, without torch: its padded tokens, and
  a model's FLOPs per token (:class:`InferenceCost`), from its configuration for the layouts it knows;
- :mod:`~headstats.engine.skip`: heads skipped per prompt: scored on the prompt in its own pass, the
  most inactive share not computed for the continuation (:func:`skipping`, :func:`generate_skipping`).
"""
