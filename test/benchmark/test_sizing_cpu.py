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


def test_a_long_first_repeat_resizes_from_its_own_rate():
    # 800 prompts ran 27.6 s at c=32 (H200 x2, 10 s wanted): the probe ran
    # twice as fast as the bench; the next repeats aim at 1.8x the target
    n = sizing.after_first(800, 32, 27.6, 10.0)
    assert n % 32 == 0 and n == 544
    assert 10.0 * sizing.LONG_MARGIN <= n * 27.6 / 800 < 10.0 * sizing.LONG_MARGIN + 27.6 / 800 * 32
    # never under two waves
    assert sizing.after_first(64, 32, 200.0, 10.0) == 64


def test_first_repeat_under_twice_the_target_keeps_the_grow_only_rule():
    assert sizing.after_first(45, 1, 17.7, 10.0) == 45  # long, but not twice
    assert sizing.after_first(29, 1, 8.2, 10.0) == sizing.grown(29, 1, 8.2, 10.0) == 39
    assert sizing.after_first(40, 8, None, 10.0) == 40


def test_a_slow_first_outlier_leaves_later_repeats_long_enough():
    # a first repeat twice as slow as the rest (20 s where normal speed gives
    # 10 s): at normal speed the re-sized count still lasts 0.9x the target,
    # and is then measured again and grown (run.bench_point)
    n = sizing.after_first(100, 1, 20.0, 10.0)
    normal_s = n * 10.0 / 100
    assert normal_s >= 0.9 * 10.0
    assert sizing.is_short(normal_s, 10.0)
    grown = sizing.grown(n, 1, normal_s, 10.0)
    assert grown * 10.0 / 100 >= 10.0


def test_bench_point_resizes_after_a_long_first_repeat(tmp_path, monkeypatch):
    """run.bench_point: the probe's count ran 2.76x the target in the first
    repeat, so the second repeat runs the re-sized count, and the third
    keeps it (later repeats only grow)."""
    import sys
    import types

    sys.path.insert(0, os.path.join(REPO, "benchmark"))
    import run
    from options import RunOptions

    ran = []  # prompts of each bench_serving run

    def fake_bench(runner, srv, env, opts, target, c, n, out):
        ran.append(n)
        # this server decodes 800 prompts in 27.6 s at c=32
        dur = n * 27.6 / 800
        return {"duration_s": dur, "tpot_ms": 1.0, "itl_ms": 1.0,
                "output_tok_per_s": 1.0, "accept_length": 1.0}, "bench_serving ..."

    monkeypatch.setattr(run, "run_bench", fake_bench)
    # the probe runs twice as fast as the bench: 800 prompts for 10 s
    monkeypatch.setattr(run, "probe_throughput", lambda *a, **k: 800 * 256 / 10 / 1.3)
    st = types.SimpleNamespace(runner=None, client=None, commands=[], samples={},
                               log=lambda msg: None, write=lambda: None,
                               time_left=lambda: 1000)
    opts = RunOptions(work_dir=str(tmp_path), min_seconds=10.0, output_len=256, input_len=256)
    m = types.SimpleNamespace(srv=types.SimpleNamespace(url="http://x"), nprompts={}, tag="t",
                              env={}, run_key=lambda c: ("t", c))
    for rep in range(3):
        run.bench_point(st, opts, m, rep, 32, None, 32000)
    assert ran == [800, 544, 544]
    assert all(s["duration_s"] >= 10.0 for s in st.samples[("t", 32)])
