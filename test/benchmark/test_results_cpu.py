"""CPU tests of the harness's results file logic (schema, merge, table, CLI).

Standard library only (matplotlib optional): runs in CPU-only CI.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "benchmark")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(BENCH, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


results = _load("results")


def _run(variant="base", pw=True, c=1, tpot=1.0):
    samples = [{"tpot_ms": tpot + d, "itl_ms": 0.9, "output_tok_per_s": 900.0,
                "accept_length": 2.9} for d in (0.0, 0.1, -0.05)]
    r = {"variant": variant, "attention_backend": "triton", "speculative": "EAGLE3",
         "overlap": True, "piecewise_cuda_graph": pw, "concurrency": c}
    r.update(results.summarize_point(samples))
    return r


def _data(runs, date="2026-11-25", greedy=()):
    return {"card": "NVIDIA H200", "date": date, "model_preset": "small",
            "runs": list(runs), "greedy_equivalence": list(greedy)}


def test_summarize_median_and_spread():
    r = _run(tpot=1.0)
    assert r["tpot_ms_median"] == 1.0
    assert r["tpot_ms_spread"] == pytest.approx(0.15)
    assert r["repeats"] == 3 and r["accept_length"] == 2.9


def test_summarize_without_speculation_has_null_accept_length():
    s = results.summarize_point([{"tpot_ms": 1, "itl_ms": 1, "output_tok_per_s": 1,
                                  "accept_length": None}])
    assert s["accept_length"] is None


def test_summarize_gives_ttft_and_itl_tail_only_when_every_repeat_has_them():
    samples = [{"tpot_ms": 1, "itl_ms": 1, "output_tok_per_s": 1, "accept_length": None,
                "ttft_ms": t, "p99_itl_ms": p} for t, p in ((60.0, 25.0), (100.0, 50.0),
                                                          (70.0, 30.0))]
    s = results.summarize_point(samples)
    assert s["ttft_ms_median"] == 70.0 and s["p99_itl_ms_median"] == 30.0
    del samples[1]["ttft_ms"]
    s = results.summarize_point(samples)
    assert "ttft_ms_median" not in s and s["p99_itl_ms_median"] == 30.0


def test_summarize_reports_shortest_repeat():
    samples = [{"tpot_ms": 1, "itl_ms": 1, "output_tok_per_s": 1, "accept_length": None,
                "duration_s": d} for d in (12.34, 8.21, 10.0)]
    assert results.summarize_point(samples)["duration_s_min"] == 8.2
    assert "duration_s_min" not in _run()  # samples without durations: no field


def test_card_slug_and_path():
    assert results.card_slug("NVIDIA H200") == "h200"
    assert results.card_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert results.results_path("d", "2026-11-25", "NVIDIA H200") == os.path.join("d", "2026-11-25-h200.json")


def test_merge_replaces_same_key_and_keeps_others(tmp_path):
    path = str(tmp_path / "r.json")
    g = {"variant": "base", "attention_backend": "triton", "overlap": True,
         "prompts": 64, "mismatched_prompts": 0, "piecewise_cuda_graph": True}
    results.write_merged(path, _data([_run(c=1), _run(c=8)], greedy=[g]))
    merged = results.write_merged(path, _data([_run(c=8, tpot=2.0), _run("upstream-0.5.13")]))
    results.validate(merged)
    by = {(r["variant"], r["concurrency"]): r for r in merged["runs"]}
    assert len(by) == 3 and by[("base", 8)]["tpot_ms_median"] == 2.0
    assert merged["greedy_equivalence"] == [g]


def test_merge_refuses_other_day_or_card():
    with pytest.raises(ValueError):
        results.merge(_data([]), _data([], date="2026-11-26"))


def test_sweep_only_merge_keeps_the_runs_preset():
    sweep = {"card": "NVIDIA H200", "date": "2026-11-25", "model_preset": "tiny",
             "runs": [], "greedy_equivalence": [],
             "accept_sweep": [{"variant": "base", "preset": "tiny", "accept_steps": 1,
                               "draft_accuracy": 1.0, "spec_steps": 3}]}
    m = results.merge(_data([_run()]), sweep)
    assert m["model_preset"] == "small" and len(m["accept_sweep"]) == 1


@pytest.mark.parametrize("field,value", [("variant", "other"), ("concurrency", True),
                                         ("overlap", 1), ("speculative", "EAGLE2")])
def test_validate_rejects_bad_runs(field, value):
    r = _run()
    r[field] = value
    with pytest.raises(ValueError):
        results.validate(_data([r]))


def test_committed_results_follow_the_schema():
    d = os.path.join(BENCH, "results")
    files = [f for f in os.listdir(d) if f.endswith(".json")] if os.path.isdir(d) else []
    for f in files:
        with open(os.path.join(d, f)) as fh:
            results.validate(json.load(fh))


def test_cli_table_and_merge(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_data([_run(c=1)])))
    b.write_text(json.dumps(_data([_run(c=32)])))
    e2e = os.path.join(BENCH, "e2e.py")
    out = subprocess.run([sys.executable, e2e, "merge", str(a), str(b)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(a.read_text())["runs"]) == 2
    out = subprocess.run([sys.executable, e2e, "table", str(a)], capture_output=True, text=True)
    assert out.returncode == 0 and "| base EAGLE3 triton pcg | 32 |" in out.stdout


@pytest.mark.parametrize(
    "name", sorted(f for f in os.listdir(os.path.join(BENCH, "results")) if f.endswith(".json"))
)
def test_committed_results_follow_the_schema(name):
    with open(os.path.join(BENCH, "results", name)) as f:
        data = json.load(f)
    results.validate(data)  # raises ValueError on a schema break
    assert data["card"].startswith("NVIDIA "), "the card must be named"


def _sampled(variant, tpots, c=1):
    samples = [{"tpot_ms": t, "itl_ms": t / 2, "output_tok_per_s": 1000.0 / t,
                "accept_length": 2.9, "duration_s": 12.0} for t in tpots]
    r = {"variant": variant, "attention_backend": "triton", "speculative": "EAGLE3",
         "overlap": True, "piecewise_cuda_graph": True, "concurrency": c, "samples": samples}
    r.update(results.summarize_point(samples))
    return r


def test_pool_keeps_every_calls_repeats():
    greedy = {"variant": "base", "attention_backend": "triton", "overlap": True,
              "piecewise_cuda_graph": True, "prompts": 64, "mismatched_prompts": 0}
    one = _data([_sampled("base", [1.0, 1.2]), _sampled("base", [2.0], c=8)], greedy=[greedy])
    two = _data([_sampled("base", [1.1, 0.9, 1.4])], greedy=[dict(greedy, prompts=16)])
    data = results.pool(results.pool(None, one, "run A"), two, "run B")
    runs = {r["concurrency"]: r for r in data["runs"]}
    c1 = runs[1]
    assert c1["repeats"] == 5 and c1["calls"] == ["run A", "run B"]
    assert c1["tpot_ms_median"] == 1.1 and c1["tpot_ms_spread"] == pytest.approx(0.5)
    assert [s["tpot_ms"] for s in c1["samples"]] == [1.0, 1.2, 1.1, 0.9, 1.4]
    assert runs[8]["repeats"] == 1 and runs[8]["calls"] == ["run A"]
    # both greedy checks stay, each with its call; a replace would lose one
    assert [(g["prompts"], g["call"]) for g in data["greedy_equivalence"]] == [
        (64, "run A"), (16, "run B")]
    results.validate(data)


def test_pool_keeps_the_profiles_of_every_call():
    prof = {"variant": "base", "attention_backend": "triton", "speculative": "EAGLE3",
            "overlap": True, "piecewise_cuda_graph": True, "concurrency": 1,
            "with_stack": False, "window_us_per_step": 4000.0}
    one = dict(_data([]), profiles=[prof])
    two = dict(_data([]), profiles=[dict(prof, window_us_per_step=4100.0)])
    data = results.pool(results.pool(None, one, "run A"), two, "run B")
    # the same server setting profiled in two calls: two records, not one
    assert [(p["window_us_per_step"], p["call"]) for p in data["profiles"]] == [
        (4000.0, "run A"), (4100.0, "run B")]
    # a plain merge (one call's file written twice) replaces by key
    assert len(results.merge(one, two)["profiles"]) == 1


def test_cli_merge_pool_labels_calls(tmp_path):
    paths = []
    for i, tpots in enumerate(([1.0, 1.2, 1.1], [0.8])):
        p = tmp_path / f"call{i}.json"
        p.write_text(json.dumps(_data([_sampled("patched", tpots)])))
        paths.append(str(p))
    into = tmp_path / "machine.json"
    res = subprocess.run([sys.executable, os.path.join(BENCH, "e2e.py"), "merge", "--pool",
                          str(into), *paths, "--label", "run B", "--label", "run C"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    (run,) = json.loads(into.read_text())["runs"]
    assert run["repeats"] == 4 and run["calls"] == ["run B", "run C"]
    assert run["tpot_ms_median"] == pytest.approx(1.05)
    bad = subprocess.run([sys.executable, os.path.join(BENCH, "e2e.py"), "merge", "--pool",
                          str(tmp_path / "x.json"), *paths, "--label", "only one"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "one --label per source" in bad.stderr


def _greedy_run(variant, spec, sha, prompts=64, pw=True):
    return {"variant": variant, "attention_backend": "triton", "overlap": True,
            "piecewise_cuda_graph": pw, "prompts": prompts, "speculative": spec, "sha256": sha}


def test_pool_checks_greedy_across_calls_by_digest():
    nospec = dict(_data([]), greedy_runs=[_greedy_run("base", "none", "aa"),
                                          _greedy_run("upstream-0.5.13", "none", "cc")])
    eagle = dict(_data([]), greedy_runs=[
        _greedy_run("base", "EAGLE3", "aa"),                   # same ids: an entry, 0 differ
        _greedy_run("base", "EAGLE3", "aa", prompts=16),       # no 16-prompt reference
        _greedy_run("upstream-0.5.13", "EAGLE3", "dd"),        # differs: no count, no entry
        _greedy_run("patched", "EAGLE3", "aa")])               # no patched no-spec run
    data = results.pool(results.pool(None, nospec, "run A"), eagle, "run B")
    (entry,) = data["greedy_equivalence"]
    assert (entry["variant"], entry["prompts"], entry["mismatched_prompts"]) == ("base", 64, 0)
    assert entry["by"] == "sha256" and entry["calls"] == ["run B", "run A"]
    results.validate(data)
    # pooling a third call adds no second entry for the same pair
    again = results.pool(data, dict(_data([]), greedy_runs=[]), "run C")
    assert len(again["greedy_equivalence"]) == 1


def test_tensor_parallel_size_is_part_of_a_runs_key():
    tp1, tp2 = _run(tpot=1.0), dict(_run(tpot=1.3), tp=2)
    merged = results.merge(_data([tp1]), _data([tp2]))
    assert sorted(r.get("tp", 1) for r in merged["runs"]) == [1, 2]
    # an older file's run has no "tp": it is tensor parallel 1, replaced by a new tp=1 run
    again = results.merge(merged, _data([dict(_run(tpot=0.7), tp=1)]))
    assert sorted((r.get("tp", 1), r["tpot_ms_median"]) for r in again["runs"]) == [(1, 0.7), (2, 1.3)]
    assert "tp2" in results.table(_data([tp2])) and "tp" not in results.table(_data([tp1])).split("\n", 1)[1]
    with pytest.raises(ValueError, match="tp"):
        results.validate(_data([dict(tp1, tp="2")]))


def _with_reps(run, reps):
    run = dict(run)
    run["samples"] = [dict(x, rep=r) for x, r in zip(run["samples"], reps)]
    return run


def test_paired_ratios_pair_each_repeat_with_bases_same_repeat():
    # a deadline cut patched's third repeat; the servers' turn alternated, so
    # patched's repeats are not in the same places as base's
    base = _with_reps(_sampled("base", [2.0, 1.0, 4.0]), [0, 1, 2])
    patched = _with_reps(_sampled("patched", [1.0, 1.8]), [1, 0])
    other = _sampled("base", [3.0], c=8)  # no patched point at c=8: no pair
    (entry,) = results.paired_ratios(_data([base, patched, other]))
    assert (entry["variant"], entry["concurrency"], entry["paired_by"]) == ("patched", 1, "repeat")
    assert entry["ratios"] == [1.0, 0.9]  # 1.0/1.0 (rep 1), 1.8/2.0 (rep 0)
    assert entry["median"] == 0.95 and entry["below_1"] == 1


def test_ratio_interval_is_student_t_on_the_log_ratios():
    # logs -0.10536, 0, 0.09531: mean -0.00335, sd 0.10038; t(2) = 2.920,
    # half width 2.920 * 0.10038 / sqrt(3) = 0.16923
    got = results.ratio_interval([0.9, 1.0, 1.1])
    assert got["geo_mean"] == 0.9967 and got["interval_90"] == [0.8415, 1.1804]
    # +-3% needs t(n-1) * 0.10038 / sqrt(n) <= ln(1.03): 1.697 / sqrt(34) = 0.291
    # passes, 1.697 / sqrt(33) = 0.295 does not
    assert got["repeats_for_3pct"] == 34
    # one ratio: no scatter to read; equal ratios: two repeats already do
    assert results.ratio_interval([0.8]) == {"geo_mean": 0.8, "interval_90": None,
                                             "repeats_for_3pct": None}
    assert results.ratio_interval([0.9, 0.9])["interval_90"] == [0.9, 0.9]
    assert results.ratio_interval([0.9, 0.9])["repeats_for_3pct"] == 2
    # every paired entry carries it
    (entry,) = results.paired_ratios(_data([_sampled("base", [2.0, 2.0, 2.0]),
                                           _sampled("patched", [1.8, 2.0, 2.2])]))
    assert entry["interval_90"] == got["interval_90"]


def test_paired_ratios_of_older_files_go_by_position():
    base, patched = _sampled("base", [2.0, 1.0]), _sampled("patched", [1.0, 1.5])
    (entry,) = results.paired_ratios(_data([base, patched]))
    assert entry["paired_by"] == "position" and entry["ratios"] == [0.5, 1.5]
    # one file with repeat numbers, one without: positions for both
    (mixed,) = results.paired_ratios(_data([_with_reps(base, [0, 1]), patched]))
    assert mixed["paired_by"] == "position" and mixed["ratios"] == [0.5, 1.5]


def test_pooled_calls_pair_repeats_within_their_own_call():
    # run A lost patched's second repeat to its deadline; by position,
    # patched's call-2 repeat 0 would meet base's call-1 repeat 1
    one = _data([_with_reps(_sampled("base", [1.0, 5.0]), [0, 1]),
                 _with_reps(_sampled("patched", [0.9]), [0])])
    two = _data([_with_reps(_sampled("base", [2.0, 2.0]), [0, 1]),
                 _with_reps(_sampled("patched", [1.8, 2.2]), [0, 1])])
    data = results.pool(results.pool(None, one, "pair0"), two, "pair1")
    patched = [r for r in data["runs"] if r["variant"] == "patched"][0]
    assert [x["call"] for x in patched["samples"]] == ["pair0", "pair1", "pair1"]
    (entry,) = results.paired_ratios(data)
    assert entry["ratios"] == [0.9, 0.9, 1.1] and entry["below_1"] == 2
    results.validate(data)


def test_paired_ratios_split_by_turn_where_it_alternates():
    # base first in even repeats, last in odd ones (run.bench_order); the
    # repeats of two pooled copies each count by their own number
    one = _data([_with_reps(_sampled("base", [2.0, 2.0]), [0, 1]),
                 _with_reps(_sampled("patched", [2.0, 2.4]), [0, 1])])
    two = _data([_with_reps(_sampled("base", [1.0, 1.0, 1.0]), [0, 1, 2]),
                 _with_reps(_sampled("patched", [0.9, 1.2, 1.0]), [0, 1, 2])])
    for d in (one, two):
        d["bench"] = dict(d.get("bench") or {}, turn="alternating")
    data = results.pool(results.pool(None, one, "pair0"), two, "pair1")
    (entry,) = results.paired_ratios(data)
    # base first: 1.0, 0.9, 1.0 -> geo mean 0.9655; base last: 1.2, 1.2
    assert entry["by_turn"] == {"base_first": {"n": 3, "geo_mean": 0.9655},
                                "base_last": {"n": 2, "geo_mean": 1.2}}
    # a call that always measured base first has no split
    data["bench"]["turn"] = "base first"
    (entry,) = results.paired_ratios(data)
    assert "by_turn" not in entry


def test_paired_ratios_split_by_the_builds_cpu_set_where_servers_rotated():
    # --rotate-cpus: each repeat's sample records the set its server ran on
    base = _with_reps(_sampled("base", [2.0, 2.0, 2.0, 2.0]), [0, 1, 2, 3])
    patched = _with_reps(_sampled("patched", [1.0, 1.6, 1.0, 1.6]), [0, 1, 2, 3])
    for run, sets in ((base, ["0-2", "3-5"] * 2), (patched, ["3-5", "0-2"] * 2)):
        run["samples"] = [dict(x, cpus=s) for x, s in zip(run["samples"], sets)]
    (entry,) = results.paired_ratios(_data([base, patched]))
    # patched on 3-5: 0.5 and 0.5; on 0-2: 0.8 and 0.8
    assert entry["by_place"] == {"0-2": {"n": 2, "geo_mean": 0.8},
                                 "3-5": {"n": 2, "geo_mean": 0.5}}
    assert list(entry["by_place"]) == ["0-2", "3-5"]  # by first CPU
    # servers that kept their sets record none: no split
    for run in (base, patched):
        run["samples"] = [{k: v for k, v in x.items() if k != "cpus"} for x in run["samples"]]
    (entry,) = results.paired_ratios(_data([base, patched]))
    assert "by_place" not in entry
