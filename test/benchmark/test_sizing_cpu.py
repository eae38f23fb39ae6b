"""CPU tests of the bench point sizing (benchmark/sizing.py): every kept
repeat must last at least --min-seconds, also after a slow repeat."""

import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location(
    "bench_sizing", os.path.join(REPO, "benchmark", "sizing.py"))
sizing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sizing)


def test_from_probe_aims_above_target_in_whole_waves():
    # 1000 tok/s, 256 tokens a request: 10 s need 39.06 requests, +30% -> 50.8
    n = sizing.from_probe(1000.0, 256, 8, 10.0)
    assert n == 56 and n % 8 == 0
    assert sizing.from_probe(1.0, 256, 8, 10.0) == 16  # never under two waves


def test_short_repeat_grows_count_past_target():
    # 29 prompts ran 8.2 s (2026-11-26, upstream c=1): next must reach 10 s
    n = sizing.grown(29, 1, 8.2, 10.0)
    assert n * 8.2 / 29 >= 10.0
    assert n == 39


def test_long_repeat_never_shrinks_count():
    # a slow repeat (17.7 s for a 10 s target) keeps the count: shrinking it
    # made the next repeat at normal speed end at 8-9 s
    assert sizing.grown(45, 1, 17.7, 10.0) == 45
    assert sizing.grown(45, 1, 10.0, 10.0) == 45


def test_grow_adds_at_least_one_wave():
    # just short: the ratio rounds to the same count, a wave is still added
    assert sizing.grown(64, 32, 9.99, 10.0) == 96


def test_unknown_duration_is_not_short():
    assert not sizing.is_short(None, 10.0)
    assert not sizing.is_short(0, 10.0)
    assert sizing.grown(40, 8, None, 10.0) == 40
