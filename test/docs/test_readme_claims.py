"""The GPU claims README.md makes, checked against the results files they
name.  The latency table itself is generated (test/benchmark/test_report_cpu.py
checks it is current); these are the sentences around it."""

import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(REPO, "benchmark", "results")
sys.path.insert(0, os.path.join(REPO, "benchmark"))
sys.path.insert(0, os.path.join(REPO, "benchmark", "probes"))

import host_time  # noqa: E402
import report  # noqa: E402


def load(stem):
    with open(os.path.join(RESULTS, stem + ".json")) as fh:
        return json.load(fh)


def flat(path):
    """A repository file (path relative to REPO) with its whitespace folded,
    so a sentence matches across line breaks."""
    with open(os.path.join(REPO, path)) as fh:
        return " ".join(fh.read().split())


def readme():
    return flat("README.md")


def all_results():
    return [load(n[:-5]) for n in sorted(os.listdir(RESULTS)) if n.endswith(".json")]


def test_every_greedy_check_found_identical_outputs():
    assert "greedy EAGLE3 output is token-identical to non-speculative output" in readme()
    checks = [g for d in all_results() for key in ("greedy_equivalence", "greedy_cuda_graphs_off")
              for g in d.get(key, [])]
    assert len(checks) >= 20
    assert all(g["mismatched_prompts"] == 0 for g in checks if "mismatched_prompts" in g)


def test_graphs_off_overlap_off_and_flashinfer_were_checked():
    (off,) = load("2026-11-26-h200-machine-d")["greedy_cuda_graphs_off"]
    assert (off["variant"], off["overlap"], off["mismatched_prompts"]) == ("patched", False, 0)
    flashinfer = load("2026-11-26-h200-machine-a")["greedy_flashinfer"]
    chain = {g["sha256"] for g in load("2026-11-26-h200-machine-a")["greedy_runs"]
             if g["speculative"] == "none" and g["prompts"] == 64}
    assert flashinfer and all(g["sha256"] in chain for g in flashinfer)


def test_triton_decode_makes_no_seq_lens_copy():
    assert "all-triton EAGLE3 server makes no seq_lens device-to-host copy" in readme()
    probes = [p for p in load("2026-11-26-h200-machine-a")["seq_lens_pull_probe"]
              if p["attention_backend"] == "triton"]
    assert probes and all(p["host_pulls"] == 0 and p["relayed_resolves"] > 0 for p in probes)


def test_host_sync_calls_per_forward():
    m = re.search(r"patched makes (\d+) host sync call a forward where unpatched "
                  r"0.5.12.post1 makes (\d+) \((\S+)\)", readme())
    patched, base, stem = int(m.group(1)), int(m.group(2)), m.group(3)
    syncs = {p["variant"]: p["host_sync_calls_per_step"] for p in load(stem)["profiles"]
             if p["concurrency"] == 1 and not p["with_stack"] and p["variant"] != "upstream-0.5.13"}
    assert syncs == {"patched": patched, "base": base}


def test_without_speculation_patched_is_not_slower():
    m = re.search(r"An earlier build of the series was within (\d+)% of base at concurrency 1 "
                  r"and faster at 8 and 32 \(side by side, (\S+)\)", readme())
    within, data = int(m.group(1)) / 100, load(m.group(2))
    ratio = {c: report.tpot(data, "patched", spec="none", c=c) / report.tpot(data, "base", spec="none", c=c)
             for c in (1, 8, 32)}
    assert abs(ratio[1] - 1) <= within
    assert ratio[8] < 1 and ratio[32] < 1
    digests = {g["sha256"] for g in data["greedy_runs"] if g["prompts"] == 64}
    assert len(digests) == 1


def test_gain_is_clear_at_8_and_32_in_the_current_table():
    assert "There the gain was clear at concurrency 8 and 32" in flat("README.md")
    for name in report.CURRENT:
        data = load(name[:-5])
        for pcg in (True, False):
            for c in (8, 32):
                try:
                    p = report.tpot(data, "patched", pcg=pcg, c=c)
                except KeyError:
                    continue
                assert p < report.tpot(data, "base", pcg=pcg, c=c)
                assert p < report.tpot(data, "upstream-0.5.13", pcg=pcg, c=c)


def test_disaggregated_decode_claim():
    m = re.search(r"for 64 prompts arriving while others decode, and the host-truth check "
                  r"\(`SGLANG_DEBUG_CHECK_SEQ_LENS_TRUTH`\) found 0 stale lengths in (\d+) "
                  r"verifies", readme())
    data = load("2026-11-26-h100-disagg-decode-checks")
    (eagle,) = [g for g in data["greedy_runs"] if g["speculative"] == "EAGLE3"]
    assert eagle["disaggregation"] == "decode" and eagle["prompts"] == 64
    assert (eagle["seq_lens_truth_checks"], eagle["seq_lens_truth_violations"]) == (
        int(m.group(1)), 0)
    assert eagle["prompts_off_own_chain"] == 0
    (equiv,) = data["greedy_equivalence"]
    assert equiv["mismatched_prompts"] == 0


TP_CALLS = ("2026-11-26-h100x4-tp2-eagle3-pairs", "2026-11-26-h100x4-tp4-eagle3",
            "2026-11-26-h100x4-tp2-eagle3-alternating", "2026-11-26-h100x4-tp4-eagle3-alternating",
            "2026-11-26-h100x2-tp2-eagle3-two-calls")


def sample_spread(run):
    """max - min of a point's repeats' TPOT, from the samples themselves."""
    tpots = [x["tpot_ms"] for x in run["samples"]]
    return max(tpots) - min(tpots)


def tp_ratios(data, concurrencies=(1, 8, 32)):
    runs = {(r["variant"], r["concurrency"]): r for r in data["runs"]}
    return [runs[("patched", c)]["tpot_ms_median"] / runs[("base", c)]["tpot_ms_median"]
            for c in concurrencies], runs


def h100_claim(pattern, stem):
    """The README sentence matching `pattern` and the H100 results file it
    names."""
    m = re.search(pattern, readme())
    assert m, f"the README's sentence on {stem} is gone"
    data = load(stem)
    assert data["card"].startswith("NVIDIA H100")
    return m, data


def patched_start_lines(data):
    """The start lines of the file's patched servers; there is at least one."""
    lines = [x.get("sglpatch_line", "") for x in data["server_starts"]
             if x["setting"].startswith("patched")]
    assert lines, "no patched server start recorded"
    return lines


def checked_side_by_side(data, claimed, start_line=None):
    """The ratios a sentence claims (c=1, 8, 32, two decimals), one greedy
    digest for every server, and, given, the words every patched server's
    start line holds. Returns tp_ratios: the ratios and the runs by
    (variant, concurrency)."""
    ratios, runs = tp_ratios(data)
    assert [round(x, 2) for x in ratios] == [float(x) for x in claimed]
    assert len({g["sha256"] for g in data["greedy_runs"]}) == 1
    if start_line is not None:
        assert all(start_line in line for line in patched_start_lines(data))
    return ratios, runs


def assert_inside_spread(runs):
    """At c=1, 8, 32: both builds have 3 repeats or more, and their medians
    differ by no more than the wider build's spread."""
    for c in (1, 8, 32):
        base, patched = runs[("base", c)], runs[("patched", c)]
        assert base["repeats"] >= 3 and patched["repeats"] >= 3
        spread = max(sample_spread(base), sample_spread(patched))
        assert abs(patched["tpot_ms_median"] - base["tpot_ms_median"]) <= spread


def test_tensor_parallel_claim_matches_its_results():
    text = readme()
    assert ("**Tensor parallel: with patch 0009, faster at TP=2, and at TP=4 by every cell's "
            "geometric mean (at concurrency 32 within the noise).**") in text
    for stem in (TP2_SHM, TP4_FULL):
        cells = [e for e in report.results.paired_ratios(load(stem)) if e["variant"] == "patched"]
        assert sorted(e["concurrency"] for e in cells) == [1, 8, 32]
        assert all(e["geo_mean"] < 1 and len(e["ratios"]) >= 3 for e in cells)
    spreads = {}
    for stem in TP_CALLS:
        m = re.search(rf"\| \[{stem}\]\(benchmark/results/{stem}\.md\) \| (\d) \| "
                      rf"(base first|alternating) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| "
                      rf"([\d /]+) \|", text)
        assert m, f"the README's TP table has no row for {stem}"
        tp, turn, *claimed, repeats = m.groups()
        data = load(stem)
        assert data["card"].startswith("NVIDIA H100")
        # the turn column is what the results file recorded
        assert data["bench"].get("turn", "base first") == turn
        ratios, runs = checked_side_by_side(data, claimed)
        assert all(r["tp"] == int(tp) and r["attention_backend"] == "triton" for r in runs.values())
        got = [min(runs[("base", c)]["repeats"], runs[("patched", c)]["repeats"])
               for c in (1, 8, 32)]
        want = [int(x) for x in repeats.split(" / ")]
        assert got == (want * 3 if len(want) == 1 else want)
        spreads[turn] = max(spreads.get(turn, 0), max(map(sample_spread, runs.values())))
        if turn == "base first":
            assert min(ratios) > 1  # "found patched slower in every cell"
    # "faster in seven of nine", "spread over up to 1.6 ms"
    alternating = [x for stem in TP_CALLS[2:] for x in tp_ratios(load(stem))[0]]
    assert len(alternating) == 9 and sum(x < 1 for x in alternating) == 7
    assert round(spreads["alternating"], 1) == 1.6
    assert "found patched slower in every cell" in text and "faster in seven of nine" in text
    assert "spread over up to 1.6 ms" in text


def test_benchmark_readme_deployment_rows_match_their_results():
    with open(os.path.join(REPO, "benchmark", "README.md")) as fh:
        text = fh.read()
    for stem in TP_CALLS + PINNED_TP_CALLS:
        m = re.search(rf"\| \[{stem}\]\(results/{stem}\.md\) \| TP=\d[^|]* \| [a-z ]+ \| "
                      rf"([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", text)
        assert m, f"benchmark/README.md has no deployment row for {stem}"
        ratios, _ = tp_ratios(load(stem))
        assert [round(x, 2) for x in ratios] == [float(x) for x in m.groups()]


def test_tensor_parallel_paired_repeats_claim():
    consistent = {}
    for stem in TP_CALLS:
        for e in report.results.paired_ratios(load(stem)):
            if e["below_1"] in (0, len(e["ratios"])):
                consistent[(stem, e["concurrency"])] = e

    def says(stem, c):
        e = consistent.pop((stem, c))
        lo, hi = round(min(e["ratios"]), 2), round(max(e["ratios"]), 2)
        return len(e["ratios"]), f"{lo:.2f} to {hi:.2f}", e["below_1"] > 0

    n1, r1, fast1 = says("2026-11-26-h100x4-tp4-eagle3", 1)
    n2, r2, fast2 = says("2026-11-26-h100x4-tp4-eagle3-alternating", 8)
    n3, r3, fast3 = says("2026-11-26-h100x4-tp2-eagle3-alternating", 1)
    n4, r4, fast4 = says("2026-11-26-h100x4-tp2-eagle3-alternating", 32)
    assert not consistent, f"cells the README does not name: {sorted(consistent)}"
    assert (fast1, fast2, fast3, fast4) == (False, False, True, True) and n3 == n4
    expected = (f"four cells hold in every repeat: patched is slower at TP=4, concurrency 1, in "
                f"the base-first call ({n1} of {n1}, {r1}) and at TP=4, concurrency 8, in the "
                f"alternating one ({n2} of {n2}, {r2}), and faster at TP=2, concurrency 1 and 32, "
                f"in the alternating call ({n3} of {n3}, {r3} and {r4}).")
    assert expected in readme()


def test_tensor_parallel_intervals_claim():
    """The intervals sentence: which TP cells' 90% intervals exclude 1.00,
    and the repeats a +-3% interval would take, over every cell of the
    TP calls."""
    cells = [(stem, e) for stem in TP_CALLS for e in report.results.paired_ratios(load(stem))]
    excluding = [(stem, e) for stem, e in cells
                 if e["interval_90"] and not e["interval_90"][0] <= 1 <= e["interval_90"][1]]
    said = []
    for stem, e in excluding:
        tp, turn = e["tp"], load(stem)["bench"].get("turn", "base first")
        lo, hi = e["interval_90"]
        said.append(f"TP={tp}, concurrency {e['concurrency']}, {turn}"
                    f"{' on the ×4' if turn == 'alternating' else ''} ({lo:.2f} to {hi:.2f})")
    needed = sorted(e["repeats_for_3pct"] for _, e in cells)
    held = sorted(len(e["ratios"]) for _, e in cells)
    text = readme()
    assert f"two of the {len(cells)} cells exclude 1.00, with opposite signs: " in text
    assert len(excluding) == 2 and {e["geo_mean"] > 1 for _, e in excluding} == {True, False}
    assert " and ".join(said) in text
    median = needed[len(needed) // 2]
    assert len(needed) % 2 == 1
    assert (f"take a median of {median} paired repeats a cell ({needed[0]} to {needed[-1]}), "
            f"where each call held {held[0]} to {held[-1]}.") in text


def test_fa3_bounded_fill_claim_matches_its_results():
    m = re.search(r"greedy output still equal to base, the host-truth check 0 of (\d+) "
                  r"\(2026-11-26-h100-fa3-bounded-fill-checks\), and patched / base ([\d.]+) / "
                  r"([\d.]+) / ([\d.]+) with only (\d) / (\d) / (\d) repeats", readme())
    assert m, "the bounded-fill sentence is gone"
    (run,) = load("2026-11-26-h100-fa3-bounded-fill-checks")["greedy_runs"]
    assert (run["seq_lens_truth_checks"], run["seq_lens_truth_violations"]) == (int(m.group(1)), 0)
    assert run["prompts_off_constructed_f"] == 0 and run["attention_backend"] == "default"
    data = load("2026-11-26-h100-default-backend-fa3-bounded-fill")
    _, runs = checked_side_by_side(data, m.groups()[1:4], "patches 0001-0009")
    repeats = [min(runs[("base", c)]["repeats"], runs[("patched", c)]["repeats"]) for c in (1, 8, 32)]
    assert repeats == [int(x) for x in m.groups()[4:]]


def test_fa3_bounded_fill_repeats_claim_matches_its_results():
    stem = "2026-11-26-h100-default-backend-fa3-bounded-fill-repeats"
    m, data = h100_claim(rf"With 3 repeats, the turn alternating \({stem}\), it is ([\d.]+) / "
                         r"([\d.]+) / ([\d.]+), and slower at concurrency 8 in each of the (\d) "
                         r"paired repeats \(([\d.]+) to ([\d.]+)\), greedy output equal", stem)
    assert data["bench"]["turn"] == "alternating"
    _, runs = checked_side_by_side(data, m.groups()[:3], "patches 0001-0009")
    assert all(r["repeats"] >= 3 and r["attention_backend"] == "default" for r in runs.values())
    (c8,) = [e for e in report.results.paired_ratios(data) if e["concurrency"] == 8]
    assert c8["below_1"] == 0 and len(c8["ratios"]) == int(m.group(4))
    assert (f"{min(c8['ratios']):.2f}", f"{max(c8['ratios']):.2f}") == m.groups()[4:]


def test_flashinfer_claim_matches_its_results():
    stem = "2026-11-26-h100-flashinfer-eagle3"
    m, data = h100_claim(rf"\({stem}\) got one repeat a point before its deadline, as compiling "
                         r"flashinfer's kernels took the two servers (\d+) s and (\d+) s to start: "
                         r"patched / base ([\d.]+) at concurrency 1, ([\d.]+) at 8 and ([\d.]+) "
                         r"at 32, greedy output equal", stem)
    starts = sorted(round(x["start_s"]) for x in data["server_starts"])
    assert starts == [int(m.group(1)), int(m.group(2))]
    _, runs = checked_side_by_side(data, m.groups()[2:], "host pull on: FlashInferAttnBackend")
    with open(os.path.join(RESULTS, "2026-11-26-h100-probes", "flashinfer-decode-log.json")) as fh:
        log = json.load(fh)["builds"]
    base, patched = (log[f"{v}-flashinfer-ov1-EAGLE3-pcg1"] for v in ("base", "patched"))
    assert patched["median"] < base["median"]  # "agrees": fewer tokens/s patched
    assert (f"patched {round(patched['median'])} against base {round(base['median'])} tokens/s, "
            f"medians of {patched['lines']} and {base['lines']} lines") in readme()
    assert all(r["attention_backend"] == "flashinfer" for r in runs.values())
    assert min(runs[("base", c)]["repeats"] for c in (1, 8, 32)) == 1  # "one repeat"


def test_tensor_parallel_warning_covers_the_measured_range():
    text = " ".join(readme().split())
    m = re.search(r"with tensor parallelism \(TP=2, TP=4\) the series through 0008 is not shown to "
                  r"be no slower\*\*: five side-by-side calls on H100 put patched / base between "
                  r"([\d.]+) and ([\d.]+)", text)
    ratios = [x for stem in TP_CALLS for x in tp_ratios(load(stem))[0]]
    assert (round(min(ratios), 2), round(max(ratios), 2)) == (float(m.group(1)), float(m.group(2)))
    assert len(TP_CALLS) == 5  # "five side-by-side calls"
    # "two more on H200 with each server pinned ... slower in every repeat at
    # TP=2, concurrency 32 (lo to hi)"
    assert len(PINNED_TP_CALLS) == 2
    (cell,) = [e for e in report.results.paired_ratios(load(PINNED_TP_CALLS[1]))
               if e["concurrency"] == 32]
    assert cell["below_1"] == 0 and cell["tp"] == 2
    assert (f"two more on H200 with each server pinned to its own cores found patched slower "
            f"in every repeat at TP=2, concurrency 32 ({min(cell['ratios']):.2f} to "
            f"{max(cell['ratios']):.2f})") in text


def test_tensor_parallel_two_call_row_is_the_shipped_series_paired():
    """The H100 x2 row: the 8-patch series, two calls pooled, and the paired
    medians and per-cell counts the README gives for it."""
    stem = "2026-11-26-h100x2-tp2-eagle3-two-calls"
    data = load(stem)
    assert all("patches 0001-0008" in line for line in patched_start_lines(data))
    assert {x["call"] for x in data["server_starts"]} == {"call 1", "call 2"}
    paired = {e["concurrency"]: e for e in report.results.paired_ratios(data)}
    medians = " / ".join(f"{paired[c]['median']:.2f}" for c in (1, 8, 32))
    assert f"paired medians {medians}, and no cell holds in every repeat" in readme()
    assert all(0 < e["below_1"] < len(e["ratios"]) for e in paired.values())


def test_fa3_candidate_claim_matches_its_results():
    text = readme()
    m = re.search(r"host-truth check 0 of (\d+) in 2026-11-26-h100-fa3-no-host-pull-checks, 0 host "
                  r"pulls over (\d+) relayed steps in the sync trace\) but is no faster either: "
                  r"([\d.]+) / ([\d.]+) / ([\d.]+), inside the spread", text)
    assert m, "the fa3 candidate sentence is gone"
    checks, relayed, *claimed = m.groups()
    (run,) = load("2026-11-26-h100-fa3-no-host-pull-checks")["greedy_runs"]
    assert (run["seq_lens_truth_checks"], run["seq_lens_truth_violations"]) == (int(checks), 0)
    assert run["attention_backend"] == "default" and run["prompts_off_constructed_f"] == 0
    with open(os.path.join(RESULTS, "2026-11-26-h100-probes", "fa3-no-host-pull-sync-trace",
                           "2135.json")) as fh:
        probe = json.load(fh)
    assert (probe["relayed_resolves"], probe["host_pulls"]) == (int(relayed), 0)
    data = load("2026-11-26-h100-default-backend-fa3-no-host-pull")
    _, runs = checked_side_by_side(data, claimed, "patches 0001-0009")
    assert_inside_spread(runs)
    assert all("host pull off" in line for line in patched_start_lines(data))
    # "costs up to 3.2 ms a step at batch 256 with a 128k context"
    m = re.search(r"costs up to ([\d.]+) ms a step at batch (\d+) with a 128k context", text)
    with open(os.path.join(RESULTS, "2026-11-26-h100-probes", "fa3-page-fill-micro.json")) as fh:
        fill = json.load(fh)
    (point,) = [p for p in fill["points"]
                if p["batch_size"] == int(m.group(2)) and p["width"] == 131072]
    assert round(point["step_us"] / 1000, 1) == float(m.group(1))
    assert point["step_us"] == max(p["step_us"] for p in fill["points"])


# the fault calls: the series through 0008, then the whole series
FAULT_CALLS = ("2026-11-26-h100x4-faults", "2026-11-27-h100x4-faults-full-series")


def evidence_lines(name):
    """A committed log excerpt under benchmark/results/ without its '#' header."""
    with open(os.path.join(RESULTS, name)) as fh:
        return [x for x in fh if not x.startswith("#")]


def logged_truth_counts(lines):
    """{(shape, rank): the highest truth-check count logged}, from a fault
    call's grepped server lines, after checking that none reports a
    violation or a stale attention plan."""
    counts = {}
    for line in lines:
        assert "StaleAttentionPlan" not in line and "used stale lengths" not in line
        c = re.search(r"seq_lens truth check: (\d+) checks, (\d+) violations", line)
        if c:
            assert c.group(2) == "0"
            key = (line.split("/")[0], "TP1" if " TP1]" in line else "TP0")
            counts[key] = max(counts.get(key, 0), int(c.group(1)))
    return counts


def test_load_and_faults_claim_matches_its_results():
    text = readme()
    m = re.search(r"retracted (\d+) to (\d+) requests, and put 0 of (\d+) greedy prompts off "
                  r"their chain during the storm or after it\. No server went silent: the "
                  r"longest time no client got a byte was ([\d.]+) s", text)
    records = []
    for stem in FAULT_CALLS:
        assert f"{stem}-tp1, -tp2 and -disagg" in text
        calls = [load(f"{stem}-{shape}") for shape in ("tp1", "tp2", "disagg")]
        assert all(d["card"].startswith("NVIDIA H100") for d in calls)
        shape_records = [f for d in calls for f in d["faults"]]
        assert sorted({(f["tp"], f.get("disaggregation") or "") for f in shape_records}) == [
            (1, ""), (1, "decode"), (2, "")]
        assert sorted(f["variant"] for f in shape_records) == ["base"] * 3 + ["patched"] * 3
        records += shape_records
    assert all(f["alive"] and f["errors"] == 0 for f in records)
    assert all(f["prompts_off_chain_during"] == f["prompts_off_chain_after"] == 0 for f in records)
    assert all(f["greedy_prompts"] == int(m.group(3)) for f in records)
    retracted = [f["retracted_requests"] for f in records]
    assert (min(retracted), max(retracted)) == (int(m.group(1)), int(m.group(2)))
    assert round(max(f["max_output_gap_s"] for f in records), 1) == float(m.group(4))


def test_fault_runs_truth_counts_in_docs_match_the_server_lines():
    # docs/faults.md: the count every 1000 checks, up to these, 0 violations
    doc = flat("docs/faults.md")
    m = re.search(r"up to ([\d ]+) \(TP=2, on both ranks\), ([\d ]+) \(TP=1\) and ([\d ]+) "
                  r"\(disaggregated\), with 0 violations and no stale-plan error", doc)
    claimed = [int(x.replace(" ", "")) for x in m.groups()]
    lines = evidence_lines("2026-11-26-h100x4-faults-server-lines.log")
    counts = logged_truth_counts(lines)
    assert [counts[("tp2", "TP0")], counts[("tp1", "TP0")], counts[("disagg", "TP0")]] == claimed
    assert counts[("tp2", "TP1")] == counts[("tp2", "TP0")]
    started = [x for x in lines if "sglpatch: patches 0001-0008" in x]
    assert sorted(x.split("/")[0] for x in started) == ["disagg", "tp1", "tp2"]
    assert all("per-step seq_lens host pull off" in x for x in started)


def test_default_backend_claim_matches_its_results():
    text = readme()
    m, data = h100_claim(r"median TPOT patched / base is ([\d.]+) at concurrency 1, ([\d.]+) at 8 "
                         r"and ([\d.]+) at 32, each inside the spread of its repeats",
                         "2026-11-26-h100-default-backend-fa3-repeats")
    assert {r["attention_backend"] for r in data["runs"]} == {"default"}
    # the patched server said why it keeps the host pull
    _, runs = checked_side_by_side(data, m.groups(), "host pull on: FlashAttentionBackend")
    assert_inside_spread(runs)
    # the earlier short run's range, as the README gives it
    m = re.search(r"\(2026-11-26-h100-default-backend-fa3\) scattered from ([\d.]+) to ([\d.]+)\.",
                  text)
    _, first = tp_ratios(load("2026-11-26-h100-default-backend-fa3"))
    ratios = [p["tpot_ms"] / b["tpot_ms"] for c in (1, 8, 32)
              for p, b in zip(first[("patched", c)]["samples"], first[("base", c)]["samples"])]
    assert (round(min(ratios), 2), round(max(ratios), 2)) == (float(m.group(1)), float(m.group(2)))

def test_flashinfer_concurrency_1_claim_matches_its_results():
    stem = "2026-11-26-h100-flashinfer-c1-two-calls"
    m, data = h100_claim(
        rf"\({stem}, (\d+) base and (\d+) patched repeats, greedy equal\) give a median of "
        r"([\d.]+), paired ([\d.]+) \[([\d.]+), ([\d.]+)\], patched faster in (\d) of (\d) "
        r"repeats: the repeats scatter from ([\d.]+) to ([\d.]+) ms", stem)
    runs = {r["variant"]: r for r in data["runs"]}
    assert all(r["concurrency"] == 1 and r["attention_backend"] == "flashinfer"
               for r in runs.values())
    assert [runs["base"]["repeats"], runs["patched"]["repeats"]] == [int(m.group(1)), int(m.group(2))]
    assert len({g["sha256"] for g in data["greedy_runs"]}) == 1
    assert f"{runs['patched']['tpot_ms_median'] / runs['base']['tpot_ms_median']:.2f}" == m.group(3)
    (pair,) = report.results.paired_ratios(data)
    lo, hi = pair["interval_90"]
    assert (f"{pair['geo_mean']:.2f}", f"{lo:.2f}", f"{hi:.2f}") == m.groups()[3:6]
    assert (pair["below_1"], len(pair["ratios"])) == (int(m.group(7)), int(m.group(8)))
    tpots = [x["tpot_ms"] for r in runs.values() for x in r["samples"]]
    assert (f"{min(tpots):.1f}", f"{max(tpots):.1f}") == m.groups()[8:]


def probe_rows(folder, rank=0):
    """Base's and patched's batch-size-1 rows of one rank in a host-time
    probe folder (a server without tensor parallelism records rank None)."""
    rows = {os.path.basename(r["build"]): r["by_batch_size"]["1"]
            for r in host_time.load([os.path.join(RESULTS, "2026-11-26-h100-probes", folder)])
            if r["rank"] in ((0, None) if rank == 0 else (rank,))}
    return rows["sb-probe"], rows["sp-probe"]


def test_flashinfer_host_time_claim_matches_the_probe():
    m = re.search(r"a patched step took ([\d.]+) times base's \(median ([\d.]+) against "
                  r"([\d.]+) ms\), .* take ~(\d+) us a step more than 0.5.12.post1's \(publish, "
                  r"stash, the pull and its gather: (\d+) us, against (\d+) us for what they "
                  r"replace\), and the code both builds run alike ran ([\d.]+) times as long in "
                  r"the patched server .* puts at ([\d.]+) to ([\d.]+) in the probe calls before "
                  r"\(batch size 1, rank 0\)",
                  readme())
    assert m, "the README's flashinfer host-time sentence is gone"
    base, patched = probe_rows("flashinfer-host-time")
    b50, p50 = base["iteration_us_p50_p90_p99"][0], patched["iteration_us_p50_p90_p99"][0]
    assert (f"{p50 / b50:.2f}", f"{p50 / 1000:.2f}", f"{b50 / 1000:.2f}") == m.groups()[:3]
    only_patched = sum(patched["functions"][f][1] for f in (
        "FutureMap.publish", "FutureMap.stash_batch_result", "FutureMap.resolve_seq_lens_cpu",
        "FutureMap.set_input_ids_sentinel"))
    only_base = sum(base["functions"][f][1] for f in (
        "FutureMap.alloc_future_indices", "FutureMap.store_to_map",
        "ScheduleBatch.get_model_worker_batch", "ScheduleBatch.maybe_wait_verify_done"))
    assert (round(only_patched), round(only_base)) == (int(m.group(5)), int(m.group(6)))
    assert abs((only_patched - only_base) - int(m.group(4))) < 5
    _, shared = host_time.shared_code_ratio(patched, base, host_time.SHARED_CODE_BEFORE_0012)
    assert f"{shared:.2f}" == m.group(7)
    before = []
    for folder in ("tp2-host-time", "gc-garbage"):
        b, p = probe_rows(folder)
        before.append(host_time.shared_code_ratio(p, b, host_time.SHARED_CODE_BEFORE_0012)[1])
    assert (f"{min(before):.2f}", f"{max(before):.2f}") == m.groups()[7:]
    m = re.search(r"Divided by that host speed, a patched step took ([\d.]+) times base's "
                  r"\(the table's last row\), about what the relay's extra (\d+) us are of "
                  r"base's ([\d.]+) ms step", readme())
    assert m, "the README's host-speed sentence is gone"
    corrected = p50 / b50 / shared
    assert f"{corrected:.2f}" == m.group(1) and f"{b50 / 1000:.2f}" == m.group(3)
    # "about": the relay's extra time is within a point of the corrected excess
    assert abs((corrected - 1) - int(m.group(2)) / b50) < 0.01


def test_benchmark_readme_flashinfer_rows_match_their_results():
    with open(os.path.join(REPO, "benchmark", "README.md")) as fh:
        text = fh.read()
    for stem in ("2026-11-26-h100-flashinfer-eagle3", "2026-11-26-h100-flashinfer-c1-two-calls",
                 "2026-11-26-h100-flashinfer-host-time"):
        m = re.search(rf"\| \[{stem}\]\(results/{stem}\.md\) \| [^|]+ \| ([\d.—]+) \| "
                      rf"([\d.—]+) \| ([\d.—]+) \| ([\d /–]+) \| base = patched \|", text)
        assert m, f"benchmark/README.md has no flashinfer row for {stem}"
        data = load(stem)
        assert data["card"].startswith("NVIDIA H100")
        assert len({g["sha256"] for g in data["greedy_runs"]}) == 1
        runs = {(r["variant"], r["concurrency"]): r for r in data["runs"]}
        assert all(r["attention_backend"] == "flashinfer" for r in runs.values())
        for c, cell in zip((1, 8, 32), m.groups()[:3]):
            if ("patched", c) in runs and ("base", c) in runs:
                ratio = runs[("patched", c)]["tpot_ms_median"] / runs[("base", c)]["tpot_ms_median"]
                assert f"{ratio:.2f}" == cell
            else:
                assert cell == "—"
        paired = [r for (v, c), r in runs.items() if ("base", c) in runs and ("patched", c) in runs]
        counts = sorted({r["repeats"] for r in paired})
        if len(paired) == 2 and len(counts) == 2:  # one point: "base / patched" repeats
            (c,) = {r["concurrency"] for r in paired}
            expected = f"{runs[('base', c)]['repeats']} / {runs[('patched', c)]['repeats']}"
        else:
            expected = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
        assert m.group(4) == expected, (stem, m.group(4), expected)


def test_tp2_host_speed_claim_in_known_limits_matches_the_probe():
    text = flat("docs/architecture.md")
    m = re.search(r"the code both builds share (\d+)% \(rank 0\) and (\d+)% \(rank 1\) faster "
                  r"\(the table's shared-code row\)\. Divided by that, a patched step took "
                  r"([\d.]+) and ([\d.]+) times base's", text)
    assert m, "Known limits' TP=2 host-speed sentence is gone"
    for rank, faster, corrected in ((0, m.group(1), m.group(3)), (1, m.group(2), m.group(4))):
        base, patched = probe_rows("tp2-host-time", rank)
        _, shared = host_time.shared_code_ratio(patched, base, host_time.SHARED_CODE_BEFORE_0012)
        assert f"{round((1 - shared) * 100)}" == faster
        step = host_time.p50(patched) / host_time.p50(base) / shared
        assert f"{step:.2f}" == corrected


PINNED_TP_CALLS = ("2026-11-26-h200x4-tp4-eagle3-pinned-two-calls",
                   "2026-11-26-h200x4-tp2-eagle3-pinned-pairs")


def cpu_set(text):
    """"0-2,8" -> {0, 1, 2, 8} (the notation run.cpu_list writes)."""
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def test_pinned_tensor_parallel_rows_match_their_results():
    """The pinned H200 TP table: ratios, repeats, the card, every server on
    cores no other server shares, one greedy digest, the series as shipped."""
    text = readme()
    for stem in PINNED_TP_CALLS:
        m = re.search(rf"\| \[{stem}\]\(benchmark/results/{stem}\.md\) \| (\d) \| "
                      rf"([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d /]+) \|", text)
        assert m, f"the README's pinned TP table has no row for {stem}"
        tp, *claimed, repeats = m.groups()
        data = load(stem)
        assert data["card"].startswith("NVIDIA H200")
        assert data["bench"]["pin_cpus"] is True and data["bench"]["turn"] == "alternating"
        _, runs = checked_side_by_side(data, claimed, start_line="patches 0001-0008 applied")
        assert all(r["tp"] == int(tp) and r["attention_backend"] == "triton" for r in runs.values())
        got = [min(runs[("base", c)]["repeats"], runs[("patched", c)]["repeats"])
               for c in (1, 8, 32)]
        want = [int(x) for x in repeats.split(" / ")]
        assert got == (want * 3 if len(want) == 1 else want)
        # within each call (or copy of the comparison), no two servers share a CPU
        by_call = {}
        for start in data["server_starts"]:
            by_call.setdefault(start.get("call"), []).append(cpu_set(start["cpus"]))
        for cpus in by_call.values():
            assert len(cpus) == 2 and not cpus[0] & cpus[1]
        assert all(g["prompts_off_own_chain"] == 0 for g in data["greedy_runs"])


def test_pinned_tensor_parallel_claims():
    """'did not narrow the scatter ... up to 1.27 ms' and the one cell that
    holds in every repeat, with its range and interval."""
    text = readme()
    widest = max(sample_spread(r) for stem in PINNED_TP_CALLS for r in load(stem)["runs"])
    assert f"one build's repeats still spread over up to {widest:.2f} ms" in text
    bench_readme = flat("benchmark/README.md")
    assert f"it did not narrow the scatter of repeats: one build's repeats still spread over up to {widest:.2f} ms" in bench_readme
    assert "Not yet run on a GPU" not in bench_readme.split("**Pinned to cores**")[1][:1500]
    consistent = [(stem, e) for stem in PINNED_TP_CALLS
                  for e in report.results.paired_ratios(load(stem))
                  if e["below_1"] in (0, len(e["ratios"]))]
    assert len(consistent) == 1
    stem, e = consistent[0]
    assert stem.endswith("tp2-eagle3-pinned-pairs") and e["concurrency"] == 32
    assert e["below_1"] == 0  # slower in every repeat
    n = len(e["ratios"])
    lo, hi = e["interval_90"]
    assert (f"concurrency 32, patched is slower in {n} of {n} ({min(e['ratios']):.2f} to "
            f"{max(e['ratios']):.2f}, over both copies of the comparison; 90% interval "
            f"{lo:.2f} to {hi:.2f})") in " ".join(text.split())
    # "the unpinned H100 calls gave 1.04, 0.91 and 0.99 for that cell"
    h100_tp2 = [round(tp_ratios(load(s))[0][2], 2) for s in TP_CALLS
                if all(r["tp"] == 2 for r in load(s)["runs"])]
    said = ", ".join(f"{x:.2f}" for x in h100_tp2[:-1]) + f" and {h100_tp2[-1]:.2f}"
    assert f"unpinned H100 calls gave {said} for that cell" in " ".join(text.split())


def test_startup_capture_claim():
    """benchmark/README.md: the capture and first-batch-size ranges of the
    pinned H200 calls' servers, and the ready times it names."""
    with open(os.path.join(RESULTS, "2026-11-26-h200x4-probes", "startup-capture.json")) as fh:
        rows = json.load(fh)
    assert len(rows) == 8  # two servers a call, the TP=2 call's two copies
    capture = [r["capture_s"] for r in rows]
    first = [r["first_bs_s"] for r in rows]
    rest = [r["capture_s"] - r["first_bs_s"] for r in rows]
    text = flat("benchmark/README.md")
    assert (f"capture ({min(capture):.0f} to {max(capture):.0f} s, every server of the three "
            f"calls), nearly all of it in its first batch size ({min(first)} to {max(first)} s; "
            f"the other nineteen take {int(min(rest))} to {round(max(rest))} s together)") in text
    assert all(r["sizes"] == 20 for r in rows)
    starts = [s["start_s"] for s in load("2026-11-26-h200x4-tp4-eagle3-pinned-two-calls")["server_starts"]]
    ready = [int(x) for x in starts]
    assert (f"ready in {ready[0]} / {ready[1]} s on a fresh machine and {ready[2]} / {ready[3]} s "
            "in the next call on the warm one") in text


def test_pinned_calls_ran_slower_than_the_unpinned_ones():
    """benchmark/README.md: at TP=2 the pinned H200 call's medians over each
    unpinned H100 TP=2 call's, cell by cell and build by build."""
    pinned = tp_ratios(load(PINNED_TP_CALLS[1]))[1]
    ratios = []
    for stem in TP_CALLS:
        runs = tp_ratios(load(stem))[1]
        if all(r["tp"] == 2 for r in runs.values()):
            ratios += [pinned[k]["tpot_ms_median"] / runs[k]["tpot_ms_median"] for k in runs]
    assert len(ratios) == 3 * 6 and min(ratios) > 1
    text = flat("benchmark/README.md")
    assert (f"at TP=2 their median TPOT was {min(ratios):.2f} to {max(ratios):.2f} times that "
            f"of the three unpinned H100 calls, cell by cell") in text


def test_admission_log_claims():
    """docs/architecture.md's reading of the pinned calls' logs: mean over
    median ITL at c=32, patched over base per copy and repeat at TP=2, the
    requests per prefill forward, and the ratios by turn."""
    with open(os.path.join(RESULTS, "2026-11-26-h200x4-probes", "admission.json")) as fh:
        data = json.load(fh)
    text = flat("docs/architecture.md")
    pts = {(p["server"], p["concurrency"], p["rep"]): p for p in data["points"]}
    c32 = [p for p in data["points"] if p["concurrency"] == 32]
    tail = [p["mean_itl_ms"] / p["median_itl_ms"] for p in c32]
    p95 = [p["p95_itl_ms"] for p in c32]
    assert (f"mean inter-token latency is {min(tail):.1f} to {max(tail):.1f} times its median in "
            f"every point of both builds") in text
    assert f"(P95 {min(p95):.0f} to {max(p95):.0f} ms)" in text

    def ratios(prefix, reps, key):
        out = []
        for rep in reps:
            b = pts.get((f"{prefix}/base-triton-ov1-EAGLE3-pcg1", 32, rep))
            q = pts.get((f"{prefix}/patched-triton-ov1-EAGLE3-pcg1", 32, rep))
            if b and q:
                out.append(q[key] / b[key])
        return out

    tp2 = [f"tp2-pairs/pair{i}" for i in (0, 1)]
    med = [x for pre in tp2 for x in ratios(pre, (0, 1), "median_itl_ms")]
    mean = [x for pre in tp2 for x in ratios(pre, (0, 1), "mean_itl_ms")]
    assert len(med) == 4
    assert (f"patched's median ITL was {min(med):.2f} to {max(med):.2f} times base's in the same "
            f"copy and repeat and its mean {min(mean):.2f} to {max(mean):.2f} times") in text
    per = {s["server"]: s["requests_per_forward"] for s in data["servers"]}
    base = sorted(per[f"{pre}/base-triton-ov1-EAGLE3-pcg1"] for pre in tp2)
    patched = sorted(per[f"{pre}/patched-triton-ov1-EAGLE3-pcg1"] for pre in tp2)
    assert (f"({patched[0]:.2f} and {patched[1]:.2f} against {base[0]:.2f} and {base[1]:.2f} "
            "while at least 16 ran)") in text
    odd = [x for pre in tp2 for x in ratios(pre, (1,), "median_itl_ms")]
    odd4 = ratios("tp4-call1", (1,), "median_itl_ms")
    even = [x for pre in tp2 + ["tp4-call1"] for x in ratios(pre, (0,), "median_itl_ms")]
    even4b = ratios("tp4-call2", (0,), "median_itl_ms")
    assert {f"{x:.2f}" for x in odd} == {"1.14"} and len(odd4) == 1 and len(even4b) == 1
    assert (f"(1.14 in both TP=2 copies, {odd4[0]:.2f} at TP=4) came in the odd repeats") in text
    assert (f"they were {min(even):.2f} to {max(even):.2f} (and {even4b[0]:.2f} in the second "
            "TP=4 call)") in text


def test_unpinned_admission_log_claim():
    """The unpinned H100 x2 call's reading in docs/architecture.md, from its
    admission JSON; the file is the second call of the two-call row (its
    c=32 TPOT samples are that call's)."""
    with open(os.path.join(RESULTS, "2026-11-26-h100-probes",
                           "tp2-two-calls-call2-admission.json")) as fh:
        data = json.load(fh)
    pts = {(p["server"].split("-")[0], p["concurrency"], p["rep"]): p for p in data["points"]}
    first_base = pts[("patched", 32, 0)]["median_itl_ms"] / pts[("base", 32, 0)]["median_itl_ms"]
    first_patched = pts[("patched", 32, 1)]["median_itl_ms"] / pts[("base", 32, 1)]["median_itl_ms"]
    per = {s["server"].split("-")[0]: s["requests_per_forward"] for s in data["servers"]}
    text = flat("docs/architecture.md")
    assert (f"patched's median ITL at concurrency 32 was {first_base:.2f} times base's with base "
            f"first and {first_patched:.2f} with patched first, and it admitted "
            f"{per['patched']:.2f} requests per prefill forward against base's "
            f"{per['base']:.2f}") in text
    # the file belongs to call 2 of the two-call row: same number of c=32 points a build
    two_calls = load("2026-11-26-h100x2-tp2-eagle3-two-calls")
    (base32,) = [r for r in two_calls["runs"] if r["variant"] == "base" and r["concurrency"] == 32]
    assert sum(s["call"] == "call 2" for s in base32["samples"]) == sum(
        1 for k in pts if k[0] == "base" and k[1] == 32)


UNPINNED_H200_TP2 = "2026-11-26-h200x2-tp2-eagle3-two-calls"
UNPINNED_H200_PROBE_CALL = "2026-11-26-h200x2-tp2-c32-host-time"
H200X2_PROBES = os.path.join(RESULTS, "2026-11-26-h200x2-probes")


def test_unpinned_h200_tp2_row_matches_its_results():
    """README's and benchmark/README's H200 x2 row: ratios, repeats, not
    pinned, turn alternating, the shipped series, one greedy digest; the
    paired medians and counts, and the probe call's sentence."""
    stem = UNPINNED_H200_TP2
    data = load(stem)
    assert data["card"].startswith("NVIDIA H200")
    assert data["bench"]["pin_cpus"] is False and data["bench"]["turn"] == "alternating"
    assert {x["call"] for x in data["server_starts"]} == {"call 2", "call 3"}
    text = readme()
    m = re.search(rf"\| \[{stem}\]\(benchmark/results/{stem}\.md\) \| 2 \| ([\d.]+) \| "
                  rf"([\d.]+) \| ([\d.]+) \| ([\d /]+) \|", text)
    assert m, "the README has no row for the unpinned H200 x2 calls"
    _, runs = checked_side_by_side(data, m.groups()[:3], start_line="patches 0001-0008 applied")
    assert all(r["tp"] == 2 and r["attention_backend"] == "triton" for r in runs.values())
    repeats = [min(runs[("base", c)]["repeats"], runs[("patched", c)]["repeats"]) for c in (1, 8, 32)]
    assert " / ".join(map(str, repeats)) == m.group(4)
    assert all(g["prompts_off_own_chain"] == 0 for g in data["greedy_runs"])
    assert (f"Two unpinned calls at TP=2 on an H200 ×2 then put it at "
            f"{' / '.join(m.groups()[:3])} at concurrency 1 / 8 / 32") in text
    row = (f"| [{stem}](results/{stem}.md) | TP=2, H200, two calls pooled | alternating | "
           f"{' | '.join(m.groups()[:3])} | {m.group(4)} | base = patched |")
    assert row in flat("benchmark/README.md")
    paired = {e["concurrency"]: e for e in report.results.paired_ratios(data)}
    medians = " / ".join(f"{paired[c]['median']:.2f}" for c in (1, 8, 32))
    counts = [f"{paired[c]['below_1']} of {len(paired[c]['ratios'])}" for c in (1, 8, 32)]
    assert (f"Paired repeat by repeat, the medians are {medians}, and patched is faster in "
            f"{counts[0]}, {counts[1]} and {counts[2]} repeats.") in text
    # the probe call: c=32 only, same machine kind, the probe in both builds
    probe = load(UNPINNED_H200_PROBE_CALL)
    assert probe["card"].startswith("NVIDIA H200") and probe["bench"]["pin_cpus"] is False
    ratios, runs = tp_ratios(probe, (32,))
    assert {c for _, c in runs} == {32}
    (cell,) = report.results.paired_ratios(probe)
    assert len({g["sha256"] for g in probe["greedy_runs"] + data["greedy_runs"]}) == 1
    assert (f"({UNPINNED_H200_PROBE_CALL}: {ratios[0]:.2f}, patched faster in "
            f"{cell['below_1']} of {len(cell['ratios'])} repeats)") in text


def pooled_host_rows():
    reports = host_time.pool_batch_sizes(
        host_time.load([os.path.join(H200X2_PROBES, "tp2-c32-host-time")]), 16)
    return {(os.path.basename(r["build"]), r["rank"]): r["by_batch_size"]["16+"] for r in reports}


def test_c32_host_time_claims():
    """The pooled host-time reading at TP=2, c=32: the iteration ratio on
    both ranks, and rank 0's relay, record and saved microseconds."""
    rows = pooled_host_rows()
    its = {rank: rows[("sp-probe", rank)]["iteration_us"] / rows[("sb-probe", rank)]["iteration_us"]
           for rank in (0, 1)}
    assert {f"{x:.2f}" for x in its.values()} == {"0.97"}
    base, patched = (rows[(b, 0)]["functions"] for b in ("sb-probe", "sp-probe"))
    relay_p = ("FutureMap.publish", "FutureMap.resolve_seq_lens_cpu",
               "FutureMap.set_input_ids_sentinel", "FutureMap.stash_batch_result")
    relay_b = ("FutureMap.alloc_future_indices", "FutureMap.store_to_map",
               "ScheduleBatch.get_model_worker_batch", "ScheduleBatch.maybe_wait_verify_done")
    # each build's relay functions are its own: the other build has none of them
    assert not set(relay_p) & set(base) and not set(relay_b) & set(patched)
    p_us = sum(patched[n][1] for n in relay_p)
    b_us = sum(base[n][1] for n in relay_b)
    record = patched["Scheduler.record_batch_in_overlap"][1] - base["Scheduler.record_batch_in_overlap"][1]
    saved = sum(base[n][1] - patched[n][1] for n in
                ("ScheduleBatch.prepare_for_decode", "ScheduleBatch.filter_batch", "Event.synchronize"))
    said = (f"the relay's own functions took patched {p_us:.0f} µs a step where base's took "
            f"{b_us:.0f} µs, and `record_batch_in_overlap` took {record:.0f} µs more, while "
            f"`prepare_for_decode`, `filter_batch` and the host waits on the GPU took {saved:.0f} µs less")
    assert said in readme()
    arch = flat("docs/architecture.md")
    assert f"gives a patched iteration {its[0]:.2f} times base's on both ranks" in arch
    assert f"relay's functions cost patched {p_us:.0f} µs a step" in arch
    assert f"where base's cost {b_us:.0f} µs" in arch and f"take {saved:.0f} µs less" in arch
    # the page beside the JSONs is what the probe prints for them
    with open(os.path.join(H200X2_PROBES, "tp2-c32-host-time.md")) as fh:
        page = fh.read()
    assert page.strip() == host_time.table(host_time.pool_batch_sizes(host_time.load(
        [os.path.join(H200X2_PROBES, "tp2-c32-host-time")]), 16),
        shared_code=host_time.SHARED_CODE_BEFORE_0012).strip()


def test_unpinned_h200_admission_claim():
    with open(os.path.join(H200X2_PROBES, "admission.json")) as fh:
        per = {s["server"]: s["requests_per_forward"] for s in json.load(fh)["servers"]}
    calls = ("call1-host-time", "call2", "call3")
    p = [per[f"{c}/patched-triton-ov1-EAGLE3-pcg1"] for c in calls]
    b = [per[f"{c}/base-triton-ov1-EAGLE3-pcg1"] for c in calls]
    assert all(x < y for x, y in zip(p, b))  # "slightly fewer ... in all three calls"
    assert (f"({p[0]:.2f}, {p[1]:.2f} and {p[2]:.2f} against {b[0]:.2f}, {b[1]:.2f} and "
            f"{b[2]:.2f};") in flat("docs/architecture.md")


def test_warm_start_claim():
    with open(os.path.join(H200X2_PROBES, "startup-capture.json")) as fh:
        # "call2/base-triton-ov1-EAGLE3-pcg1" -> "call2/base"
        rows = {r["server"].split("-triton")[0]: r for r in json.load(fh)}
    first = [rows[f"call1-host-time/{v}"]["first_bs_s"] for v in ("base", "patched")]
    warm = [rows[f"call{i}/{v}"]["first_bs_s"] for i in (2, 3) for v in ("base", "patched")]
    ready = [int(s["start_s"]) for s in load(UNPINNED_H200_PROBE_CALL)["server_starts"]] + [
        int(s["start_s"]) for s in load(UNPINNED_H200_TP2)["server_starts"]]
    assert (f"ready in {ready[0]} / {ready[1]} s on a fresh machine, then in {ready[2]} / "
            f"{ready[3]} s and {ready[4]} / {ready[5]} s in the next two calls") in flat("benchmark/README.md")
    assert (f"took {first[0]} / {first[1]} s in the first call and {min(warm)} to {max(warm)} s "
            "in the warm ones") in flat("benchmark/README.md")


def test_only_the_whole_series_has_a_tp4_call_no_slower_with_three_repeats():
    """'The series through 0008 has no TP=4 call with 3 repeats a cell in
    which it is no slower; the whole series has one' (README and
    docs/architecture.md), over every TP=4 results file."""
    tp4, no_slower = [], []
    for name in sorted(os.listdir(RESULTS)):
        if not name.endswith(".json"):
            continue
        data = load(name[:-5])
        runs = data.get("runs", [])
        if runs and all(r.get("tp") == 4 for r in runs) and {r["variant"] for r in runs} >= {
                "base", "patched"}:
            tp4.append(name)
            by = {(r["variant"], r["concurrency"]): r for r in runs}
            if not all((v, c) in by for v in ("base", "patched") for c in (1, 8, 32)):
                continue  # a call without all three concurrencies shows no TP=4 row
            ratios, _ = tp_ratios(data)
            repeats = [min(by[("base", c)]["repeats"], by[("patched", c)]["repeats"])
                       for c in (1, 8, 32)]
            if max(ratios) <= 1.0 and min(repeats) >= 3:
                no_slower.append(name)
    assert len(tp4) >= 4
    assert no_slower == [TP4_FULL + ".json"]
    checked_shm_file(TP4_FULL, 4, builds=("patched",))  # its patched is 0001-0009
    claim = ("The series through 0008 has no TP=4 call with 3 repeats a cell in which it is no "
             "slower; the whole series has one")
    assert claim in readme()
    assert "the series through 0008 has no TP=4 call with 3 repeats a cell in which it is no slower" \
        in flat("docs/architecture.md")


def test_request_broadcast_share_claim():
    """docs/architecture.md: base's per-iteration request broadcast on rank 0
    at TP=2, c=1 (H100 x2) and, both builds, c=32 pooled (H200 x2)."""
    c1 = {(os.path.basename(r["build"]), r["rank"]): r["by_batch_size"]["1"] for r in
          host_time.load([os.path.join(RESULTS, "2026-11-26-h100-probes", "tp2-host-time")])}
    base1 = c1[("sb-probe", 0)]
    c32 = pooled_host_rows()
    b32, p32 = (c32[(b, 0)] for b in ("sb-probe", "sp-probe"))
    arch = flat("docs/architecture.md")
    assert (f"({base1['functions']['broadcast_pyobj'][1]:.0f} µs of a "
            f"~{host_time.p50(base1) / 1000:.0f} ms iteration at concurrency 1 on the H100 ×2, "
            f"{b32['functions']['broadcast_pyobj'][1]:.0f} and "
            f"{p32['functions']['broadcast_pyobj'][1]:.0f} µs of "
            f"~{(b32['iteration_us'] + p32['iteration_us']) / 2000:.1f} ms at concurrency 32 "
            "on the H200 ×2)") in arch


def test_h100x4_startup_claim():
    """benchmark/README.md: three TP=4 servers on an H100 x4, the ready times
    of each call and the first batch size's capture, alone and together."""
    probes = os.path.join(RESULTS, "2026-11-27-h100x4-probes")
    calls = []
    for i in (1, 2, 3):
        with open(os.path.join(probes, f"call{i}.json")) as fh:
            calls.append(json.load(fh))
    assert all(c["card"].startswith("NVIDIA H100") for c in calls)
    assert all(len(c["server_starts"]) == 3 for c in calls)
    fresh = [s["start_s"] for s in calls[0]["server_starts"]]
    warm = [s["start_s"] for c in calls[1:] for s in c["server_starts"]]
    text = flat("benchmark/README.md")
    assert (f"the servers were ready in {min(fresh):.0f} to {max(fresh):.0f} s on a fresh machine "
            f"and in {min(warm):.0f} to {max(warm):.0f} s in two calls on the warm one") in text
    with open(os.path.join(probes, "startup-capture.json")) as fh:
        rows = {r["server"]: r for r in json.load(fh)}
    alone = rows["call2/base-triton-ov1-EAGLE3-pcg1"]["first_bs_s"]
    together = [r["first_bs_s"] for k, r in rows.items() if k != "call2/base-triton-ov1-EAGLE3-pcg1"]
    assert (f"took {alone} s for its first batch size; the others, capturing at the same time as "
            f"one or two more, took {min(together)} to {max(together)} s") in text
    assert alone * 50 < min(together)
    began = {k: r["began"] for k, r in rows.items()}
    assert began["call2/base-triton-ov1-EAGLE3-pcg1"] == min(v for k, v in began.items()
                                                              if k.startswith("call2/"))
    assert "(base in the second call: it began at 00:55:04, the next server 1 s and the third 8 s later)" in text
    assert began["call2/base-triton-ov1-EAGLE3-pcg1"].endswith("00:55:04")
    assert sorted(v[-2:] for k, v in began.items() if k.startswith("call2/")) == ["04", "05", "12"]


def checked_shm_file(stem, tp, builds=("patched", "patched-through-0008")):
    """A results file of patch 0009's runs, after checking what every claim
    on it rests on: an H100 card, the TP, exactly the builds named beside
    base, their start lines, one greedy digest and no prompt off the chain."""
    data = load(stem)
    assert data["card"].startswith("NVIDIA H100") and {r["tp"] for r in data["runs"]} == {tp}
    assert {r["variant"] for r in data["runs"]} == {"base", *builds}
    starts = {x["setting"].split("-triton")[0]: x.get("sglpatch_line", "")
              for x in data["server_starts"]}
    shown = {"patched": "patches 0001-0009", "patched-through-0008": "patches 0001-0008"}
    assert all(starts[b].startswith(shown[b]) for b in builds)
    assert len({g["sha256"] for g in data["greedy_runs"]}) == 1
    assert all(g["prompts_off_constructed_f"] == 0 for g in data["greedy_runs"])
    return data


def test_shm_broadcast_candidate_page_matches_its_results():
    page = flat("docs/patches/0009-shm-request-broadcast.md")
    data = checked_shm_file("2026-11-27-h100x4-tp4-shm-candidate", 4)
    assert "2026-11-27-h100x4-tp4-shm-candidate.md" in page and "NVIDIA H100 ×4" in page
    cells = {(e["variant"], e["concurrency"]): e["ratios"] for e in report.results.paired_ratios(data)}
    for variant in ("patched", "patched-through-0008"):
        row = " | ".join(" / ".join(f"{x:.2f}" for x in cells[(variant, c)]) if (variant, c) in cells
                         else "—" for c in (1, 8, 32))
        label = "`patched` (0001-0009)" if variant == "patched" else "`patched-through-0008`"
        assert f"| {label} | {row} |" in page
    ours = [x for c in (1, 8) for x in cells[("patched", c)]]
    assert "faster than base in all three pairs" in page and len(ours) == 3 and max(ours) < 1
    shipped = {x["concurrency"]: x["samples"] for x in data["runs"] if x["variant"] == "patched-through-0008"}
    mine = {x["concurrency"]: x["samples"] for x in data["runs"] if x["variant"] == "patched"}
    assert all(a["tpot_ms"] < b["tpot_ms"] for c in mine for a, b in zip(mine[c], shipped[c]))


TP2_SHM = "2026-11-27-h100x2-tp2-shm-broadcast"
TP4_FULL = "2026-11-27-h100x4-tp4-eagle3-full-series"


def kept_servers_file(stem, tp, builds, calls):
    """A pooled file whose first call started the servers and whose later
    calls measured them again: (the file, each build's paired cells by
    (variant, concurrency)), after checking its card, TP, builds and digest
    (checked_shm_file) and which calls reused the servers."""
    data = checked_shm_file(stem, tp, builds)
    reused = {x["call"]: bool(x.get("reused")) for x in data["server_starts"]}
    assert reused == {c: i > 0 for i, c in enumerate(calls)}
    return data, {(e["variant"], e["concurrency"]): e for e in report.results.paired_ratios(data)}


def shm_tp2_cells():
    """The TP=2 call of patch 0009: each build's paired cells by
    (variant, concurrency)."""
    data, cells = kept_servers_file(TP2_SHM, 2, ("patched", "patched-through-0008"),
                                    ("call 1", "call 2", "call 3"))
    assert len(data["greedy_runs"]) == 9  # one digest for "all nine servers"
    return cells


def deployment_row(stem, shape, variant, build):
    """A row of benchmark/README.md's deployment table for one build of a
    file against base: the ratio of median TPOTs and the repeats, per c."""
    runs = {(r["variant"], r["concurrency"]): r for r in load(stem)["runs"]}
    ratios = " | ".join(f"{runs[(variant, c)]['tpot_ms_median'] / runs[('base', c)]['tpot_ms_median']:.2f}"
                        for c in (1, 8, 32))
    repeats = " / ".join(str(min(runs[(variant, c)]["repeats"], runs[("base", c)]["repeats"]))
                         for c in (1, 8, 32))
    return (f"| [{stem}](results/{stem}.md) | {shape}, {build} | alternating | {ratios} | "
            f"{repeats} | base = patched |")


def test_shm_broadcast_page_tp2_table_matches_its_results():
    cells = shm_tp2_cells()
    page = flat("docs/patches/0009-shm-request-broadcast.md")
    for variant, label in (("patched", "`patched` (0001-0009)"),
                           ("patched-through-0008", "`patched-through-0008`")):
        means = " | ".join(
            "{:.2f} [{:.2f}, {:.2f}]".format(cells[(variant, c)]["geo_mean"],
                                             *cells[(variant, c)]["interval_90"])
            for c in (1, 8, 32))
        below = " | ".join(f"{cells[(variant, c)]['below_1']} of {len(cells[(variant, c)]['ratios'])}"
                           for c in (1, 8, 32))
        assert f"| {label}, geometric mean [90% interval] | {means} |" in page
        assert f"| {label}, repeats below 1.00 | {below} |" in page
    # the whole series was faster than base in every pair, with 3 or more a cell
    ours = [cells[("patched", c)] for c in (1, 8, 32)]
    assert all(e["below_1"] == len(e["ratios"]) >= 3 for e in ours)


def test_readme_tensor_parallel_summary_names_0009s_numbers():
    """README's opening: what 0009 gave at TP=2, beside the series through
    0008, and the TP=4 pairs it has so far."""
    cells = shm_tp2_cells()
    ours = [cells[("patched", c)] for c in (1, 8, 32)]
    shipped = [cells[("patched-through-0008", c)] for c in (1, 8, 32)]
    n = sum(len(e["ratios"]) for e in ours)
    assert sum(e["below_1"] for e in ours) == n
    text = readme()
    means = " / ".join(f"{e['geo_mean']:.2f}" for e in ours)
    theirs = " / ".join(f"{e['geo_mean']:.2f}" for e in shipped)
    assert (f"faster than base in {n} of {n} paired repeats (geometric means of the ratios "
            f"{means} at concurrency 1 / 8 / 32), where the series through 0008, measured "
            f"beside them, gave {theirs}.") in text
    tp4 = [e for e in report.results.paired_ratios(checked_shm_file(TP4_FULL, 4, ("patched",)))
           if e["variant"] == "patched"]
    assert [e["concurrency"] for e in tp4] == [1, 8, 32]
    means = " / ".join(f"{e['geo_mean']:.2f}" for e in tp4)
    below = [f"{e['below_1']} of {len(e['ratios'])}" for e in tp4]
    low, high = tp4[2]["interval_90"]
    assert low < 1 < high  # "still holds 1.00"
    assert (f"At TP=4 on an H100 ×4 (three calls on one machine, pooled) the geometric means "
            f"were {means}, faster in {below[0]}, {below[1]} and {below[2]} paired repeats; at "
            f"concurrency 32 the 90% interval ({low:.2f} to {high:.2f}) still holds 1.00.") in text


def test_readme_tensor_parallel_0009_rows_match_their_results():
    """The first table of README's "Tensor parallel": each build's paired
    geometric mean and repeats below 1.00, TP=2 and TP=4."""
    text = readme()
    files = ((TP2_SHM, 2, ("patched", "patched-through-0008")),
             ("2026-11-27-h100x4-tp4-shm-candidate", 4, ("patched", "patched-through-0008")),
             (TP4_FULL, 4, ("patched",)))
    labels = {"patched": "0001-0009", "patched-through-0008": "0001-0008"}
    for stem, tp, builds in files:
        data = checked_shm_file(stem, tp, builds)  # one digest: "the same on every server"
        cells = {(e["variant"], e["concurrency"]): e for e in report.results.paired_ratios(data)}
        for variant, build in ((b, labels[b]) for b in builds):
            shown = []
            for c in (1, 8, 32):
                e = cells.get((variant, c))
                shown.append(f"{e['geo_mean']:.2f} ({e['below_1']} of {len(e['ratios'])})" if e else "—")
            row = (f"| [{stem}](benchmark/results/{stem}.md) | {tp} | {build} | "
                   f"{' | '.join(shown)} |")
            assert row in text, row
    # "the same on every server of all three files": one digest across them
    assert len({g["sha256"] for stem, _, _ in files for g in load(stem)["greedy_runs"]}) == 1
    assert "Greedy EAGLE3 output is the same on every server of all three files." in text


def test_architecture_tp_item_names_0009s_counts():
    cells = shm_tp2_cells()
    ours = [cells[("patched", c)] for c in (1, 8, 32)]
    shipped = [cells[("patched-through-0008", c)] for c in (1, 8, 32)]
    n, m = sum(len(e["ratios"]) for e in ours), sum(len(e["ratios"]) for e in shipped)
    repeats = sorted(len(e["ratios"]) for e in ours)
    arch = flat("docs/architecture.md")
    assert (f"the series with it was faster than base in {sum(e['below_1'] for e in ours)} of {n} "
            f"paired repeats and the series through 0008 in "
            f"{sum(e['below_1'] for e in shipped)} of {m}") in arch
    assert f"({TP2_SHM}.json, {repeats[0]} to {repeats[-1]} repeats a cell)" in arch.replace("`", "")


def test_benchmark_readme_0009_deployment_rows_match_their_results():
    """benchmark/README.md's deployment rows of the TP=2 file with 0009:
    ratio of median TPOTs and repeats, for each build against base."""
    shm_tp2_cells()  # the file's card, TP, builds and digests
    text = flat("benchmark/README.md")
    for variant, build in (("patched", "0001-0009"), ("patched-through-0008", "0001-0008")):
        row = deployment_row(TP2_SHM, "TP=2, three calls pooled", variant, build)
        assert row in text, row


def full_series_tp4_cells():
    """The TP=4 call of base and the whole series (calls 3 and 4 measured
    the servers call 2 started): the file, and its paired cells by
    concurrency."""
    data, cells = kept_servers_file(TP4_FULL, 4, ("patched",), ("call 2", "call 3", "call 4"))
    return data, {c: cells[("patched", c)] for c in (1, 8, 32)}


def test_full_series_tp4_intervals_and_slower_pairs_in_readme():
    _, cells = full_series_tp4_cells()
    spans = [("{:.2f} to {:.2f}".format(*cells[c]["interval_90"])) for c in (1, 8, 32)]
    slower = sorted(x for x in cells[32]["ratios"] if x > 1)
    assert len(slower) == len(cells[32]["ratios"]) - cells[32]["below_1"] == 2
    assert (f"its 90% intervals are {spans[0]} at concurrency 1, {spans[1]} at 8 and {spans[2]} "
            f"at 32, where two of seven pairs were slower ({slower[0]:.2f} and {slower[1]:.2f})."
            ) in readme()


def test_full_series_tp4_in_architecture_and_0009_page():
    data, cells = full_series_tp4_cells()
    arch = flat("docs/architecture.md").replace("`", "")
    means = " / ".join(f"{cells[c]['geo_mean']:.2f}" for c in (1, 8, 32))
    counts = sorted(len(cells[c]["ratios"]) for c in (1, 8, 32))
    assert (f"paired ratios was {means} at c=1 / 8 / 32 ({TP4_FULL}.json, {counts[0]} or "
            f"{counts[-1]} repeats a cell), with 1.00 inside the 90% interval at c=32 only") in arch
    assert [c for c in (1, 8, 32) if cells[c]["interval_90"][1] >= 1] == [32]
    below = sum(cells[c]["below_1"] for c in (1, 8, 32))
    total = sum(len(cells[c]["ratios"]) for c in (1, 8, 32))
    assert f"faster than base in {below} of {total} in a call of base and the whole series" in arch
    page = flat("docs/patches/0009-shm-request-broadcast.md")
    row = " | ".join("{:.2f} [{:.2f}, {:.2f}]".format(cells[c]["geo_mean"], *cells[c]["interval_90"])
                     for c in (1, 8, 32))
    assert f"| `patched` (0001-0009), geometric mean [90% interval] | {row} |" in page
    row = " | ".join(f"{cells[c]['below_1']} of {len(cells[c]['ratios'])}" for c in (1, 8, 32))
    assert f"| `patched` (0001-0009), repeats below 1.00 | {row} |" in page
    runs = {(r["variant"], r["concurrency"]): r for r in data["runs"]}
    medians = ", ".join(f"{runs[('base', c)]['tpot_ms_median']:.3f} / "
                        f"{runs[('patched', c)]['tpot_ms_median']:.3f} ms at c={c}" for c in (1, 8, 32))
    assert f"Median TPOT over the repeats, base / patched: {medians}." in page
    lowest = min(s["tpot_ms"] for s in runs[("patched", 32)]["samples"])
    assert f"one patched repeat at {lowest:.3f} ms" in page


def test_benchmark_readme_full_series_tp4_row():
    full_series_tp4_cells()  # the file's card, TP, builds, digest and calls
    row = deployment_row(TP4_FULL, "TP=4, three calls pooled", "patched", "0001-0009")
    assert row in flat("benchmark/README.md"), row


def test_full_series_tp4_start_claim_matches_its_capture_lines():
    """benchmark/README.md: patched ready in 84 s against base's 187 s, its
    decode capture 4.3 s against 84.7 s on rank 0."""
    data, _ = full_series_tp4_cells()
    start = {x["setting"].split("-triton")[0]: x["start_s"] for x in data["server_starts"]
             if x["call"] == "call 2"}
    capture = {}
    for line in evidence_lines("2026-11-27-h100x4-tp4-full-series-capture-lines.log"):
        m = re.search(r"server-(\w+)-triton.* TP0\] Capture cuda graph end\. Time elapsed: ([\d.]+) s",
                      line)
        if m:
            capture[m.group(1)] = float(m.group(2))
    assert (f"was ready in {start['patched']:.0f} s against base's {start['base']:.0f} s, its "
            f"decode CUDA-graph capture taking {capture['patched']:.1f} s against base's "
            f"{capture['base']:.1f} s on rank 0") in flat("benchmark/README.md")


def test_full_series_fault_run_in_docs_matches_its_results():
    records = {(shape, f["variant"]): f for shape in ("tp1", "tp2", "disagg")
               for f in load(f"2026-11-27-h100x4-faults-full-series-{shape}")["faults"]}
    doc = flat("docs/faults.md")
    # (alive, errors, prompts off the chain: test_load_and_faults_claim_matches_its_results)
    retracted = [f["retracted_requests"] for f in records.values()]
    assert f"Retractions: {min(retracted)}–{max(retracted)} requests per server." in doc
    tp2 = [records[("tp2", v)] for v in ("base", "patched")]
    assert all(f["aborted"] == f["abort_requests_sent"] == 21 for f in tp2)
    assert "At TP=2 each of the 21 aborts sent ended its client's stream aborted, in both builds." in doc
    dis = [records[("disagg", v)] for v in ("base", "patched")]
    assert (f"{dis[0]['aborted']} (base) and {dis[1]['aborted']} (patched) of "
            f"{dis[0]['abort_requests_sent']} and {dis[1]['abort_requests_sent']} did") in doc
    gap = max(f["max_output_gap_s"] for f in records.values())
    assert f"received a byte: at most {gap:.2f} s" in doc
    checks = [records[(s, "patched")]["seq_lens_truth_checks"] for s in ("tp2", "tp1", "disagg")]
    assert all(records[(s, "patched")]["seq_lens_truth_violations"] == 0 for s in ("tp1", "tp2", "disagg"))
    shown = [f"{n // 1000} {n % 1000:03d}" for n in checks]
    assert (f"counted {shown[0]} (TP=2), {shown[1]} (TP=1) and {shown[2]} (disaggregated) checks"
            ) in doc
    for shape in ("tp1", "tp2", "disagg"):
        digests = {g["sha256"] for g in load(f"2026-11-27-h100x4-faults-full-series-{shape}")["greedy_runs"]}
        assert len(digests) == 1  # "one greedy digest per shape"
    lines = evidence_lines("2026-11-27-h100x4-faults-full-series-server-lines.log")
    logged = logged_truth_counts(lines)
    assert logged[("tp2", "TP0")] == logged[("tp2", "TP1")]
    n = logged[("tp2", "TP0")]
    assert f"the logged counts reach {n // 1000} {n % 1000:03d} on both TP=2 ranks" in doc
    started = [x for x in lines if "sglpatch: patches 0001-0009" in x]
    assert sorted(x.split("/")[0] for x in started) == ["disagg", "tp1", "tp2"]


DEFAULT_UPSTREAM = "2026-11-27-h100-default-backend-upstream"
PROBES_27 = os.path.join(RESULTS, "2026-11-27-h100-probes")
DRAFT_EXTEND = "srt/speculative/eagle_worker_v2.py: _draft_extend_for_decode"


def stack_probe(build, run="default-backend"):
    """trace_steps' reading of one build's stack trace in the probes folder:
    `run` is the file name's prefix (the call it came from)."""
    with open(os.path.join(PROBES_27, f"{run}-stack-{build}.json")) as fh:
        return json.load(fh)


def probe_row(build, probe):
    """The probes README's row of a build: window, GPU idle and the draft
    extend's idle time with its share."""
    de = probe["python"]["idle_us_per_step_by_spec_phase"][DRAFT_EXTEND]
    return (f"| {build} | {probe['window_us_per_step']:.0f} | {probe['gpu_idle_us_per_step']:.0f} "
            f"| {de:.0f} ({draft_extend_share(probe)}%) |")


def draft_extend_share(probe):
    """The draft extend's share of a stack trace's GPU idle time, in percent."""
    phases = probe["python"]["idle_us_per_step_by_spec_phase"]
    return round(100 * phases[DRAFT_EXTEND] / probe["gpu_idle_us_per_step"])


def pairs_of(data, variant, reference="base", speculative=None):
    """`variant`'s paired ratios over `reference`'s, by concurrency (those
    of one `speculative` algorithm only, where a file ran two)."""
    return {e["concurrency"]: e for e in report.results.paired_ratios(data, base=reference)
            if e["variant"] == variant and speculative in (None, e["speculative"])}


def geo_means(pairs):
    """"0.78 / 0.82 / 0.87": the geometric means at concurrency 1 / 8 / 32."""
    return " / ".join(f"{pairs[c]['geo_mean']:.2f}" for c in (1, 8, 32))


def test_default_backend_headline_matches_its_results():
    text, data = readme(), load(DEFAULT_UPSTREAM)
    assert data["card"] == "NVIDIA H100 80GB HBM3"
    assert {r["attention_backend"] for r in data["runs"]} == {"default"}
    assert {r["variant"] for r in data["runs"]} == {"base", "patched", "upstream-0.5.13"}
    assert data["bench"]["side_by_side"] and data["bench"]["turn"] == "alternating"
    assert len({g["call"] for g in data["greedy_runs"]}) == 3
    # one greedy digest across the three builds in every call
    assert len({g["sha256"] for g in data["greedy_runs"]}) == 1 and len(data["greedy_runs"]) == 9
    assert all(g["prompts_off_own_chain"] == 0 for g in data["greedy_runs"])
    # the patched server ran the whole series and kept fa3's host pull
    lines = {s["sglpatch_line"] for s in data["server_starts"] if s.get("sglpatch_line")}
    assert lines and all(x.startswith("patches 0001-0009 applied") and "host pull on" in x
                         for x in lines)
    # every interval against base holds 1.00; against upstream the means are below it
    # and the intervals hold it
    vs_base = list(pairs_of(data, "patched").values())
    vs_up = list(pairs_of(data, "patched", report.UPSTREAM).values())
    assert len(vs_base) == len(vs_up) == 3
    assert all(e["interval_90"][0] <= 1 <= e["interval_90"][1] for e in vs_base + vs_up)
    assert all(e["geo_mean"] < 1 for e in vs_up)
    up = {e["concurrency"]: e for e in report.results.paired_ratios(data)
          if e["variant"] == "upstream-0.5.13"}[1]
    assert ("upstream 0.5.13 itself was slower than base at concurrency 1 "
            f"({up['geo_mean']:.2f} [{up['interval_90'][0]:.2f}, {up['interval_90'][1]:.2f}])") in text
    assert up["interval_90"][0] > 1
    base1 = next(r for r in data["runs"] if r["variant"] == "base" and r["concurrency"] == 1)
    tpots = [x["tpot_ms"] for x in base1["samples"]]
    assert f"(base at concurrency 1: {min(tpots):.2f} to {max(tpots):.2f} ms)" in text


def test_default_backend_idle_and_draft_extend_claims():
    text, data = readme(), load(DEFAULT_UPSTREAM)
    share = {p["variant"]: round(report.idle_share(p))  # as the page gives it, whole
             for p in data["profiles"] if not p["with_stack"] and p["concurrency"] == 1}
    m = re.search(r"put the GPU idle (\d+)% of a forward in base and the series and (\d+)% in "
                  r"upstream", text)
    assert share == {"base": int(m.group(1)), "patched": int(m.group(1)),
                     "upstream-0.5.13": int(m.group(2))}
    m = re.search(r"charging (\d+)% of that idle time, in every build, to the draft extend", text)
    probes_readme = flat("benchmark/results/2026-11-27-h100-probes/README.md")
    for build in ("base", "patched", "upstream-0.5.13"):
        probe = stack_probe(build)
        phases = probe["python"]["idle_us_per_step_by_spec_phase"]
        assert draft_extend_share(probe) == int(m.group(1))
        assert max(phases, key=phases.get) == DRAFT_EXTEND  # the largest phase
        assert probe_row(build, probe) in probes_readme
    # all three servers chose fa3; none captured a draft-extend graph, as a Triton one does
    lines = evidence_lines("2026-11-27-h100-default-backend-upstream-server-lines.log")
    chose = {x.split(":")[0] for x in lines if "Use fa3 backend by default" in x}
    assert len(chose) == 3
    assert not any("draft extend" in x for x in lines)
    assert any("draft cuda graph end" in x for x in lines)
    triton = evidence_lines("2026-11-27-h100x4-tp4-full-series-capture-lines.log")
    assert any("Capture draft extend cuda graph begin" in x for x in triton)


def test_architecture_default_backend_paragraph_matches_its_results():
    doc, data = flat("docs/architecture.md"), load(DEFAULT_UPSTREAM)

    assert (f"patched/base is {geo_means(pairs_of(data, 'patched'))} and patched/upstream "
            f"{geo_means(pairs_of(data, 'patched', report.UPSTREAM))}") in doc
    share = draft_extend_share(stack_probe("patched"))
    assert f"charge {share}% of the GPU's idle time, in each of the three builds" in doc


GRAPH = "2026-11-27-h100-fa3-draft-extend-graph"
GRAPH_TP2 = "2026-11-27-h200x2-tp2-default-backend"


def gpu_idle_share(data, variant):
    """A GPU-only c=1 profile's idle share in percent, to one decimal as the
    page gives it."""
    (p,) = [p for p in data["profiles"] if p["variant"] == variant and not p["with_stack"]]
    return f"{report.idle_share(p):.1f}"


def graph_probe(build):
    return stack_probe(build, run="fa3-draft-extend-graph")


def test_fa3_draft_extend_graph_run_is_what_the_docs_say_it_is():
    data = load(GRAPH)
    assert data["card"] == "NVIDIA H100 80GB HBM3"
    assert {r["attention_backend"] for r in data["runs"]} == {"default"}
    assert {r["variant"] for r in data["runs"]} == {"base", "patched-through-0009", "patched"}
    assert data["bench"]["side_by_side"] and data["bench"]["turn"] == "alternating"
    assert len({g["call"] for g in data["greedy_runs"]}) == 3 and len(data["greedy_runs"]) == 9
    # one digest, the same as the earlier default-backend call's
    assert {g["sha256"] for g in data["greedy_runs"]} == \
        {g["sha256"] for g in load(DEFAULT_UPSTREAM)["greedy_runs"]}
    assert all(g["prompts_off_own_chain"] == 0 for g in data["greedy_runs"])
    assert report.patches_applied(data) == "0001-0010"
    # every server chose fa3; only the whole series captured a draft-extend graph
    lines = evidence_lines(GRAPH + "-server-lines.log")
    assert len({x.split(":")[0] for x in lines if "Use fa3 backend by default" in x}) == 3
    captured = {x.split(":")[0] for x in lines if "Capture draft extend cuda graph end" in x}
    assert captured == {"server-patched-default-ov1-EAGLE3-pcg1.log"}
    assert any("sglpatch: patches 0001-0009 applied" in x for x in lines)


def test_readme_fa3_draft_extend_graph_claims():
    text, data = readme(), load(GRAPH)
    whole, through = pairs_of(data, "patched"), pairs_of(data, "patched-through-0009")
    assert all(e["below_1"] == len(e["ratios"]) for e in whole.values())
    assert f"| [{GRAPH}](benchmark/results/{GRAPH}.md) | NVIDIA H100 80GB HBM3 | small | " \
        f"0001-0010 | 1 | {' | '.join(report.paired_cell(whole[c]) for c in (1, 8, 32))} |" in text
    assert f"alone it was {geo_means(through)} of base's TPOT" in text
    own = pairs_of(data, "patched", reference="patched-through-0009")
    assert f"({geo_means(own)} of the series through 0009)" in text
    assert (f"the GPU sat idle {gpu_idle_share(data, 'base')}% of a forward in base, "
            f"{gpu_idle_share(data, 'patched-through-0009')}% through 0009 and "
            f"{gpu_idle_share(data, 'patched')}% with the whole series") in text
    assert (f"charge {draft_extend_share(graph_probe('base'))}% of base's idle time to the "
            f"draft extend and {draft_extend_share(graph_probe('patched'))}% of the whole "
            "series'") in text
    # the goals of the default-backend work: <= 0.80 at c=1, <= 0.90 at c=8 and 32
    assert whole[1]["interval_90"][1] <= 0.80
    assert whole[8]["interval_90"][1] <= 0.90 and whole[32]["interval_90"][1] <= 0.90


def test_tp2_default_backend_run_is_what_the_docs_say_it_is():
    data, page = load(GRAPH_TP2), flat("docs/patches/0010-fa3-draft-extend-graph.md")
    assert data["card"] == "NVIDIA H200" and {r["tp"] for r in data["runs"]} == {2}
    assert {r["attention_backend"] for r in data["runs"]} == {"default"}
    assert report.patches_applied(data) == "0001-0010"
    assert {g["sha256"] for g in data["greedy_runs"]} == \
        {g["sha256"] for g in load(GRAPH)["greedy_runs"]}
    pairs = pairs_of(data, "patched")
    assert all(e["below_1"] == len(e["ratios"]) for e in pairs.values())
    assert f"The whole series over base, {geo_means(pairs)} at concurrency 1 / 8 / 32" in page
    n = ", ".join(str(len(pairs[c]["ratios"])) for c in (1, 8, 32))
    assert f"({n} repeats;" in page
    lo, hi = pairs[32]["interval_90"]
    assert f"{lo:.2f} to {hi:.2f} at concurrency 32" in page
    lines = evidence_lines(GRAPH_TP2 + "-server-lines.log")
    assert [x.split(":")[0] for x in lines if "Capture draft extend cuda graph end" in x] == \
        ["server-patched-default-ov1-EAGLE3-pcg1.log"]


def test_0010_page_table_and_capture_cost_match_their_results():
    data, page = load(GRAPH), flat("docs/patches/0010-fa3-draft-extend-graph.md")

    def row(pairs):
        return " | ".join(report.paired_cell(pairs[c]) for c in (1, 8, 32))
    assert f"| whole series (0001-0010) | {row(pairs_of(data, 'patched'))} |" in page
    assert f"| through 0009 | {row(pairs_of(data, 'patched-through-0009'))} |" in page
    own = pairs_of(data, "patched", reference="patched-through-0009")
    assert f"| whole series / through 0009 | {row(own)} |" in page
    (end,) = [x for x in evidence_lines(GRAPH + "-server-lines.log")
              if "Capture draft extend cuda graph end" in x]
    m = re.search(r"Time elapsed: ([\d.]+) s\. mem usage=([\d.]+) GB", end)
    assert f"{m.group(1)} s and {m.group(2)} GB on the H100" in page
    assert (f"from {draft_extend_share(graph_probe('base'))}% (base) to "
            f"{draft_extend_share(graph_probe('patched'))}%") in page
    busy = sorted(p["gpu_busy_us_per_step"] / 1000 for p in data["profiles"]
                  if not p["with_stack"])
    assert f"GPU busy time was {busy[0]:.2f}–{busy[-1]:.2f} ms a forward" in page
    assert (f"{gpu_idle_share(data, 'base')}% of a forward in base, "
            f"{gpu_idle_share(data, 'patched-through-0009')}% through 0009 and "
            f"{gpu_idle_share(data, 'patched')}% with the whole series") in page


def test_architecture_fa3_item_names_0010s_numbers():
    doc, data = flat("docs/architecture.md"), load(GRAPH)
    through = pairs_of(data, "patched-through-0009")
    assert (f"the whole series is {geo_means(pairs_of(data, 'patched'))} of base's TPOT and the "
            f"series through 0009 {geo_means(through)}") in doc
    (lo1, hi1), (lo8, hi8) = through[1]["interval_90"], through[8]["interval_90"]
    assert f"{lo1:.2f}" == f"{lo8:.2f}" and f"{hi1:.2f}" == f"{hi8:.2f}" and lo1 > 1
    assert f"intervals {lo1:.2f} to {hi1:.2f} at c=1 and at c=8" in doc
    assert (f"the GPU still idles {gpu_idle_share(data, 'patched')}% of a profiled c=1 forward "
            f"with the whole series ({gpu_idle_share(data, 'base')}% in base)") in doc


def test_probes_readme_rows_for_0010_match_the_probes():
    text = flat("benchmark/results/2026-11-27-h100-probes/README.md")
    for build in ("base", "patched-through-0009", "patched"):
        assert probe_row(build, graph_probe(build)) in text


def ready_times(stem):
    """{build: seconds to ready} of a default-backend results file, each
    build's first server start."""
    starts = {}
    for s in load(stem)["server_starts"]:
        starts.setdefault(s["setting"].split("-default-")[0], s["start_s"])
    return starts


def test_kit_readme_fa3_graph_start_times_match_their_results():
    text = flat("benchmark/kit/README.md")
    one, two = ready_times(GRAPH), ready_times(GRAPH_TP2)
    assert (f"were ready in {one['base']:.0f}, {one['patched-through-0009']:.0f} and "
            f"{one['patched']:.0f} s side by side") in text
    assert f"base and the whole series in {two['base']:.0f} and {two['patched']:.0f} s" in text


BESIDE_UPSTREAM = "2026-11-27-h200-default-backend-whole-series-upstream"
LLAMA = "2026-11-27-h200-llama-8b-shape"


def test_whole_series_beside_upstream_is_what_the_docs_say_it_is():
    data, text = load(BESIDE_UPSTREAM), readme()
    assert data["card"] == "NVIDIA H200" and data["model_preset"] == "small"
    assert {r["attention_backend"] for r in data["runs"]} == {"default"}
    assert {r["variant"] for r in data["runs"]} == {"base", "patched", "upstream-0.5.13"}
    assert data["bench"]["side_by_side"] and data["bench"]["turn"] == "alternating"
    assert report.patches_applied(data) == "0001-0010"
    # two calls, three servers each, one digest: the H100's
    assert len({g["call"] for g in data["greedy_runs"]}) == 2 and len(data["greedy_runs"]) == 6
    assert {g["sha256"] for g in data["greedy_runs"]} == \
        {g["sha256"] for g in load(GRAPH)["greedy_runs"]}
    lines = evidence_lines(BESIDE_UPSTREAM + "-server-lines.log")
    assert len({x.split(":")[0] for x in lines if "Use fa3 backend by default" in x}) == 3
    # faster than upstream in every paired repeat, as README and the 0010 page say
    vs_up, vs_base = pairs_of(data, "patched", report.UPSTREAM), pairs_of(data, "patched")
    assert all(e["below_1"] == len(e["ratios"]) for e in vs_up.values())
    counts = ", ".join(f"{len(vs_up[c]['ratios'])} of {len(vs_up[c]['ratios'])}"
                       for c in (1, 8, 32))
    assert f"faster than upstream in every paired repeat ({counts})" in text
    assert f"{geo_means(vs_up)} of upstream's" in text
    assert f"its ratios over base, {geo_means(vs_base)}, agree with the H100's" in text
    assert vs_base[32]["interval_90"][0] < 1 < vs_base[32]["interval_90"][1]
    base1 = next(r for r in data["runs"] if r["variant"] == "base" and r["concurrency"] == 1)
    tpots = [x["tpot_ms"] for x in base1["samples"]]
    assert f"({min(tpots):.2f} to {max(tpots):.2f} ms at concurrency 1)" in text
    page = flat("docs/patches/0010-fa3-draft-extend-graph.md")
    assert f"the whole series over upstream's TPOT, {geo_means(vs_up)} at concurrency" in page
    assert f"over base's {geo_means(vs_base)}; one greedy digest" in page
    assert f"the whole series is {geo_means(vs_up)} of upstream's TPOT, faster in every " \
        "paired repeat" in flat("docs/architecture.md")


def llama_profile(variant):
    (p,) = [p for p in load(LLAMA)["profiles"] if p["variant"] == variant]
    return p


def test_llama_8b_shape_run_and_its_claims():
    data, text, arch = load(LLAMA), readme(), flat("docs/architecture.md")
    assert data["card"] == "NVIDIA H200" and data["model_preset"] == "llama-8b-shape"
    assert {r["concurrency"] for r in data["runs"]} == {1}
    assert report.patches_applied(data) == "0001-0010"
    # one greedy digest across builds and backends, both calls
    assert len({g["sha256"] for g in data["greedy_runs"]}) == 1 and len(data["greedy_runs"]) == 6
    assert all(g["prompts_off_own_chain"] == 0 for g in data["greedy_runs"])
    pairs = {e["attention_backend"]: e for e in report.results.paired_ratios(data)}
    fa3, triton = pairs["default"], pairs["triton"]
    assert len(fa3["ratios"]) == 6 and fa3["interval_90"][0] < 1 < fa3["interval_90"][1]
    assert f"gave fa3 little ({report.interval_cell(fa3, 2)} in the `{LLAMA}` row)" in text
    assert f"series is {report.interval_cell(fa3, 2)} of base's TPOT with fa3" in arch
    assert f"was {report.interval_cell(triton, 2)} of base's TPOT, below 1.00 in " \
        f"{triton['below_1']} of {len(triton['ratios'])} paired repeats" in text
    assert f"(Triton, in the first of those calls: {triton['geo_mean']:.2f})" in arch
    # the profiles: same GPU busy time, the patched host's one long stream synchronize
    base, patched = llama_profile("base"), llama_profile("patched")
    busy = {round(p["gpu_busy_us_per_step"] / 1000, 2) for p in (base, patched)}
    assert len(busy) == 1
    assert f"the GPU is busy {busy.pop():.2f} ms of each forward in both builds" in arch
    sync = patched["runtime_calls"]["cudaStreamSynchronize"]
    assert sync["calls_per_step"] == 1.0
    assert (f"its host waited {sync['us_per_step'] / 1000:.2f} ms a forward in one "
            "`cudaStreamSynchronize`") in text
    assert f"blocks {sync['us_per_step'] / 1000:.2f} ms a forward in one `cudaStreamSynchronize`" \
        in arch
    assert base["host_sync_calls_per_step"] == 6.0
    assert f"base blocks {base['host_sync_us_per_step'] / 1000:.2f} ms a forward in its six " \
        "host syncs" in arch
    # every fa3 server chose fa3; the patched ones kept the pull, the triton one skipped it
    lines = evidence_lines(LLAMA + "-server-lines.log")
    assert len([x for x in lines if "Use fa3 backend by default" in x]) == 4
    started = [x for x in lines if "sglpatch: patches 0001-0010" in x]
    assert sum("host pull on" in x for x in started) == 2
    assert sum("host pull off" in x for x in started) == 1


def test_llama_8b_shape_triton_stays_slower_than_fa3():
    # in the call whose four servers ran side by side (call 7)
    data = load(LLAMA)
    tpots = {}
    for r in data["runs"]:
        key = "triton" if r["attention_backend"] == "triton" else "fa3"
        if r["variant"] == "patched" or key == "fa3":
            tpots.setdefault(key, []).extend(
                x["tpot_ms"] for x in r["samples"] if x["call"] == "call 7")
    assert len(tpots["triton"]) == 3 and len(tpots["fa3"]) == 6
    assert min(tpots["triton"]) > max(tpots["fa3"])
    (triton,) = {f"{x:.2f}" for x in tpots["triton"]}  # one value to two decimals
    assert (f"patched Triton's repeats took {triton} ms a token (all three) and fa3's "
            f"{min(tpots['fa3']):.2f} to {max(tpots['fa3']):.2f} ms (base and patched)") \
        in readme()


def test_kit_readme_h200_start_times_match_their_results():
    text = flat("benchmark/kit/README.md")
    starts = ready_times(BESIDE_UPSTREAM)
    assert (f"were ready in {starts['base']:.0f}, {starts['patched']:.0f} and "
            f"{starts['upstream-0.5.13']:.0f} s") in text
    together = [s["start_s"] for s in load(LLAMA)["server_starts"] if s["side_by_side"] == 4]
    assert len(together) == 4
    assert f"were ready in {min(together):.0f} to {max(together):.0f} s" in text


TRIAL = "candidate-fa3-skip-host-pull"
TRIAL_LLAMA = "2026-11-27-h200-fa3-skip-host-pull-llama-8b-shape"
TRIAL_SMALL = "2026-11-27-h200-fa3-skip-host-pull-small"
TRIAL_TP2 = "2026-11-27-h200x2-tp2-fa3-skip-host-pull"
TRIAL_RERUN = "2026-11-27-h200x2-fa3-skip-host-pull-rerun"
TRIAL_TP1_ONLY = "candidate-fa3-skip-host-pull-tp1"
TRIAL_TP2_LLAMA = "2026-11-27-h200x2-tp2-llama-8b-shape-fa3-skip-host-pull"
PAGE_0011 = "docs/patches/0011-fa3-skip-host-pull.md"


def at_tp(data, tp):
    """A results file's runs of one tensor-parallel size only."""
    return dict(data, runs=[r for r in data["runs"] if r.get("tp", 1) == tp])


def trial_cell(e):
    """A cell of patch 0011's table of its trial-patch measurements:
    with an interval from 3 repeats, the geo mean alone below that."""
    n = len(e["ratios"])
    return report.paired_cell(e) if n >= 3 else f"{e['geo_mean']:.2f} ({n})"


def trial_call(stem, preset, tp, digest, calls, trial, backend, page):
    """A results file of a trial patch's calls on H200s: base, the whole
    series and the trial patch side by side with `backend` at `tp`, one
    greedy digest (named on the trial's `page`) over the three servers of
    each of its `calls`, none off its own chain."""
    data = load(stem)
    assert data["card"] == "NVIDIA H200" and data["model_preset"] == preset
    assert {r["variant"] for r in data["runs"]} == {"base", "patched", trial}
    assert {r["attention_backend"] for r in data["runs"]} == {backend}
    assert {r.get("tp", 1) for r in data["runs"]} == {tp}
    assert {g["sha256"] for g in data["greedy_runs"]} == {digest} and digest in page
    assert len(data["greedy_runs"]) == 3 * calls
    assert all(g["prompts_off_own_chain"] == 0 for g in data["greedy_runs"])
    return data


def test_trial_patch_calls_are_what_its_page_says():
    """Patch 0011's measurements as the trial patch candidate-fa3-skip-host-pull
    on top of 0001-0010 (docs/patches/0011-fa3-skip-host-pull.md)."""
    text = flat(PAGE_0011)
    for stem, preset, tp, digest, calls in (
            (TRIAL_LLAMA, "llama-8b-shape", 1, "61c37811b172bcb0", 1),
            (TRIAL_SMALL, "small", 1, "874917e713ccfffd", 1),
            (TRIAL_TP2, "small", 2, "874917e713ccfffd", 1),
            (TRIAL_TP2_LLAMA, "llama-8b-shape", 2, "61c37811b172bcb0", 2)):
        trial_call(stem, preset, tp, digest, calls, TRIAL, "default", text)
        lines = evidence_lines(stem + "-server-lines.log")
        assert sum("Use fa3 backend by default" in x for x in lines) == 3 * calls
        assert not any("whole page-table rows" in x for x in lines)
        pull = {x.split(":")[0]: "host pull off" in x for x in lines if "sglpatch: " in x}
        assert pull == {f"server-{v}-default-ov1-EAGLE3-pcg1.log": v == TRIAL
                        for v in ("patched", TRIAL)}
    llama, small, tp2, tp2_llama = (pairs_of(load(s), TRIAL, "patched")
                                    for s in (TRIAL_LLAMA, TRIAL_SMALL, TRIAL_TP2,
                                              TRIAL_TP2_LLAMA))
    rerun = load(TRIAL_RERUN)
    one_gpu, tp2_again = (pairs_of(at_tp(rerun, tp), TRIAL, "patched") for tp in (1, 2))
    rows = [("`llama-8b-shape`, TP=2, H200 ×2",
             [trial_cell(tp2_llama[1]), trial_cell(tp2_llama[8]), "—"]),
            ("`llama-8b-shape`, H200", [trial_cell(llama[1]), "—", "—"]),
            ("`small`, H200", [trial_cell(small[c]) for c in (1, 8, 32)]),
            ("`small`, one GPU of an H200 ×2", [trial_cell(one_gpu[c]) for c in (1, 8, 32)]),
            ("`small`, TP=2, H200 ×2", [trial_cell(tp2[1]), trial_cell(tp2[8]), "—"]),
            ("`small`, TP=2, another H200 ×2",
             [trial_cell(tp2_again[1]), trial_cell(tp2_again[8]), "—"])]
    for name, cells in rows:
        assert f"| {name} | {' | '.join(cells)} |" in text
    # the first machine: faster than the whole series in every TP=1 repeat,
    # slower in every TP=2 one
    assert all(x < 1 for e in (*llama.values(), *small.values(), *tp2_llama.values())
               for x in e["ratios"])
    assert all(x > 1 for e in tp2.values() for x in e["ratios"])
    ratios = [x for e in tp2.values() for x in e["ratios"]]
    assert f"each of the {len(ratios)} paired repeats ({min(ratios):.2f} to {max(ratios):.2f})" \
        in text
    trial_base, whole_base = (pairs_of(load(TRIAL_TP2), v) for v in (TRIAL, "patched"))
    assert (f"({trial_base[1]['geo_mean']:.2f} and {trial_base[8]['geo_mean']:.2f} against "
            f"0001-0010's {whole_base[1]['geo_mean']:.2f} and "
            f"{whole_base[8]['geo_mean']:.2f})") in text
    tp2_cell, again_cell = (report.interval_cell(e[1], 2) for e in (tp2, tp2_again))
    arch = flat("docs/architecture.md")
    assert (f"while with `small` one machine measured it slower ({tp2_cell} at concurrency 1) "
            f"and another faster ({again_cell})") in arch
    assert (f"measured it slower than the series ({tp2_cell}, {len(tp2[1]['ratios'])} "
            f"repeats), another faster ({again_cell}, {len(tp2_again[1]['ratios'])} repeats)"
            ) in flat("benchmark/candidates/README.md")
    assert f"`llama-8b-shape` it is {report.interval_cell(llama[1], 2)} of 0001-0010's TPOT" \
        in arch
    assert (f"At TP=2 it is {report.interval_cell(tp2_llama[1], 2)} of 0001-0010's with "
            f"`llama-8b-shape` ({len(tp2_llama[1]['ratios'])} repeats, each below 1)") in arch
    # over base, as README gives them: with llama-8b-shape at TP=2 and TP=1
    over_base = {s: (pairs_of(load(s), "patched")[1], pairs_of(load(s), TRIAL)[1])
                 for s in (TRIAL_TP2_LLAMA, TRIAL_LLAMA)}
    (w2, t2), (w1, t1) = over_base[TRIAL_TP2_LLAMA], over_base[TRIAL_LLAMA]
    assert (f"took the whole series from {w2['geo_mean']:.2f} to {t2['geo_mean']:.2f} of "
            f"base's TPOT with `llama-8b-shape` at TP=2") in readme()
    assert f"and from {w1['geo_mean']:.2f} to {t1['geo_mean']:.2f} at TP=1" in readme()
    ratios = tp2_llama[1]["ratios"]
    assert (f"below the series without it: {min(ratios):.2f} to {max(ratios):.2f})"
            in readme())
    assert (f"faster than 0001-0010 in each of {len(ratios)} repeats ({min(ratios):.2f} to "
            f"{max(ratios):.2f}, calls 11 and 12)") in text
    assert (f"Over base, the series with this patch gave {report.interval_cell(t2, 2)} "
            f"({len(t2['ratios'])}) with `llama-8b-shape` at TP=2 and "
            f"{report.interval_cell(t1, 2)} ({len(t1['ratios'])}) at TP=1") in text
    # the small model at TP=2, both machines, as README gives them
    rr = {v: pairs_of(at_tp(load(TRIAL_RERUN), 2), v)[1]["geo_mean"] for v in (TRIAL, "patched")}
    assert (f"the `-rerun` call's {rr[TRIAL]:.2f} against {rr['patched']:.2f} without it, the "
            f"`h200x2-tp2` call's {trial_base[1]['geo_mean']:.2f} against "
            f"{whole_base[1]['geo_mean']:.2f}") in readme()
    # the calls: two on one H200 x2, 1 and 3 repeats; the trial patches are gone
    calls = {x["call"] for r in load(TRIAL_TP2_LLAMA)["runs"] for x in r["samples"]}
    assert calls == {"call 11", "call 12"}
    for name in ("fa3-skip-host-pull", "fa3-skip-host-pull-tp1"):
        assert not os.path.exists(os.path.join(REPO, "benchmark", "candidates", name + ".patch"))


def test_trial_patch_rerun_is_what_its_readme_says():
    """The second H200 x2: three calls (7: TP=2 profiles, 8: TP=2 beside
    base, 9: one GPU beside base), greedy output one digest, and the
    numbers its README and the TP=2 profile paragraph give."""
    text, arch = flat(PAGE_0011), flat("docs/architecture.md")
    data = load(TRIAL_RERUN)
    assert data["card"] == "NVIDIA H200" and data["model_preset"] == "small"
    assert {r["attention_backend"] for r in data["runs"]} == {"default"}
    calls = {}
    for r in data["runs"]:
        calls.setdefault((r["variant"], r.get("tp", 1)), set()).update(
            x["call"] for x in r["samples"])
    assert calls[("patched", 2)] == calls[(TRIAL, 2)] == {"call 7", "call 8"}
    assert calls[(TRIAL_TP1_ONLY, 2)] == {"call 7"} and calls[("base", 2)] == {"call 8"}
    assert calls[("base", 1)] == calls[("patched", 1)] == calls[(TRIAL, 1)] == {"call 9"}
    assert {g["sha256"] for g in data["greedy_runs"]} == {"874917e713ccfffd"}
    assert len(data["greedy_runs"]) == 9
    assert all(g["prompts_off_own_chain"] == 0 for g in data["greedy_runs"])
    lines = evidence_lines(TRIAL_RERUN + "-server-lines.log")
    assert sum("Use fa3 backend by default" in x for x in lines) == 9
    assert not any("whole page-table rows" in x for x in lines)
    starts = [x for x in lines if "sglpatch: " in x]
    assert len(starts) == 7  # 9 servers, 2 of them base, which has no such line
    assert not any(x.startswith("server-base-") for x in starts)
    for x in starts:  # only the trial patch's servers skip the pull
        off = "host pull off" in x
        assert off == x.startswith(f"server-{TRIAL}-default"), x
        if x.startswith(f"server-{TRIAL_TP1_ONLY}-"):
            assert "FlashAttentionBackend" in x and "(MHA, one GPU)" in x
    # the same decode path as the whole series at TP=2: one call's scatter
    tp1_only = pairs_of(at_tp(data, 2), TRIAL_TP1_ONLY, "patched")[1]
    ratios = " / ".join(f"{x:.2f}" for x in tp1_only["ratios"])
    assert (f"came out at {report.interval_cell(tp1_only, 2)} of 0001-0010 ({ratios})"
            in text)
    tp2 = pairs_of(at_tp(data, 2), TRIAL, "patched")[1]["ratios"]
    below = [x for x in tp2 if x < 1]
    assert (f"{len(below)} of {len(tp2)} repeats at concurrency 1 below 1.00 "
            f"({min(tp2):.2f} to {max(tp2):.2f})") in text
    # the TP=2 profile: GPU-only traces of both ranks, re-read with the
    # collectives measure; the pacing rank is the one with the most idle
    gpu = [p for p in data["profiles"] if not p["with_stack"]]
    assert {p["rank"] for p in gpu} == {0, 1} and all("gpu_collective_us_per_step" in p
                                                     for p in gpu)
    ranks = {}
    for p in gpu:
        ranks.setdefault(p["variant"], []).append(p)
    pace = {v: max(ps, key=lambda p: p["gpu_idle_us_per_step"]) for v, ps in ranks.items()}
    ahead = {v: min(ps, key=lambda p: p["gpu_idle_us_per_step"]) for v, ps in ranks.items()}
    assert (f"is idle {report.idle_share(pace['patched']):.1f}% of a profiled forward with "
            f"0001-0010 and {report.idle_share(pace[TRIAL]):.1f}% with this patch") in text
    work = [p["gpu_busy_us_per_step"] / 1000 for p in pace.values()]
    window = [p["window_us_per_step"] / 1000 for p in pace.values()]
    waits = [p["gpu_collective_us_per_step"] / 1000 for p in ahead.values()]
    assert (f"doing {min(work):.1f} to {max(work):.1f} ms of work in a forward of "
            f"{min(window):.1f} to {max(window):.1f} ms, while the other rank's GPU spends "
            f"{min(waits):.1f} to {max(waits):.1f} ms a forward inside its all-reduce kernels"
            ) in text
    synced = pace["patched"]["host_sync_us_per_step"]
    assert (f"0001-0010's pacing rank spends {synced:.0f} µs a forward in host syncs (the "
            f"rank ahead of it, {ahead['patched']['host_sync_us_per_step'] / 1000:.2f} ms)"
            ) in text
    assert f"({synced:.0f} µs a forward in host syncs with 0001-0010)" in arch
    # the waiting rank's GPU is mostly collectives: that is why it reads busy
    assert all(p["gpu_collective_us_per_step"] > 0.5 * p["gpu_busy_us_per_step"]
               for p in ahead.values())


TRITON_PROFILE = "2026-11-27-h200x2-triton-small-profile"


def test_triton_profile_claims_match_the_results():
    """docs/architecture.md, "The decode step waits on the host": the
    Triton profile of the whole series beside base."""
    arch, data = flat("docs/architecture.md"), load(TRITON_PROFILE)
    assert data["card"] == "NVIDIA H200" and data["model_preset"] == "small"
    assert {p["attention_backend"] for p in data["profiles"]} == {"triton"}
    assert len(data["greedy_runs"]) == 2 and len({g["sha256"] for g in data["greedy_runs"]}) == 1
    # no timed repeat of the whole series: profiles, not speeds
    assert not [r for r in data["runs"] if r["variant"] == "patched"]
    prof = {(p["variant"], p["with_stack"]): p for p in data["profiles"]}
    whole, base = prof[("patched", False)], prof[("base", False)]
    closing = whole["idle_us_per_step_by_closing_call"]
    after = {k.split(",")[0]: v for k, v in closing.items() if "after the GPU went idle" in k}
    assert max(after, key=after.get) == "cudaLaunchKernel"
    assert (f"the whole series' GPU is busy {whole['gpu_busy_us_per_step'] / 1000:.2f} ms of a "
            f"{whole['window_us_per_step'] / 1000:.2f} ms profiled forward and idle "
            f"{report.idle_share(whole):.1f}% of it (base {report.idle_share(base):.1f}%), with "
            f"{whole['host_sync_calls_per_step']:.0f} host sync a forward against base's "
            f"{base['host_sync_calls_per_step']:.0f}") in arch
    assert (f"Of its {whole['gpu_idle_us_per_step'] / 1000:.2f} ms idle a forward, "
            f"{whole['idle_waiting_on_host_us_per_step'] / 1000:.2f} ms end with work") in arch
    assert (f"({after['cudaLaunchKernel'] / 1000:.2f} ms before a `cudaLaunchKernel`), then "
            f"copies ({after['cudaMemcpyAsync'] / 1000:.2f} ms) and graph launches "
            f"({after['cudaGraphLaunch'] / 1000:.2f} ms)") in arch
    frames = prof[("patched", True)]["python"]["idle_us_per_step_by_frame"]
    top = [k.split(": ")[1] for k, _ in sorted(frames.items(), key=lambda kv: -kv[1])[:5]]
    assert top[:3] == ["send_output", "init_forward_metadata_replay_cuda_graph", "replay"]
    assert "prepare_for_v2_draft" in top


def test_triton_profile_host_work_claims():
    """docs/architecture.md: what the whole series' host did per forward,
    from the same stack trace ("What the host did")."""
    arch, data = flat("docs/architecture.md"), load(TRITON_PROFILE)
    py = next(p for p in data["profiles"]
              if p["variant"] == "patched" and p["with_stack"])["python"]
    total, kinds = py["host_self_us_per_step"], py["host_self_us_per_step_by_kind"]
    share = {k: round(100 * v / total) for k, v in kinds.items()}
    assert (f"per forward the scheduler thread issues {py['operator_calls_per_step']:.0f} "
            f"PyTorch operators, {py['triton_launches_per_step']} Triton launches and "
            f"{py['graph_launches_per_step']} CUDA graph launches") in arch
    assert (f"sglang's own Python ({share['sglang Python']}%), the operators' C++ dispatch "
            f"({share['PyTorch operators (C++)']}%), PyTorch's Python bindings "
            f"({share['PyTorch Python']}%), other CUDA runtime calls "
            f"({share['other CUDA runtime calls']}%), the Triton launcher's Python "
            f"({share['Triton launcher (Python)']}%) and graph launches "
            f"({share['CUDA graph launches']}%)") in arch
    top = max(py["host_self_us_per_step_by_sglang_frame"].values())
    assert f"the most self time has {round(100 * top / total)}% of it" in arch
    # the order the text gives them in is the largest first
    assert sorted(kinds, key=kinds.get, reverse=True)[:6] == [
        "sglang Python", "PyTorch operators (C++)", "PyTorch Python",
        "other CUDA runtime calls", "Triton launcher (Python)", "CUDA graph launches"]


def test_trial_patch_profile_claims():
    text, arch = flat(PAGE_0011), flat("docs/architecture.md")
    data = load(TRIAL_LLAMA)
    prof = {p["variant"]: p for p in data["profiles"]}
    trial, whole, base = prof[TRIAL], prof["patched"], prof["base"]
    medians = {r["variant"]: r["tpot_ms_median"] for r in data["runs"]}
    assert (f"median TPOT is {medians[TRIAL]:.2f} ms against {medians['patched']:.2f} "
            f"(0001-0010) and {medians['base']:.2f} (base)") in text
    assert (f"has {trial['host_sync_calls_per_step']:.0f} host sync a forward, "
            f"{trial['host_sync_us_per_step'] / 1000:.2f} ms, where 0001-0010 has "
            f"{whole['host_sync_calls_per_step']:.0f}, {whole['host_sync_us_per_step'] / 1000:.2f} ms"
            ) in text
    assert f"host syncs fall to {trial['host_sync_us_per_step'] / 1000:.2f} ms a forward" in arch
    assert (f"idle {report.idle_share(trial):.1f}% of a forward ({report.idle_share(whole):.1f}% "
            f"0001-0010, {report.idle_share(base):.1f}% base)") in text
    waiting, idle = trial["idle_waiting_on_host_us_per_step"], trial["gpu_idle_us_per_step"]
    launch = trial["idle_us_per_step_by_closing_call"][
        "cudaGraphLaunch, issued after the GPU went idle"]
    assert launch == max(trial["idle_us_per_step_by_closing_call"].values())
    assert (f"{waiting / 1000:.2f} ms of its {idle / 1000:.2f} ms idle a forward ends with work "
            f"the host issued only after the GPU had gone idle, {launch / 1000:.2f} ms of it a "
            "`cudaGraphLaunch`") in text
    assert f"({waiting / 1000:.2f} of {idle / 1000:.2f} ms a forward, profiled)" in arch


def test_the_trial_patch_calls_whole_series_over_base_is_in_the_readme():
    data = load(TRIAL_SMALL)
    whole = pairs_of(data, "patched")
    assert [len(whole[c]["ratios"]) for c in (1, 8, 32)] == [2, 2, 1]
    tpots = {r["concurrency"]: [x["tpot_ms"] for x in r["samples"]]
             for r in data["runs"] if r["variant"] == "patched"}
    assert (f"The same series gave {geo_means(whole)} of base in the `fa3-skip-host-pull-small` "
            f"call, its own repeats scattering from {min(tpots[1]):.2f} to {max(tpots[1]):.2f} "
            f"ms at concurrency 1 and from {min(tpots[8]):.2f} to {max(tpots[8]):.2f} ms at 8"
            ) in readme()
    # and the third H200 call, on one GPU of an H200 x2
    rerun = pairs_of(at_tp(load(TRIAL_RERUN), 1), "patched")
    counts = " / ".join(str(len(rerun[c]["ratios"])) for c in (1, 8, 32))
    assert counts == "3 / 2 / 2"
    assert (f"and {geo_means(rerun)} in the `-rerun` call, its interval at concurrency 1 "
            f"{report.interval_cell(rerun[1], 2)}") in readme()
    # with 0011 they are the table's rows too: each file's 0001-0010 row
    # and, under it, its 0001-0011 (trial patch) row
    for stem in (TRIAL_RERUN, TRIAL_SMALL, TRIAL_TP2, TRIAL_LLAMA, TRIAL_TP2_LLAMA,
                 BESIDE_UPSTREAM):
        assert stem + ".json" in report.DEFAULT_BACKEND
    trial = pairs_of(at_tp(load(TRIAL_RERUN), 1), TRIAL)
    assert (f"With both, decode TPOT was {geo_means(trial)} of unpatched 0.5.12.post1's at "
            f"concurrency 1 / 8 / 32 with the `small` model on one GPU of an H200 ×2") in readme()
    assert (f"With `small` on one GPU it gave {geo_means(trial)} of base where the series "
            f"without it gave {geo_means(rerun)} in the same call") in readme()


TRITON_LLAMA_PROFILE = "2026-11-27-h200-triton-llama-8b-shape-profile"


def test_triton_llama_profile_claims():
    """README (the Triton bullet) and docs/architecture.md: with
    llama-8b-shape the whole series' Triton step is at the GPU's own time."""
    data, text, arch = load(TRITON_LLAMA_PROFILE), readme(), flat("docs/architecture.md")
    assert data["card"] == "NVIDIA H200" and data["model_preset"] == "llama-8b-shape"
    assert {r["attention_backend"] for r in data["runs"]} == {"triton"}
    assert {g["sha256"] for g in data["greedy_runs"]} == {"61c37811b172bcb0"}
    assert report.patches_applied(data) == "0001-0010"
    pair = pairs_of(data, "patched")[1]
    assert len(pair["ratios"]) == 2 and pair["below_1"] == 2
    assert (f"and {report.interval_cell(pair, 2)} ({pair['below_1']} of "
            f"{len(pair['ratios'])}) in a later call on another H200 that profiled it") in text
    prof = {p["variant"]: p for p in data["profiles"] if not p["with_stack"]}
    whole, base = prof["patched"], prof["base"]
    assert (f"the GPU was idle {report.idle_share(whole):.1f}% of a patched forward against "
            f"{report.idle_share(base):.1f}% in base") in text
    assert report.idle_share(whole) <= 10  # the issue's GPU-idle goal, met at this size
    assert (f"its host waiting {whole['host_sync_us_per_step'] / 1000:.2f} ms a forward in its "
            "one host sync") in text
    assert whole["host_sync_calls_per_step"] == 1.0
    assert (f"the whole series' GPU is idle {report.idle_share(whole):.1f}% of a profiled "
            f"forward (base {report.idle_share(base):.1f}%), busy "
            f"{whole['gpu_busy_us_per_step'] / 1000:.2f} of "
            f"{whole['window_us_per_step'] / 1000:.2f} ms, and its host waits "
            f"{whole['host_sync_us_per_step'] / 1000:.2f} ms a forward") in arch
    lines = evidence_lines(TRITON_LLAMA_PROFILE + "-server-lines.log")
    assert any("per-step seq_lens host pull off" in x for x in lines)


PAGE_0012 = "docs/patches/0012-triton-graph-metadata.md"
TRIAL_0012 = "candidate-triton-graph-metadata"
G_SMALL, G_LLAMA = ("2026-11-27-h200-triton-graph-metadata",
                    "2026-11-27-h200-triton-graph-metadata-llama-8b-shape")
G_TP2, G_TP2_LLAMA = ("2026-11-27-h200x2-tp2-triton-graph-metadata",
                      "2026-11-27-h200x2-tp2-triton-graph-metadata-llama-8b-shape")


def test_patch_0012_calls_are_what_its_page_says():
    """Patch 0012's measurements as the trial patch candidate-triton-graph-metadata
    on top of 0001-0011: the cards, the greedy digests, the start lines, and
    its page's table of its TPOT over the series without it."""
    text = flat(PAGE_0012)
    for stem, preset, tp, digest, calls in (
            (G_SMALL, "small", 1, "874917e713ccfffd", 2),
            (G_LLAMA, "llama-8b-shape", 1, "61c37811b172bcb0", 1),
            (G_TP2, "small", 2, "874917e713ccfffd", 1),
            (G_TP2_LLAMA, "llama-8b-shape", 2, "61c37811b172bcb0", 1)):
        data = trial_call(stem, preset, tp, digest, calls, TRIAL_0012, "triton", text)
        assert report.patches_applied(data) == "0001-0011"
        lines = evidence_lines(stem + "-server-lines.log")
        started = [x for x in lines if "sglpatch: " in x]
        assert len(started) == 2 * calls and all("host pull off" in x for x in started)
        # every server of the call captured its draft-extend graph
        assert sum("Capture draft extend cuda graph end" in x for x in lines) == 3 * calls
    small, llama, tp2, tp2_llama = (pairs_of(load(s), TRIAL_0012, "patched")
                                    for s in (G_SMALL, G_LLAMA, G_TP2, G_TP2_LLAMA))
    rows = [("`small`, H200 (two calls)", [small[1], small[8]]),
            ("`small`, TP=2, H200 ×2", [tp2[1], tp2[8]]),
            ("`llama-8b-shape`, H200", [llama[1]]),
            ("`llama-8b-shape`, TP=2, H200 ×2", [tp2_llama[1]])]
    for name, cells in rows:
        shown = [report.paired_cell(e) for e in cells] + ["—"] * (2 - len(cells))
        assert f"| {name} | {' | '.join(shown)} |" in text
    # small is faster with it in every repeat; llama-8b-shape moves by < 0.5%
    assert small[1]["below_1"] == len(small[1]["ratios"]) == 6
    assert tp2[1]["below_1"] == len(tp2[1]["ratios"]) == 2
    assert (f"({min(small[1]['ratios']):.2f} to {max(small[1]['ratios']):.2f} on one GPU, "
            f"{tp2[1]['ratios'][0]:.2f} and {tp2[1]['ratios'][1]:.2f} at TP=2)") in text
    assert llama[1]["below_1"] == 0 and tp2_llama[1]["below_1"] == 3
    assert abs(llama[1]["geo_mean"] - 1) < 0.005 and abs(tp2_llama[1]["geo_mean"] - 1) < 0.005
    assert f"({report.interval_cell(llama[1])}, slower in 3 of 3)" in text
    assert f"({tp2_llama[1]['geo_mean']:.3f}, faster in 3 of 3)" in text
    assert "within 0.5% of it" in flat("benchmark/candidates/README.md")
    assert not os.path.exists(os.path.join(REPO, "benchmark", "candidates",
                                           "triton-graph-metadata.patch"))


def test_patch_0012_over_base_and_its_profile():
    """The whole series with 0012 over base, and the host work it removed:
    its page, the README's Triton bullet and docs/architecture.md."""
    page, text, arch = flat(PAGE_0012), readme(), flat("docs/architecture.md")
    data = load(G_SMALL)
    whole, trial = pairs_of(data, "patched"), pairs_of(data, TRIAL_0012)
    assert (f"{report.paired_cell(trial[1])} at concurrency 1 and "
            f"{report.paired_cell(trial[8])} at 8 on one GPU (the series without it: "
            f"{whole[1]['geo_mean']:.2f} and {whole[8]['geo_mean']:.2f} in the same repeats)"
            ) in page
    assert (f"took the whole series from {whole[1]['geo_mean']:.2f} to "
            f"{trial[1]['geo_mean']:.2f} of base's TPOT with `small`") in text
    assert (f"and from {whole[8]['geo_mean']:.2f} to {trial[8]['geo_mean']:.2f} "
            "at concurrency 8") in text
    assert (f"({trial[1]['geo_mean']:.2f} of base's TPOT at concurrency 1 with `small` on an "
            f"H200, where the series without it gave {whole[1]['geo_mean']:.2f})") in text
    tp2, tp2_whole = pairs_of(load(G_TP2), TRIAL_0012), pairs_of(load(G_TP2), "patched")
    assert (f"At TP=2 it gave {tp2[1]['geo_mean']:.2f} and {tp2[8]['geo_mean']:.2f} of base "
            f"(2 repeats; the series without it {tp2_whole[1]['geo_mean']:.2f} and "
            f"{tp2_whole[8]['geo_mean']:.2f})") in text
    llama, tp2_llama = (pairs_of(load(s), TRIAL_0012)[1] for s in (G_LLAMA, G_TP2_LLAMA))
    assert (f"with `llama-8b-shape`, {report.paired_cell(llama)} at TP=1 and "
            f"{report.paired_cell(tp2_llama)} at TP=2") in page
    llama_whole = pairs_of(load(G_LLAMA), "patched")[1]
    assert (f"the series through 0011 gave {report.interval_cell(llama_whole, 2)} (3 of 3) "
            f"and with 0012 {report.interval_cell(llama, 2)} (3 of 3)") in text
    # the profiles of call 14: fewer operators and Triton launches, less GPU idle
    prof = {(p["variant"], p["with_stack"]): p for p in data["profiles"]}
    py_whole, py_trial = prof[("patched", True)]["python"], prof[(TRIAL_0012, True)]["python"]
    gpu_whole, gpu_trial = prof[("patched", False)], prof[(TRIAL_0012, False)]
    assert py_trial["operator_calls_per_step"] < py_whole["operator_calls_per_step"]
    assert py_trial["triton_launches_per_step"] < py_whole["triton_launches_per_step"]
    ops = (f"{py_whole['operator_calls_per_step']} operators and "
           f"{py_whole['triton_launches_per_step']} Triton launches a forward to "
           f"{py_trial['operator_calls_per_step']} and {py_trial['triton_launches_per_step']}")
    assert f"took the host from {ops}" in arch
    assert (f"launched {py_whole['operator_calls_per_step']} PyTorch operators and "
            f"{py_whole['triton_launches_per_step']} Triton kernels a forward") in text
    idle = (f"{report.idle_share(gpu_whole):.1f}%", f"{report.idle_share(gpu_trial):.1f}%")
    assert f"the GPU's idle share of a profiled forward from {idle[0]} to {idle[1]}" in arch
    assert (f"the GPU idle {idle[1]} of a {gpu_trial['window_us_per_step'] / 1000:.2f} ms "
            f"forward, against {idle[0]} of {gpu_whole['window_us_per_step'] / 1000:.2f} ms "
            f"without it and {report.idle_share(prof[('base', False)]):.1f}%") in page
    assert (f"{gpu_trial['idle_waiting_on_host_us_per_step'] / 1000:.2f} ms of the "
            f"{gpu_trial['gpu_idle_us_per_step'] / 1000:.2f} ms idle a forward ends") in page
    assert report.idle_share(gpu_trial) > 10  # the GPU-idle goal is still missed with small


SHIPPED_TRITON = ("2026-11-27-h200-triton-whole-series-nospec",
                  "2026-11-27-h200-triton-shipped-series-nospec",
                  "2026-11-27-h100x2-tp2-triton-shipped-series-nospec")


def shipped_ratios(stem, speculative):
    """{concurrency: the per-repeat ratios as the README gives them} of the
    shipped series (`patched`) over base in one of SHIPPED_TRITON."""
    return {c: [f"{r:.2f}" for r in e["ratios"]]
            for c, e in pairs_of(load(stem), "patched", speculative=speculative).items()}


def test_shipped_series_with_and_without_speculation():
    """README's Triton bullet and its no-speculation bullet: 0001-0012 as
    `patched` beside base in three calls, EAGLE3 and no speculation, every
    server of a call one greedy digest."""
    text = readme()
    for stem, card, tp in zip(SHIPPED_TRITON, ("NVIDIA H200", "NVIDIA H200", "NVIDIA H100 80GB HBM3"),
                              (1, 1, 2)):
        data = load(stem)
        assert data["card"] == card and report.patches_applied(data) == "0001-0012"
        assert {r["tp"] for r in data["runs"]} == {tp}
        assert {r["attention_backend"] for r in data["runs"]} == {"triton"}
        assert {(g["variant"], g["speculative"]) for g in data["greedy_runs"]} == {
            (v, s) for v in ("base", "patched") for s in ("EAGLE3", "none")}
        assert {g["sha256"] for g in data["greedy_runs"]} == {"874917e713ccfffd"}
        assert stem + ".json" in report.TRITON and stem + ".json" in report.NO_SPECULATION
    one, two, tp2 = (shipped_ratios(stem, "EAGLE3") for stem in SHIPPED_TRITON)
    assert (f"two H200s, {one[1][0]} of base's TPOT at concurrency 1 and {one[32][0]} at 32 "
            f"(`{SHIPPED_TRITON[0]}`, one paired repeat a point) and {two[1][0]} and "
            f"{two[1][1]} at concurrency 1, {two[32][0]} and {two[32][1]} at 32 "
            f"(`{SHIPPED_TRITON[1]}`, two); at TP=2 on an H100 ×2, {tp2[1][0]} and "
            f"{tp2[32][0]} (one repeat each") in text
    assert [len(one[c]) for c in (1, 32)] == [1, 1] and [len(two[c]) for c in (1, 32)] == [2, 2]
    assert [len(tp2[c]) for c in (1, 32)] == [1, 1]
    # no speculation: TP=2 below base in every pair; TP=1 on both sides of 1.00
    tp2 = shipped_ratios(SHIPPED_TRITON[2], "none")
    n1, n32 = len(tp2[1]), len(tp2[32])
    assert all(float(r) < 1 for c in (1, 32) for r in tp2[c])
    assert f"{n1} of {n1} at concurrency 1, {n32} of {n32} at 32" in text
    one, two = (shipped_ratios(stem, "none") for stem in SHIPPED_TRITON[:2])
    both = {c: one[c] + two[c] for c in (1, 32)}
    assert (f"({', '.join(both[1][:2])} and {both[1][2]} at concurrency 1; "
            f"{', '.join(both[32][:2])} and {both[32][2]} at 32)") in text
    assert all(min(map(float, both[c])) < 1 < max(map(float, both[c])) for c in (1, 32))
    base = [s["tpot_ms"] for r in load(SHIPPED_TRITON[1])["runs"]
            if (r["variant"], r["speculative"], r["concurrency"]) == ("base", "none", 1)
            for s in r["samples"]]
    assert f"moved from {min(base):.2f} to {max(base):.2f} ms at concurrency 1" in text


SHIPPED_FA3 = "2026-11-27-h200-default-backend-shipped-series-upstream"


def shipped_beside_upstream(stem, row, digest):
    """`stem`'s data, checked to be 0001-0012, base and upstream 0.5.13 side
    by side on an H200 with the default backend, one greedy `digest`, and
    the default-backend table's row number `row`."""
    data = load(stem)
    assert data["card"] == "NVIDIA H200" and report.patches_applied(data) == "0001-0012"
    assert {r["attention_backend"] for r in data["runs"]} == {"default"}
    assert {g["sha256"] for g in data["greedy_runs"]} == {digest}
    assert {g["variant"] for g in data["greedy_runs"]} == {"base", "patched", report.UPSTREAM}
    assert report.DEFAULT_BACKEND[row] == stem + ".json"
    return data


def test_shipped_series_beside_upstream_with_the_default_backend():
    """README's default-backend bullet: 0001-0012, base and upstream 0.5.13
    side by side with no attention-backend flag, the ratios, the repeats
    below 1.00 and the two slow concurrency-8 runs it names."""
    data, text = shipped_beside_upstream(SHIPPED_FA3, 0, "874917e713ccfffd"), readme()
    over_base, over_up = pairs_of(data, "patched"), pairs_of(data, "patched", report.UPSTREAM)
    below = ", ".join(f"{over_up[c]['below_1']} of {len(over_up[c]['ratios'])}" for c in (1, 8))
    assert (f"gave {geo_means(over_base)} of base's TPOT at concurrency 1 / 8 / 32 and "
            f"{geo_means(over_up)} of upstream's, faster than upstream in {below} and "
            f"{over_up[32]['below_1']} of {len(over_up[32]['ratios'])} paired repeats") in text
    fast = [r for r in over_base[8]["ratios"] if r < 1]
    assert len(fast) == 3
    assert (f"three of the five pairs gave {fast[0]:.2f}, {fast[1]:.2f} and {fast[2]:.2f} "
            "of base") in text
    runs = {r["variant"]: r["samples"] for r in data["runs"] if r["concurrency"] == 8}
    slow = sorted((s for s in runs["patched"] if s["duration_s"] > 25), key=lambda s: s["duration_s"])
    rest = [s["duration_s"] for s in runs["patched"] if s["duration_s"] <= 25]
    assert (f"took {slow[0]['duration_s']:.0f} and {slow[1]['duration_s']:.0f} s where its other "
            f"three took {min(rest):.0f} to {max(rest):.0f} s ({slow[0]['tpot_ms']:.2f} and "
            f"{slow[1]['tpot_ms']:.2f} ms a token)") in text
    # the slow runs are the pairs above 1.00 (every patched run has base's
    # pair, its ratio in the same order), with as many prompts as their call's others
    assert len(over_base[8]["ratios"]) == len(runs["patched"])
    above = [s for s, r in zip(runs["patched"], over_base[8]["ratios"]) if r > 1]
    assert sorted(above, key=lambda s: s["duration_s"]) == slow
    for s in slow:
        assert {p["num_prompts"] for p in runs["patched"] if p["call"] == s["call"]} == {s["num_prompts"]}
    worst = max(runs[report.UPSTREAM], key=lambda s: s["duration_s"])
    assert f"one of upstream's took {worst['duration_s']:.0f} s ({worst['tpot_ms']:.2f} ms)" in text


def test_patch_0012_page_names_the_shipped_series_calls():
    """The 0012 page's section on the series as shipped: each file it names
    is 0001-0012 beside base, from the calls and cards it says, every server
    one greedy digest and every patched server's start line naming 0001-0012."""
    text = flat(PAGE_0012)
    files = {SHIPPED_TRITON[0]: (["call 19"], "an H200, one repeat a point"),
             SHIPPED_TRITON[1]: (["call 20"], "another H200, two repeats"),
             SHIPPED_TRITON[2]: (["call 25", "call 26"], "calls 25 and 26 on one H100 ×2"),
             SHIPPED_FA3: (["call 23", "call 24"], "calls 23 and 24 on the H200 of call 20"),
             SHIPPED_FA3_LLAMA: (["call 30", "call 31"], "calls 30 and 31 on one H200"),
             SHIPPED_FLASHINFER: (["call 33"], "call 33, on the machine of calls 27 to 31")}
    digest = {"small": "874917e713ccfffd", "llama-8b-shape": "61c37811b172bcb0"}
    for stem, (calls, said) in files.items():
        data = load(stem)
        assert f"`{stem}` (" in text and said in text
        assert report.patches_applied(data) == "0001-0012"
        assert sorted({s["call"] for r in data["runs"] for s in r["samples"]}) == calls
        assert {g["sha256"] for g in data["greedy_runs"]} == {digest[data["model"]["preset"]]}
        if stem != SHIPPED_TRITON[0]:  # call 19 was stopped before its logs were packed
            started = [x for x in evidence_lines(stem + "-server-lines.log") if "sglpatch: " in x]
            assert started and all("patches 0001-0012 applied" in x for x in started)
    pairs = [{len(e["ratios"]) for e in report.results.paired_ratios(load(stem))}
             for stem in SHIPPED_TRITON[:2]]
    assert pairs == [{1}, {2}]
    assert "H200" in load(SHIPPED_FA3)["card"] and "H100" in load(SHIPPED_TRITON[2])["card"]
    starts = [s["start_s"] for s in load(SHIPPED_TRITON[2])["server_starts"] if s["call"] == "call 25"]
    assert len(starts) == 4
    said = f"{min(starts):.0f} to {max(starts):.0f} s to start"
    assert said in text and said in readme()
    starts = sorted(s["start_s"] for s in load(SHIPPED_FLASHINFER)["server_starts"])
    said = f"the two servers took {starts[0]:.0f} and {starts[1]:.0f} s to start"
    assert said in text
    assert f"its two servers took {starts[0]:.0f} and {starts[1]:.0f} s to start" in readme()


SHIPPED_FA3_LLAMA = SHIPPED_FA3 + "-llama-8b-shape"
SHIPPED_FLASHINFER = "2026-11-27-h200-flashinfer-shipped-series"


def test_shipped_series_beside_upstream_with_llama_8b_shape():
    """README: 0001-0012, base and upstream 0.5.13 with the default backend and
    `llama-8b-shape`, the ratios, the patched server's steady TPOT beside the
    trial server's of the earlier call, and base's one slow run at 32."""
    data, text = shipped_beside_upstream(SHIPPED_FA3_LLAMA, 1, "61c37811b172bcb0"), readme()
    assert data["model"]["preset"] == "llama-8b-shape"
    over_base = pairs_of(data, "patched")
    over_up = pairs_of(data, "patched", report.UPSTREAM)
    up_base = pairs_of(data, report.UPSTREAM)
    below = ", ".join(f"{over_up[c]['below_1']} of {len(over_up[c]['ratios'])}" for c in (1, 8))
    assert (f"the series gave {geo_means(over_base)} of base's TPOT and {geo_means(over_up)} of "
            f"upstream's, faster than upstream in {below} and {over_up[32]['below_1']} of "
            f"{len(over_up[32]['ratios'])} paired repeats, and faster than base in every "
            f"paired repeat too; upstream itself gave {geo_means(up_base)} of base") in text
    assert all(e["below_1"] == len(e["ratios"]) for e in (*over_base.values(), *over_up.values()))
    assert f"faster than upstream in every paired repeat with `llama-8b-shape` ({geo_means(over_up)} of its TPOT" in text
    runs = {(r["variant"], r["concurrency"]): r["samples"] for r in data["runs"]}
    steady = [s["tpot_ms"] for s in runs[("patched", 1)]]
    assert len(steady) == 5
    assert (f"The patched server held {min(steady):.3f} to {max(steady):.3f} ms a token over its "
            "five repeats at concurrency 1") in text
    trial = {r["variant"]: r["tpot_ms_median"] for r in load("2026-11-27-h200-fa3-skip-host-pull-llama-8b-shape")["runs"]}
    base1 = [s["tpot_ms"] for s in runs[("base", 1)]]
    assert (f"the trial server's {trial['candidate-fa3-skip-host-pull']:.3f} ms in the "
            f"`fa3-skip-host-pull-llama-8b-shape` call, where base ran at {trial['base']:.2f} ms "
            f"against {min(base1):.2f} to {max(base1):.2f} ms here") in text
    slow = max(runs[("base", 32)], key=lambda s: s["duration_s"])
    rest = sorted(r for r in over_base[32]["ratios"] if r != min(over_base[32]["ratios"]))
    assert min(over_base[32]["ratios"]) < 0.7 and len(rest) == 2
    assert (f"one of base's three runs took {slow['duration_s']:.0f} s ({slow['tpot_ms']:.2f} ms a "
            f"token), the {min(over_base[32]['ratios']):.2f} pair; the other two gave "
            f"{rest[0]:.2f} and {rest[1]:.2f}") in text


def test_shipped_series_with_flashinfer():
    """README and benchmark/README.md: 0001-0012 beside base with flashinfer on
    an H200, the per-repeat ratios, the host pull kept, the slow c=8 run."""
    data, text = load(SHIPPED_FLASHINFER), readme()
    assert data["card"] == "NVIDIA H200" and report.patches_applied(data) == "0001-0012"
    assert {r["attention_backend"] for r in data["runs"]} == {"flashinfer"}
    assert {g["sha256"] for g in data["greedy_runs"]} == {"874917e713ccfffd"}
    started = [x for x in evidence_lines(SHIPPED_FLASHINFER + "-server-lines.log") if "sglpatch: " in x]
    assert started and all("host pull on: FlashInferAttnBackend" in x for x in started)
    pairs = pairs_of(data, "patched")
    said = {c: " and ".join(f"{r:.2f}" for r in pairs[c]["ratios"]) for c in (1, 8, 32)}
    assert all(len(pairs[c]["ratios"]) == 2 for c in (1, 8, 32))
    assert (f"0001-0012 gave {said[1]} of base's TPOT at concurrency 1 and {said[32]} at 32; "
            f"at concurrency 8, {said[8]}") in text
    patched8 = [s["tpot_ms"] for s in next(r for r in data["runs"] if r["variant"] == "patched"
                                            and r["concurrency"] == 8)["samples"]]
    assert f"the second a patched run of {patched8[1]:.2f} ms a token against its first's {patched8[0]:.2f}" in text
    assert all(pairs[c]["below_1"] == 2 for c in (1, 32)) and pairs[8]["below_1"] == 1
    means = {c: pairs[c]["geo_mean"] for c in (1, 32)}
    assert (f"it gave {means[1]:.2f} of base's TPOT at concurrency 1 and {means[32]:.2f} at 32 on "
            "an H200 (two repeats each), and at concurrency 8 one repeat each side of 1.00") in text
    assert (f"faster than base in both repeats at c=1 and c=32 on an H200 ({geo_means(pairs)}, "
            f"`{SHIPPED_FLASHINFER}.json`)") in flat("docs/architecture.md")
    bench = flat("benchmark/README.md")
    assert (f"(two repeats a point, paired by repeat: {pairs[1]['geo_mean']:.2f} at c=1, "
            f"{pairs[8]['geo_mean']:.2f} at c=8, {pairs[32]['geo_mean']:.2f} at c=32; greedy "
            "base = patched;") in bench


def test_patch_0012_page_names_the_host_frame_that_now_leads():
    """The 0012 page's next target: the sglang frame with the most host self
    time in the trial server's stack profile."""
    data = load(G_SMALL)
    py = next(p for p in data["profiles"]
              if p["variant"] == TRIAL_0012 and p["with_stack"])["python"]
    top = max(py["host_self_us_per_step_by_sglang_frame"].items(), key=lambda kv: kv[1])[0]
    assert top == "srt/model_executor/forward_batch_info.py: init_new"
    assert "the sglang frame with the most is now `ForwardBatch.init_new`" in flat(PAGE_0012)
