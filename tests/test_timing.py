"""The paired timing protocol: the speed-up interval's arithmetic and coverage, the interleaved
rounds and their stopping rule (on synthetic clocks, never on wall time), the timed decode work,
and the pruned layer's grouped attention that the protocol measures."""

import copy
import math

import numpy as np
import pytest
import torch
from families import tiny_model
from scipy import stats

import headstats
from headstats.engine.prefix import cache_argument
from headstats.engine.prune import HeadMap, prune_heads
from headstats.engine.speed import Setting, phase_timer, random_prompts, relocate_weights
from headstats.jobs.timing import paired_rounds
from headstats.stats.speed import paired_speedup


def test_speedup_is_the_geometric_mean_of_round_ratios_with_a_t_interval_on_the_logs() -> None:
    before = np.array([2.0, 2.2, 1.9, 2.1, 2.05])
    after = np.array([1.6, 1.9, 1.5, 1.8, 1.7])
    logs = np.log(before / after)
    half = stats.t.ppf(0.975, 4) * logs.std(ddof=1) / math.sqrt(5)
    s = paired_speedup(before, after)
    assert s.speedup == pytest.approx(float(np.prod(before / after) ** (1 / 5)))
    assert (s.low, s.high) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)))
    assert s.half_width == pytest.approx(max(s.high / s.speedup - 1, 1 - s.low / s.speedup))


def test_speedup_interval_covers_the_true_ratio_at_its_level() -> None:
    rng = np.random.default_rng(0)
    true, covered, copies_contain_one = 1.05, 0, 0
    trials = 2000
    for _ in range(trials):
        drift = rng.lognormal(0, 0.3, 10)  # a shared machine's slow spells hit both models of a round
        before = 1.0 * drift * rng.lognormal(0, 0.02, 10)
        after = before / true * rng.lognormal(0, 0.02, 10)
        s = paired_speedup(before, after)
        covered += s.low <= true <= s.high
        copy_ = paired_speedup(before, before * rng.lognormal(0, 0.02, 10))
        copies_contain_one += copy_.contains_one
    # 95% intervals: coverage within Monte Carlo error (sd of a proportion at 2,000 trials ~ 0.005)
    assert abs(covered / trials - 0.95) < 0.015
    assert abs(copies_contain_one / trials - 0.95) < 0.015


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        ([1.0, 2.0], [1.0], "paired times must be two 1-d arrays of one length"),
        ([1.0, 0.0], [1.0, 1.0], "times must be positive seconds"),
        ([], [], "no rounds to compare"),
    ],
)
def test_speedup_refuses_unpaired_or_empty_times(before, after, message) -> None:
    with pytest.raises(ValueError, match=message):
        paired_speedup(before, after)


def _clock(seconds_per_run: float, noise: float, rng: np.random.Generator, log: list[str], name: str):
    def run() -> float:
        log.append(name)
        return seconds_per_run * float(rng.lognormal(0, noise))

    return run


def test_rounds_alternate_order_discard_warmup_and_stop_once_resolved() -> None:
    rng, log = np.random.default_rng(1), []
    runs = {
        "unpruned": _clock(1.0, 0.01, rng, log, "u"),
        "copy": _clock(1.0, 0.01, rng, log, "c"),
        "pruned": _clock(0.8, 0.01, rng, log, "p"),
    }
    result = paired_rounds(runs, "unpruned", target=0.01, min_rounds=6, max_seconds=1e9, warmup=1)
    assert log[:6] == ["u", "c", "p", "p", "c", "u"]  # the warm-up round, then the first round reversed
    n = len(result.seconds["unpruned"])
    assert result.resolved and n >= 6 and result.speedups["pruned"].half_width <= 0.01
    if n > 6:  # it stopped at the first round that resolved both candidates
        earlier = [paired_speedup(result.seconds["unpruned"][:-1], result.seconds[k][:-1]) for k in ("copy", "pruned")]
        assert max(s.half_width for s in earlier) > 0.01
    assert result.speedups["pruned"].low <= 1.25 <= result.speedups["pruned"].high
    assert result.speedups["copy"].contains_one


def test_rounds_continue_until_the_target_or_the_cap() -> None:
    rng = np.random.default_rng(2)
    noisy = {"a": _clock(1.0, 0.2, rng, [], "a"), "b": _clock(1.0, 0.2, rng, [], "b")}
    capped = paired_rounds(noisy, "a", target=0.01, min_rounds=6, max_rounds=40, max_seconds=1e9)
    assert not capped.resolved and len(capped.seconds["a"]) == 40
    assert capped.speedups["b"].half_width > 0.01
    resolved = paired_rounds(noisy, "a", target=0.2, min_rounds=6, max_rounds=400, max_seconds=1e9)
    assert resolved.resolved and 6 <= len(resolved.seconds["a"]) < 400


def test_rounds_refuse_a_missing_reference() -> None:
    with pytest.raises(ValueError, match="reference 'x' is not among the timed models: a, b"):
        paired_rounds({"a": lambda: 1.0, "b": lambda: 1.0}, "x")


def test_a_decode_setting_decodes_from_the_same_cache_every_call() -> None:
    model = tiny_model("llama", attn="sdpa").eval()
    setting = Setting("decode", batch=2, context=10, new_tokens=3)
    seen = []

    def record(module, args, kwargs):
        if kwargs["input_ids"].shape[1] == 1:
            cache = next(v for k, v in kwargs.items() if k in ("cache", "past_key_values"))
            seen.append(cache.get_seq_length())

    model.register_forward_pre_hook(record, with_kwargs=True)
    timer = phase_timer(model, setting, random_prompts(model, setting))
    assert timer() > 0 and timer() > 0
    assert seen == [10, 11, 12, 10, 11, 12]  # each call starts from the prompt's 10 cached tokens
    assert setting.tokens == 6 and setting.name == "decode 3 after 10 x2"
    with pytest.raises(ValueError, match="a timed phase is 'prefill' or 'decode', got 'train'"):
        Setting("train", 1, 1)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_every_timed_run_moves_the_weights_to_fresh_memory_keeping_values_and_ties(family) -> None:
    """A model's memory layout changes its speed, so each timed run first relocates its weights (outside
    the clock): every parameter and buffer gets a new address, the values and the logits stay exactly
    the same, and tied embeddings stay one tensor."""
    model = tiny_model(family).eval()
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert tied == (family == "gpt2")  # GPT-2 ties its embeddings; this Llama does not
    ids = torch.randint(0, model.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(input_ids=ids).logits

    def addresses() -> list[int]:
        return [t.data_ptr() for t in [*model.parameters(), *model.buffers()]]

    def values() -> list[torch.Tensor]:
        return [t.detach().clone() for t in model.state_dict().values()]

    first, kept = addresses(), values()
    relocate_weights(model)
    assert all(a != b for a, b in zip(first, addresses(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(kept, values(), strict=True))
    assert (model.get_input_embeddings().weight is model.get_output_embeddings().weight) == tied
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, before)
    for phase in ("prefill", "decode"):
        setting = Setting(phase, batch=1, context=6, new_tokens=2)
        timer = phase_timer(model, setting, random_prompts(model, setting))
        seen = addresses()
        timer()
        assert all(a != b for a, b in zip(seen, addresses(), strict=True)), phase
        seen = addresses()
        phase_timer(model, setting, random_prompts(model, setting), relocate=False)()
        assert addresses() == seen


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_the_cpu_clock_counts_the_process_cpu_seconds_not_the_wall(phase, monkeypatch) -> None:
    """On a shared machine a run's wall time holds the time other processes held the core; the cpu
    clock (time.process_time) counts only this process's seconds. Here the wall clock runs 10x faster
    than the CPU clock: each timer reads its own clock only."""
    import time

    model = tiny_model("llama", attn="sdpa").eval()
    setting = Setting(phase, batch=1, context=6, new_tokens=2)
    ticks = {"cpu": 0.0, "wall": 0.0}

    def tick(name: str, step: float):
        def now() -> float:
            ticks[name] += step
            return ticks[name]

        return now

    monkeypatch.setattr(time, "process_time", tick("cpu", 1.0))
    monkeypatch.setattr(time, "perf_counter", tick("wall", 10.0))
    ids = random_prompts(model, setting)
    assert phase_timer(model, setting, ids, clock="cpu")() == 1.0  # one tick between start and stop
    assert phase_timer(model, setting, ids)() == 10.0
    with pytest.raises(ValueError, match="a timing clock is one of wall, cpu, got 'gpu'"):
        phase_timer(model, setting, ids, clock="gpu")


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_uneven_groups_run_as_padded_grouped_attention_equal_to_zeroing(family, monkeypatch) -> None:
    model = tiny_model(family, attn="sdpa").eval()
    heads = [(0, 0), (1, 1), (1, 2)]  # 2 KV groups of 2: layer 0 keeps 1 + 2, layer 1 keeps 1 + 1 heads
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), headstats.ablate_heads(model, heads=heads):
        zeroed = model(input_ids=ids).logits
        zeroed_next = model(input_ids=ids[:, :11]).logits[:, -1]
    pruned = copy.deepcopy(model)
    prune_heads(pruned, heads)
    layer0 = pruned.model.layers[0].self_attn.headstats_heads
    assert layer0.padded_groups() == {"slots": (0, 0, 1, 2), "kept": (0, 2, 3), "size": 2}
    monkeypatch.setattr(HeadMap, "gather", lambda *a: pytest.fail("K and V were copied per query head"))
    with torch.no_grad():
        assert torch.allclose(pruned(input_ids=ids).logits, zeroed, atol=1e-5)
        key = cache_argument(pruned)
        prompt = pruned(input_ids=ids[:, :10], use_cache=True)
        step = pruned(input_ids=ids[:, 10:11], use_cache=True, **{key: getattr(prompt, key)})
    assert torch.allclose(step.logits[:, -1], zeroed_next, atol=1e-5)


def test_padded_groups_repeat_a_short_groups_first_head() -> None:
    # 5 kept query heads in 2 KV groups of 3 and 2: the short group is padded with its first head.
    layout = HeadMap(None, (0, 0, 0, 1, 1), (0, 0, 0, 1, 1)).padded_groups()
    assert layout == {"slots": (0, 1, 2, 3, 4, 3), "kept": (0, 1, 2, 3, 4), "size": 3}
    assert HeadMap((0, 2), (0, 1), (0, 1)).padded_groups() is None  # a cross-head norm keeps every query head
    assert HeadMap(None, (1, 0), (0, 1)).padded_groups() is None  # K and V of different heads
