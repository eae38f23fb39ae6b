"""The results pages and the index in benchmark/results/ are what
`e2e.py report` renders from the committed JSON, byte for byte."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "benchmark")
RESULTS = os.path.join(BENCH, "results")
sys.path.insert(0, BENCH)

import report  # noqa: E402
import results  # noqa: E402

JSONS = sorted(n for n in os.listdir(RESULTS) if n.endswith(".json"))
HINT = "re-render: python benchmark/e2e.py report benchmark/results/*.json --index benchmark/results"


def read(path):
    with open(path) as fh:
        return fh.read()


@pytest.mark.parametrize("name", JSONS)
def test_committed_page_is_the_rendered_json(name):
    path = os.path.join(RESULTS, name)
    with open(path) as fh:
        data = json.load(fh)
    md = os.path.join(RESULTS, name[:-5] + ".md")
    assert os.path.exists(md), HINT
    assert report.render(data, path) == read(md), HINT


def test_every_page_has_its_json():
    pages = {n[:-3] for n in os.listdir(RESULTS) if n.endswith(".md") and n != "README.md"}
    assert pages == {n[:-5] for n in JSONS}


def test_committed_index_is_up_to_date():
    assert report.index(RESULTS) == read(os.path.join(RESULTS, "README.md")), HINT


def test_unknown_keys_are_rendered_not_dropped():
    data = {"card": "NVIDIA H200", "date": "2026-01-01", "model_preset": "tiny",
            "runs": [], "greedy_equivalence": [],
            "notes": ["first note"], "probe_counts": [{"backend": "triton", "pulls": 0,
                                                       "sites": [{"where": "x.py:1", "n": 7}]}]}
    md = report.render(data, "r.json")
    assert "- first note" in md
    assert "## `probe_counts`" in md and "| triton | 0 |" in md
    assert "| x.py:1 | 7 |" in md  # a nested list of records becomes its own table


def test_report_command_writes_the_page(tmp_path):
    src = os.path.join(RESULTS, JSONS[0])
    out = tmp_path / "page.md"
    res = subprocess.run([sys.executable, os.path.join(BENCH, "e2e.py"), "report", src,
                          "--md", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert out.read_text() == read(src[:-5] + ".md")


def _point(variant, tpots, reps):
    samples = [{"tpot_ms": t, "itl_ms": t, "output_tok_per_s": 1.0, "accept_length": 2.9,
                "rep": r} for t, r in zip(tpots, reps)]
    run = {"variant": variant, "attention_backend": "triton", "speculative": "EAGLE3",
           "overlap": True, "piecewise_cuda_graph": True, "concurrency": 8, "tp": 2,
           "samples": samples}
    run.update(results.summarize_point(samples))
    return run


def test_side_by_side_page_pairs_first_token_times_too():
    base, patched = _point("base", [2.0, 2.0], [0, 1]), _point("patched", [1.0, 1.0], [0, 1])
    for run, ttfts in ((base, [40.0, 50.0]), (patched, [60.0, 50.0])):
        for sample, ttft in zip(run["samples"], ttfts):
            sample["ttft_ms"] = ttft
    data = {"card": "GPU", "date": "2026-11-28", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [], "runs": [base, patched]}
    section = report.render(data, "x.json").split("### First-token time over base's", 1)[1]
    # 1.5 and 1.0: geo mean sqrt(1.5) = 1.225, one of two not below 1.00
    row = next(line for line in section.splitlines() if line.startswith("| patched"))
    assert row.startswith("| patched EAGLE3 triton pcg tp2 | 8 | 1.50 / 1.00 | 1.25 | 0 of 2 | 1.225 ")
    # files from before bench_serving's TTFT was kept: no such table
    for run in (base, patched):
        for sample in run["samples"]:
            del sample["ttft_ms"]
    assert "### First-token time" not in report.render(data, "x.json")


def test_side_by_side_page_pairs_each_repeat_with_base():
    data = {"card": "GPU", "date": "2026-11-26", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [],
            "runs": [_point("base", [2.0, 4.0], [0, 1]), _point("patched", [3.0, 2.4], [1, 0])]}
    page = report.render(data, "x.json")
    section = page.split("## Paired repeats", 1)[1]
    # geo mean sqrt(0.75 * 1.2) = 0.949; sd(log) = 0.47 / sqrt(2) = 0.3323, half
    # width 6.314 * 0.3323 / sqrt(2) = 1.484 around log 0.949; +-3% would need
    # 1.697 / sqrt(n) <= ln(1.03) / 0.3323, n >= 365
    assert ("| patched EAGLE3 triton pcg tp2 | 8 | 0.75 / 1.20 | 0.975 | 1 of 2 "
            "| 0.949 [0.215, 4.183] | 365 | repeat |") in section
    # base first in every repeat: no turn column
    assert "base first / base last" not in section
    # the turn alternated: base first in repeat 0 (patched 1.20), last in 1 (0.75)
    data["bench"]["turn"] = "alternating"
    section = report.render(data, "x.json").split("## Paired repeats", 1)[1]
    assert "| geo mean, base first / base last (repeats) |" in section
    assert "| 365 | repeat | 1.20 (1) / 0.75 (1) |" in section
    # --rotate-cpus: each repeat names the build's set, and a column splits by it
    assert "CPU set" not in section
    for run, sets in zip(data["runs"], (["0-2", "3-5"], ["3-5", "0-2"])):
        run["samples"] = [dict(x, cpus=s) for x, s in zip(run["samples"], sets)]
    section = report.render(data, "x.json").split("## Paired repeats", 1)[1]
    assert "| geo mean by the build's CPU set (repeats) |" in section
    # patched ran repeat 0 (1.20) on 0-2 and repeat 1 (0.75) on 3-5
    assert "| 1.20 (1) / 0.75 (1) | 0-2: 1.20 (1) / 3-5: 0.75 (1) |" in section
    # measured one server at a time, repeats share no moment: no such section
    data["bench"]["side_by_side"] = False
    assert "## Paired repeats" not in report.render(data, "x.json")


def test_the_latency_table_adds_ttft_and_the_itl_tail_where_the_bench_recorded_them():
    old = _point("base", [2.0, 4.0], [0, 1])
    new = _point("patched", [2.0, 3.0], [0, 1])
    for sample, ttft, tail in zip(new["samples"], (60.0, 80.0), (30.0, 50.0)):
        sample.update(ttft_ms=ttft, p99_itl_ms=tail)
    new.update(results.summarize_point(new["samples"]))
    data = {"card": "GPU", "date": "2026-11-28", "model_preset": "small", "bench": {},
            "greedy_equivalence": [], "runs": [old, new]}
    section = "\n".join(report.runs_section(data)).split("\n")
    header = [c.strip() for c in section[4].strip("|").split("|")]
    assert header[5:8] == ["ITL ms", "TTFT ms", "P99 ITL ms"]
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.strip("|").split("|")]
            for r in section[6:]}
    assert rows["patched EAGLE3 triton pcg tp2"][6:8] == ["70.0", "40.0"]
    assert rows["base EAGLE3 triton pcg tp2"][6:8] == ["—", "—"]
    # a file no sample of which has them: the table as before
    data["runs"] = [old]
    header = "\n".join(report.runs_section(data)).split("\n")[4]
    assert "TTFT" not in header and "P99 ITL" not in header


def test_page_pairs_a_trial_patch_with_the_whole_series():
    data = {"card": "GPU", "date": "2026-11-27", "model_preset": "small",
            "bench": {"side_by_side": True, "turn": "alternating"}, "greedy_equivalence": [],
            "runs": [_point("candidate-fa3-skip-host-pull", [1.6, 2.2], [0, 1]),
                     _point("base", [2.0, 2.0], [0, 1]), _point("patched", [2.0, 2.0], [0, 1])]}
    page = report.render(data, "x.json")
    # a trial patch's rows come after the patched build's, before upstream
    latency = page.split("## Decode latency", 1)[1].split("\n## ", 1)[0]
    rows = [x for x in latency.splitlines() if x.startswith("| ")]
    assert [x.split()[1] for x in rows[1:]] == ["base", "patched", "candidate-fa3-skip-host-pull"]
    section = page.split("### Trial patches over the patched build", 1)[1]
    # candidate / patched per repeat: 0.80 and 1.10; patched is not a row of it
    assert "| TPOT / patched's, per repeat |" in section
    assert "| candidate-fa3-skip-host-pull EAGLE3 triton pcg tp2 | 8 | 0.80 / 1.10 | 0.95 | 1 of 2 " \
        in section
    assert "| patched EAGLE3" not in section
    # it is paired with base as every build is
    assert "| candidate-fa3-skip-host-pull EAGLE3 triton pcg tp2 | 8 | 0.80 / 1.10 |" in \
        page.split("## Paired repeats", 1)[1].split("### Trial", 1)[0]
    # without a trial patch there is no such table
    data["runs"] = data["runs"][1:]
    assert "### Trial patches" not in report.render(data, "x.json")


def test_page_pairs_trial_patches_first_tokens_with_the_patched_build():
    runs = [_point("base", [2.0, 2.0], [0, 1]), _point("patched", [1.8, 2.2], [0, 1]),
            _point("candidate-x", [1.6, 2.4], [0, 1])]
    for run, ttfts in zip(runs, ([20.0, 20.0], [20.0, 25.0], [18.0, 30.0])):
        for sample, ttft in zip(run["samples"], ttfts):
            sample["ttft_ms"] = ttft
    data = {"card": "GPU", "date": "2026-11-30", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [], "runs": runs}
    page = report.render(data, "x.json")
    section = page.split("### First-token time of trial patches over the patched build",
                         1)[1].split("\n### ", 1)[0]
    # candidate / patched per repeat: 0.90 and 1.20; patched is not a row of it
    assert "| TTFT / patched's, per repeat |" in section
    assert "| candidate-x EAGLE3 triton pcg tp2 | 8 | 0.90 / 1.20 |" in section
    assert "| patched EAGLE3" not in section and "| base " not in section
    # it follows the TPOT table of the same pairing
    assert page.index("### Trial patches over the patched build") \
        < page.index("### First-token time of trial patches over the patched build")
    # without a trial patch there is no such table
    data["runs"] = runs[:2]
    assert "### First-token time of trial" not in report.render(data, "x.json")


def test_page_pairs_every_build_with_base_again_when_the_control_ran():
    data = {"card": "GPU", "date": "2026-11-29", "model_preset": "small",
            "bench": {"side_by_side": True, "turn": "alternating"}, "greedy_equivalence": [],
            "runs": [_point("base", [2.0, 2.0], [0, 1]), _point("patched", [1.8, 1.9], [0, 1]),
                     _point("base-again", [1.8, 2.0], [0, 1]),
                     _point("candidate-x", [1.62, 1.9], [0, 1])]}
    page = report.render(data, "x.json")
    section = page.split("### Builds over base-again", 1)[1]
    assert "| TPOT / base-again's, per repeat |" in section
    # patched / base-again per repeat: 1.00 and 0.95; the trial's 0.90 and 0.95
    assert "| patched EAGLE3 triton pcg tp2 | 8 | 1.00 / 0.95 |" in section
    assert "| candidate-x EAGLE3 triton pcg tp2 | 8 | 0.90 / 0.95 |" in section
    # base is the control's other side: its ratio is base-again's row over base
    assert "| base EAGLE3" not in section and "| base-again EAGLE3" not in section
    # over base the same builds read 0.90 / 0.95 (patched): both tables are there
    assert "| patched EAGLE3 triton pcg tp2 | 8 | 0.90 / 0.95 |" in \
        page.split("## Paired repeats", 1)[1].split("### ", 1)[0]
    # without the control there is no such table
    data["runs"] = [r for r in data["runs"] if r["variant"] != "base-again"]
    assert "### Builds over base-again" not in report.render(data, "x.json")


def test_page_pairs_patched_with_upstream_when_upstream_ran_beside_it():
    data = {"card": "GPU", "date": "2026-11-27", "model_preset": "small",
            "bench": {"side_by_side": True, "turn": "alternating"}, "greedy_equivalence": [],
            "runs": [_point("base", [2.0, 2.0], [0, 1]), _point("patched", [1.8, 2.2], [0, 1]),
                     _point("upstream-0.5.13", [2.0, 2.0], [0, 1])]}
    section = report.render(data, "x.json").split("### Patched over upstream 0.5.13", 1)[1]
    # patched / upstream per repeat: 0.90 and 1.10; base is not a row of this table
    assert ("| patched EAGLE3 triton pcg tp2 | 8 | 0.90 / 1.10 | 1.0 | 1 of 2 ") in section
    assert "| base " not in section and "base first / base last" not in section
    # without an upstream server there is no such table
    data["runs"] = data["runs"][:2]
    assert "### Patched over upstream" not in report.render(data, "x.json")


def test_page_pairs_trial_patches_and_first_tokens_with_upstream():
    runs = [_point("base", [2.0, 2.0], [0, 1]), _point("patched", [1.8, 2.2], [0, 1]),
            _point("candidate-x", [1.6, 2.4], [0, 1]), _point("upstream-0.5.17", [2.0, 2.0], [0, 1])]
    for run, ttfts in zip(runs, ([20.0, 20.0], [22.0, 24.0], [20.0, 21.0], [20.0, 20.0])):
        for sample, ttft in zip(run["samples"], ttfts):
            sample["ttft_ms"] = ttft
    data = {"card": "GPU", "date": "2026-11-30", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [], "runs": runs}
    page = report.render(data, "x.json")
    tpot = page.split("### Patched over upstream 0.5.17", 1)[1].split("\n### ", 1)[0]
    # the trial patch's server is a row beside the patched build's: 0.80 and 1.20
    assert "| patched EAGLE3 triton pcg tp2 | 8 | 0.90 / 1.10 |" in tpot
    assert "| candidate-x EAGLE3 triton pcg tp2 | 8 | 0.80 / 1.20 |" in tpot
    assert "| base " not in tpot
    ttft = page.split("### First-token time over upstream 0.5.17's", 1)[1].split("\n### ", 1)[0]
    assert "| TTFT / upstream 0.5.17's, per repeat |" in ttft
    assert "| patched EAGLE3 triton pcg tp2 | 8 | 1.10 / 1.20 |" in ttft
    assert "| candidate-x EAGLE3 triton pcg tp2 | 8 | 1.00 / 1.05 |" in ttft
    assert "| base " not in ttft
    # it comes after the first-token times over base's
    assert page.index("### First-token time over base's") \
        < page.index("### First-token time over upstream 0.5.17's")
    # without first-token times there is no such table
    for run in runs:
        for sample in run["samples"]:
            del sample["ttft_ms"]
    assert "### First-token time over upstream" not in report.render(data, "x.json")


def test_page_pairs_patched_with_each_upstream_release_that_ran():
    data = {"card": "GPU", "date": "2026-11-28", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [],
            "runs": [_point("base", [2.0, 2.0], [0, 1]), _point("patched", [1.8, 2.2], [0, 1]),
                     _point("upstream-0.5.17", [2.0, 2.2], [0, 1]),
                     _point("upstream-0.5.13", [2.0, 2.0], [0, 1])]}
    page = report.render(data, "x.json")
    # oldest release first, each its own table; rows by version after the builds
    assert page.index("### Patched over upstream 0.5.13") \
        < page.index("### Patched over upstream 0.5.17")
    section = page.split("### Patched over upstream 0.5.17", 1)[1]
    assert "TPOT / upstream 0.5.17's, per repeat" in section
    assert "| patched EAGLE3 triton pcg tp2 | 8 | 0.90 / 1.00 |" in section
    latency = page.split("## Decode latency", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in latency.splitlines() if line.startswith("| ") and " EAGLE3 " in line]
    assert [r.split()[1] for r in rows] == ["base", "patched", "upstream-0.5.13",
                                            "upstream-0.5.17"]


def _profile(variant, with_stack, frames=None):
    p = {"variant": variant, "attention_backend": "default", "speculative": "EAGLE3",
         "overlap": True, "piecewise_cuda_graph": True, "concurrency": 1, "tp": 1, "rank": 0,
         "with_stack": with_stack, "steps": 30, "window_us_per_step": 4000.0,
         "gpu_busy_us_per_step": 1000.0, "gpu_idle_us_per_step": 3000.0}
    if frames is not None:
        p["python"] = {"idle_us_per_step_by_frame": frames}
    return p


def test_profile_table_gives_idle_share_and_stack_traces_list_where_the_gpu_waited():
    frames = {f"srt/f.py: frame{i}": 100.0 * i for i in range(1, 11)}  # frame10 largest
    data = {"card": "GPU", "date": "2026-11-27", "model_preset": "small", "runs": [],
            "greedy_equivalence": [],
            "profiles": [_profile("base", False), _profile("patched", True, frames)]}
    page = report.render(data, "x.json")
    # idle 3000 of a 4000 us window
    assert "| base EAGLE3 default pcg | gpu | 1 | 1 | 0 | 30 | 4000.0 | 1000.0 | 3000.0 | 75.0 |" in page
    waits = page.split("### Where the GPU waited", 1)[1]
    rows = [line for line in waits.splitlines() if line.startswith("| patched")]
    assert len(rows) == report.WAIT_FRAMES
    assert rows[0] == "| patched EAGLE3 default pcg | 1 | 0 | srt/f.py: frame10 | 1000.0 | 33.3 |"
    assert rows[-1].startswith("| patched EAGLE3 default pcg | 1 | 0 | srt/f.py: frame3 | 300.0 |")
    assert "| base " not in waits  # a GPU-only trace has no frames
    data["profiles"] = data["profiles"][:1]
    assert "### Where the GPU waited" not in report.render(data, "x.json")


def test_profile_table_gives_the_tokens_decoded_when_each_window_opened():
    base, patched = _profile("base", False), _profile("patched", False)
    base["window_start_tokens"], patched["window_start_tokens"] = [128, 131], [129, 129]
    data = {"card": "GPU", "date": "2026-11-29", "model_preset": "small", "runs": [],
            "greedy_equivalence": [], "profiles": [base, patched]}
    table = report.render(data, "x.json").split("## Profiles", 1)[1].split("###")[0]
    assert "| base EAGLE3 default pcg | gpu | 1 | 1 | 0 | 128-131 | 30 |" in table
    assert "| patched EAGLE3 default pcg | gpu | 1 | 1 | 0 | 129 | 30 |" in table
    # a file from before the harness recorded it: no such column
    del base["window_start_tokens"], patched["window_start_tokens"]
    table = report.render(data, "x.json").split("## Profiles", 1)[1].split("###")[0]
    assert "| base EAGLE3 default pcg | gpu | 1 | 1 | 0 | 30 |" in table


def test_profile_page_says_what_ended_the_idle_gaps_largest_first():
    closed = {"cudaGraphLaunch, issued after the GPU went idle": 900.0,
              "cudaMemcpyAsync, issued before the GPU went idle": 300.0}
    data = {"card": "GPU", "date": "2026-11-27", "model_preset": "small", "runs": [],
            "greedy_equivalence": [],
            "profiles": [_profile("base", False), _profile("patched", False)]}
    data["profiles"][1]["idle_us_per_step_by_closing_call"] = closed
    page = report.render(data, "x.json")
    ended = page.split("### What ended the idle gaps", 1)[1].split("\n#", 1)[0]
    rows = [line for line in ended.splitlines() if line.startswith("| patched")]
    # shares of the profile's 3000 us idle; base, without the measure, has no rows
    assert "| base " not in ended
    assert rows == [
        "| patched EAGLE3 default pcg | gpu | 1 | 0 | cudaGraphLaunch, issued after the GPU "
        "went idle | 900.0 | 30.0 |",
        "| patched EAGLE3 default pcg | gpu | 1 | 0 | cudaMemcpyAsync, issued before the GPU "
        "went idle | 300.0 | 10.0 |"]
    del data["profiles"][1]["idle_us_per_step_by_closing_call"]
    assert "### What ended the idle gaps" not in report.render(data, "x.json")


def test_profile_page_lists_the_kernels_a_build_runs_more_or_less_of_than_base():
    data = {"card": "GPU", "date": "2026-11-29", "model_preset": "small", "runs": [],
            "greedy_equivalence": [],
            "profiles": [_profile("base", False), _profile("patched", False),
                         _profile("patched", True)]}
    data["profiles"][0]["gpu_kernels_by_name"] = {
        "gemm": [64.0, 4000.0], "copy<long>": [2.0, 6.0], "fill": [1.0, 3.0],
        "norm": [32.0, 300.0]}
    data["profiles"][1]["gpu_kernels_by_name"] = {
        "gemm": [64.0, 4001.0], "copy<long>": [4.0, 12.0], "relay": [1.0, 2.5],
        "norm": [32.0, 290.0]}
    page = report.render(data, "x.json")
    kernels = page.split("### Kernels that differ from base's", 1)[1].split("\n#", 1)[0]
    rows = [line for line in kernels.splitlines() if line.startswith("| patched")]
    # gemm's 1 µs is under the threshold; a stack trace is never paired
    assert rows == [
        "| patched EAGLE3 default pcg | 1 | 0 | `norm` | 32.0 | 32.0 | 300.0 | 290.0 | -10.0 |",
        "| patched EAGLE3 default pcg | 1 | 0 | `copy<long>` | 2.0 | 4.0 | 6.0 | 12.0 | 6.0 |",
        "| patched EAGLE3 default pcg | 1 | 0 | `fill` | 1.0 | 0 | 3.0 | 0.0 | -3.0 |",
        "| patched EAGLE3 default pcg | 1 | 0 | `relay` | 0 | 1.0 | 0.0 | 2.5 | 2.5 |"]
    del data["profiles"][0]["gpu_kernels_by_name"]  # a trace read before the measure
    assert "### Kernels that differ" not in report.render(data, "x.json")


def test_tensor_parallel_profiles_name_the_rank_whose_host_set_the_pace():
    """Rank 0's GPU is busy 3000 of 4000 us, 2500 of them in collectives
    (waiting for rank 1); rank 1's GPU idles 3200 us: rank 1 sets the pace."""
    ranks = [dict(_profile("patched", False), tp=2, rank=0, gpu_busy_us_per_step=3000.0,
                  gpu_idle_us_per_step=1000.0, gpu_collective_us_per_step=2500.0),
             dict(_profile("patched", False), tp=2, rank=1, gpu_busy_us_per_step=800.0,
                  gpu_idle_us_per_step=3200.0, gpu_collective_us_per_step=300.0)]
    data = {"card": "GPU", "date": "2026-11-27", "model_preset": "small", "runs": [],
            "greedy_equivalence": [], "profiles": [_profile("base", False)] + ranks}
    section = report.render(data, "x.json").split("### Ranks", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| patched")]
    assert rows == [  # base, on one GPU, is not a row; no call label, no call column
        "| patched EAGLE3 default pcg tp2 | gpu | 1 | 0 | 25.0 | 3000.0 | 2500.0 |  |",
        "| patched EAGLE3 default pcg tp2 | gpu | 1 | 1 | 80.0 | 800.0 | 300.0 | yes |"]
    assert "| base " not in section
    # one GPU: no such table
    data["profiles"] = data["profiles"][:1]
    assert "### Ranks" not in report.render(data, "x.json")


def _default_point(variant, tpots, c=1, tp=1):
    """A two-repeat point of the default attention backend."""
    run = _point(variant, tpots, [0, 1])
    run.update(attention_backend="default", tp=tp, concurrency=c)
    return run


def test_backend_table_pairs_patched_with_base_and_upstream(tmp_path):
    data = {"card": "NVIDIA H100", "date": "2026-11-27", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [],
            "runs": [_default_point("base", [2.0, 2.0]), _default_point("patched", [1.8, 2.2]),
                     _default_point("upstream-0.5.13", [2.0, 2.2])]}
    path = tmp_path / "x.json"
    path.write_text(json.dumps(data))
    table = report.backend_table([str(path)], "results")
    # patched / base: 0.90, 1.10 -> geo 0.995; patched / upstream: 0.90, 1.00 -> 0.949;
    # no point at c=8 or c=32, so no column for them; no start line, no patches column
    assert table.splitlines() == [
        "| results | card | model | tp | / base, c=1 | / upstream 0.5.13, c=1 |",
        "|---|---|---|---|---|---|",
        "| [x](results/x.md) | NVIDIA H100 | small | 1 | 0.99 [0.53, 1.87] (2) | 0.95 [0.68, 1.32] (2) |"]


def test_backend_table_gives_a_row_per_tp_and_the_patches_run(tmp_path):
    line = "patches 0001-0010 applied by sglpatch 0.2.0; per-step seq_lens host pull on: ..."
    data = {"card": "NVIDIA H200", "date": "2026-11-27", "model_preset": "llama-8b-shape",
            "bench": {"side_by_side": True}, "greedy_equivalence": [],
            "server_starts": [
                {"setting": "patched-through-0009-default-ov1-EAGLE3-pcg1",
                 "sglpatch_line": line.replace("0010", "0009")},
                {"setting": "patched-default-ov1-EAGLE3-pcg1", "sglpatch_line": line}],
            "runs": [_default_point("base", [2.0, 2.0]), _default_point("patched", [1.0, 1.0]),
                     _default_point("base", [4.0, 4.0], tp=2),
                     _default_point("patched", [2.0, 3.0], tp=2),
                     _default_point("patched-through-0009", [2.0, 2.0])]}
    path = tmp_path / "y.json"
    path.write_text(json.dumps(data))
    assert report.patches_applied(data) == "0001-0010"
    rows = report.backend_table([str(path)], "results").splitlines()
    assert rows[0] == "| results | card | model | patches | tp | / base, c=1 |"
    assert rows[2].startswith("| [y](results/y.md) | NVIDIA H200 | llama-8b-shape | 0001-0010 | 1 | 0.50 ")
    assert rows[3].startswith("| [y](results/y.md) | NVIDIA H200 | llama-8b-shape | 0001-0010 | 2 | 0.61 ")
    assert len(rows) == 4  # patched-through-0009 is not the patched build


def test_backend_table_keeps_decode_only_servers_apart(tmp_path):
    def decode_only(variant, tpots):
        return dict(_default_point(variant, tpots), disaggregation="decode")

    data = {"card": "NVIDIA H200", "date": "2026-11-28", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [],
            "runs": [_default_point("base", [2.0, 2.0]), _default_point("patched", [1.0, 1.0]),
                     decode_only("base", [4.0, 4.0]), decode_only("patched", [3.0, 3.0])]}
    path = tmp_path / "z.json"
    path.write_text(json.dumps(data))
    aggregated = report.backend_table([str(path)], "results").splitlines()
    decode = report.backend_table([str(path)], "results", disaggregation="decode").splitlines()
    assert len(aggregated) == len(decode) == 3
    assert aggregated[2].endswith("| 1 | 0.50 [0.50, 0.50] (2) |")
    assert decode[2].endswith("| 1 | 0.75 [0.75, 0.75] (2) |")
    # a setting of current.json names the mode
    setting = {"files": ["z"], "attention_backend": "default", "speculative": "EAGLE3",
               "references": ["base"], "disaggregation": "decode"}
    rows = report.backend_rows(**report.setting_args(setting, str(tmp_path)))
    assert [round(r["pairs"][("base", 1)]["geo_mean"], 2) for r in rows] == [0.75]


def test_stack_profiles_say_what_the_host_did_by_kind_of_work():
    kinds = {"sglang Python": 600.0, "CUDA graph launches": 100.0,
             "PyTorch operators (C++)": 300.0}
    stack = _profile("patched", True, {})
    stack["python"].update({"host_self_us_per_step_by_kind": kinds,
                            "host_self_us_per_step": 1000.0, "operator_calls_per_step": 150.0,
                            "triton_launches_per_step": 8.5, "graph_launches_per_step": 3.0})
    data = {"card": "GPU", "date": "2026-11-27", "model_preset": "small", "runs": [],
            "greedy_equivalence": [], "profiles": [_profile("base", False), stack]}
    section = report.render(data, "x.json").split("### What the host did", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| patched")]
    # largest first, each with its share of the host's time and the launches
    assert rows == [
        "| patched EAGLE3 default pcg | 1 | 0 | sglang Python | 600.0 | 60.0 | 150.0 | 8.5 | 3.0 |",
        "| patched EAGLE3 default pcg | 1 | 0 | PyTorch operators (C++) | 300.0 | 30.0 | 150.0 | 8.5 | 3.0 |",
        "| patched EAGLE3 default pcg | 1 | 0 | CUDA graph launches | 100.0 | 10.0 | 150.0 | 8.5 | 3.0 |"]
    # profiles from before the measure (or GPU-only) have no such table
    del stack["python"]["host_self_us_per_step_by_kind"]
    assert "### What the host did" not in report.render(data, "x.json")


def test_backend_table_gives_a_joined_trial_patch_a_row_of_its_own(tmp_path):
    """A trial patch that joined the series (report.JOINED) was measured as
    candidate-NAME on top of the patches its site's start line names: its
    row is that series through the patch's number, under the patched row."""
    line = "patches 0001-0010 applied by sglpatch 0.2.0; per-step seq_lens host pull on: ..."
    trial = next(iter(report.JOINED))
    data = {"card": "NVIDIA H200", "date": "2026-11-27", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [],
            "server_starts": [{"setting": "patched-default-ov1-EAGLE3-pcg1", "sglpatch_line": line}],
            "runs": [_default_point("base", [2.0, 2.0]), _default_point("patched", [1.6, 1.6]),
                     _default_point(trial, [1.2, 1.2])]}
    path = tmp_path / "z.json"
    path.write_text(json.dumps(data))
    rows = report.backend_table([str(path)], "results").splitlines()
    assert rows[2].startswith("| [z](results/z.md) | NVIDIA H200 | small | 0001-0010 | 1 | 0.80 ")
    assert rows[3].startswith(f"| [z](results/z.md) | NVIDIA H200 | small | "
                              f"0001-{report.JOINED[trial]} (trial patch) | 1 | 0.60 ")
    # a site whose patches the trial patch does not follow gets no such row
    data["server_starts"][0]["sglpatch_line"] = line.replace("0010", "0008")
    path.write_text(json.dumps(data))
    assert len(report.backend_table([str(path)], "results").splitlines()) == 3
    assert report.joined_label("0001-0010", "0011") == "0001-0011 (trial patch)"
    assert report.joined_label(None, "0011") is None


def test_a_stack_of_joined_trial_patches_is_the_series_through_its_last():
    """candidate-A+B+C that joined as three patches in its order ran the
    series through the last of them; each shorter prefix of the stack
    through its own last."""
    line = "patches 0001-0015 applied by sglpatch 0.2.0; per-step seq_lens host pull on: ..."
    stack = ("candidate-triton-tree-metadata-in-graph+spec-v1-draft-sum-from-host"
             "+flashinfer-plan-from-host")
    data = {"server_starts": [{"setting": "patched-triton-ov1-EAGLE3-pcg1", "sglpatch_line": line}]}
    labels = report.build_labels(data)
    assert labels[stack] == "0001-0018 (trial patches)"
    assert labels[stack.rsplit("+", 1)[0]] == "0001-0017 (trial patches)"
    assert labels["candidate-triton-tree-metadata-in-graph"] == "0001-0016 (trial patch)"
    # a stack on a site it did not follow: no label
    assert report.joined_label("0001-0015", "0017", 3) is None
    assert report.joined_label("0001-0014", "0018", 3) is None


def test_the_triton_table_takes_only_triton_points(tmp_path):
    """README's Triton table is the same table over `--attention-backend
    triton` points: a file with both backends gives each table its own rows,
    and patch 0012's trial server (on a 0001-0011 site) its joined row."""
    line = "patches 0001-0011 applied by sglpatch 0.2.0; per-step seq_lens host pull off: ..."
    triton = [_default_point("base", [2.0, 2.0]), _default_point("patched", [1.8, 1.8]),
              _default_point("candidate-triton-graph-metadata", [1.5, 1.5])]
    for run in triton:
        run["attention_backend"] = "triton"
    data = {"card": "NVIDIA H200", "date": "2026-11-27", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [],
            "server_starts": [{"setting": "patched-triton-ov1-EAGLE3-pcg1", "sglpatch_line": line}],
            "runs": triton + [_default_point("base", [4.0, 4.0]),
                              _default_point("patched", [2.0, 2.0])]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    rows = report.backend_table([str(path)], "results",
                                        attention_backend="triton").splitlines()
    assert [r.rstrip(" |").split(" | ")[3:6] for r in rows[2:]] == [
        ["0001-0011", "1", "0.90 [0.90, 0.90] (2)"],
        ["0001-0012 (trial patch)", "1", "0.75 [0.75, 0.75] (2)"]]
    rows = report.backend_table([str(path)], "results").splitlines()
    assert [r.rstrip(" |").split(" | ")[3:6] for r in rows[2:]] == [["0001-0011", "1", "0.50 [0.50, 0.50] (2)"]]


def test_the_no_speculation_table_takes_only_points_without_it(tmp_path):
    """README's no-speculation table: the same pairing over the points run
    without speculative decoding; a file with both gives each table its own
    rows, and the README embeds it between its own markers."""
    line = "patches 0001-0012 applied by sglpatch 0.2.0; per-step seq_lens host pull off: ..."
    plain = [_default_point("base", [2.0, 2.0], c=32), _default_point("patched", [1.6, 1.6], c=32)]
    for run in plain:
        run["speculative"] = "none"
    data = {"card": "NVIDIA H200", "date": "2026-11-27", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [],
            "server_starts": [{"setting": "patched-default-ov1-EAGLE3-pcg1", "sglpatch_line": line}],
            "runs": plain + [_default_point("base", [2.0, 2.0]), _default_point("patched", [1.8, 1.8])]}
    path = tmp_path / "n.json"
    path.write_text(json.dumps(data))
    rows = report.backend_table([str(path)], "results", speculative="none").splitlines()
    assert rows[0].endswith("| / base, c=32 |")
    assert [r.rstrip(" |").split(" | ")[3:6] for r in rows[2:]] == [
        ["0001-0012", "1", "0.80 [0.80, 0.80] (2)"]]
    rows = report.backend_table([str(path)], "results").splitlines()
    assert [r.rstrip(" |").split(" | ")[3:6] for r in rows[2:]] == [["0001-0012", "1", "0.90 [0.90, 0.90] (2)"]]


STEM = "2026-11-27-h200-x"


def _current(tmp_path, data, **setting):
    """A results dir holding `data` as one results file, and a current.json
    naming it."""
    (tmp_path / (STEM + ".json")).write_text(json.dumps(data))
    base = {"title": "Triton", "label": "triton", "definition": "Defined.",
            "attention_backend": "default", "speculative": "EAGLE3", "references": ["base"],
            "files": [STEM], "summary": [{"file": STEM, "tp": 1, "patches": "0001-0012"}]}
    base.update(setting)
    return {"caveats": ["Read with care."], "settings": [base]}


def _side_by_side(line="patches 0001-0012 applied by sglpatch 0.2.0; ...", **extra):
    data = {"card": "NVIDIA H200", "date": "2026-11-27", "model_preset": "small",
            "bench": {"side_by_side": True}, "greedy_equivalence": [],
            "server_starts": [{"setting": "patched-default-ov1-EAGLE3-pcg1", "sglpatch_line": line}],
            "commands": ["python benchmark/e2e.py run --variant base=/tmp/sb --deadline-s 500",
                         "python -m sglang.bench_serving --backend sglang",
                         "python benchmark/e2e.py run --variant base=/tmp/sb --deadline-s 90"],
            "runs": [_default_point("base", [2.0, 2.0]), _default_point("patched", [1.5, 1.5]),
                     _default_point("patched-through-0009", [2.2, 2.2])]}
    data.update(extra)
    return data


def test_summary_takes_each_settings_chosen_row_over_base(tmp_path):
    current = _current(tmp_path, _side_by_side())
    rows = report.summary_rows(current, str(tmp_path), "benchmark/results").splitlines()
    assert rows[2] == ("| triton, TP=1 | small | H200 | 0001-0012 | 0.75 [0.75, 0.75] (2) | "
                       f"[page](benchmark/results/{STEM}.md) |")
    # a row current.json names that the file does not have is an error, not a gap
    current["settings"][0]["summary"][0]["patches"] = "0001-0011"
    with pytest.raises(ValueError):
        report.summary_rows(current, str(tmp_path), "benchmark/results")


def test_results_page_names_every_build_and_its_commands_once(tmp_path):
    page = report.results_page(_current(tmp_path, _side_by_side()), str(tmp_path))
    assert page.startswith(report.RESULTS_GENERATED) and "- Read with care." in page
    section = page.split("## Triton", 1)[1]
    # a bisection build is a row of its own, named by its range
    assert [r.split(" | ")[3] for r in section.splitlines() if r.startswith(f"| [{STEM}]")] == [
        "0001-0012", "0001-0009"]
    # the run line once, without the call's deadline; bench_serving's line is not a run
    assert section.count("python benchmark/e2e.py run --variant base=/tmp/sb\n") == 1
    assert "--deadline-s" not in section and "bench_serving" not in section


def test_a_file_without_a_start_line_takes_its_patches_from_current_json(tmp_path):
    current = _current(tmp_path, _side_by_side(line="(no line)"))
    current["settings"][0]["files"] = [{"file": STEM, "patches": {"patched": "0001-0012"}}]
    assert "| H200 | 0001-0012 | 0.75 " in report.summary_rows(current, str(tmp_path), "r")
    # a trial patch that never joined labels the build; no joined row follows it
    assert report.build_labels(_side_by_side(), patches={"patched": "0001-0008 + trial x"}) == {
        "patched": "0001-0008 + trial x"}


def test_correctness_table_counts_digests_chains_and_truth_checks(tmp_path):
    greedy = [{"variant": v, "prompts": 64, "sha256": "a", "prompts_off_constructed_f": 0,
               "seq_lens_truth_checks": n, "seq_lens_truth_violations": 0}
              for v, n in (("base", None), ("patched", 100))]
    data = _side_by_side(greedy_runs=greedy, faults=[
        {"alive": True, "prompts_off_chain_during": 0, "prompts_off_chain_after": 1,
         "seq_lens_truth_checks": 50, "seq_lens_truth_violations": 0}],
        bench={"debug_env": {"SGLANG_DEBUG_CHECK_SEQ_LENS_TRUTH": "1"}})
    setting = _current(tmp_path, data, kind="correctness")["settings"][0]
    row = report.correctness_table(setting, str(tmp_path), "r").splitlines()[2]
    assert row == f"| [{STEM}](r/{STEM}.md) | NVIDIA H200 | 0001-0012 | check_seq_lens_truth | 2 / 1 | 1 | 0 / 150 | 1 / 1 |"


def test_machine_is_read_from_the_file_name():
    assert report.machine("2026-11-27-h200x2-tp2-x") == "H200 ×2"
    assert report.machine("2026-11-27-h100-x") == "H100"


def test_bench_times_the_forward_of_a_gpu_trace_at_concurrency_1_and_tp_1():
    # patched: median TPOT 2.0 ms and accept length 2.9 -> a 5800 µs forward,
    # of which the trace's GPU was busy 1000 µs
    data = {"runs": [_default_point("patched", [2.0, 2.0]),
                     _default_point("patched", [3.0, 3.0], c=8)]}
    trace = _profile("patched", False)
    assert report.bench_forward_us(data, trace) == 5800.0
    assert report.idle_percent(report.busy_over(trace, 5800.0)) == 82.8
    # the stack trace's host is slowed; above concurrency 1 other requests'
    # prefills share the TPOT; with TP collectives wait inside busy kernels
    assert report.bench_forward_us(data, _profile("patched", True)) is None
    assert report.bench_forward_us(data, dict(trace, concurrency=8)) is None
    assert report.bench_forward_us(data, dict(trace, tp=2)) is None
    # a server the bench did not time, or timed in another setting
    assert report.bench_forward_us(data, _profile("base", False)) is None
    # another build's point of the trace's setting
    assert report.bench_forward_us({"runs": [_default_point("base", [3.0, 3.0])]}, trace,
                                   "base") == 8700.0
    assert report.bench_forward_us(data, dict(trace, attention_backend="triton")) is None
    # without speculation a forward gives the request one token
    plain = _default_point("patched", [2.0, 2.0])
    plain.update(speculative="none", accept_length=None)
    assert report.bench_forward_us({"runs": [plain]},
                                   dict(trace, speculative="none")) == 2000.0


def test_idle_table_splits_off_the_idle_between_queued_kernels(tmp_path):
    profiles = [_profile("base", False), _profile("patched", False)]
    # of 3000 us idle per forward, base's gaps of 5 us and longer hold 2900
    # and patched's 2700: 100 and 300 us lie between kernels already queued
    for p, longer in zip(profiles, (2900.0, 2700.0)):
        p["idle_gaps"] = {">=5us": {"gaps_per_step": 10.0, "idle_us_per_step": longer},
                          ">=20us": {"gaps_per_step": 5.0, "idle_us_per_step": longer - 50}}
    data = _side_by_side(profiles=profiles)
    setting = _current(tmp_path, data, kind="idle")["settings"][0]
    table = report.idle_table(setting, str(tmp_path), "r").splitlines()
    assert table[0].endswith("| GPU idle % | idle µs in gaps < 5 µs | GPU busy / base's forward "
                             "| (GPU busy + gaps < 5 µs) / base's forward |")
    # base's forward 5800 us: (1000 + 100) / 5800 and (1000 + 300) / 5800
    assert table[2].endswith("| 5800.0 | 1000.0 | 82.8 | 100.0 | 0.172 | 0.19 |")
    assert table[3].endswith("| 4350.0 | 1000.0 | 77.0 | 300.0 | 0.172 | 0.224 |")
    # a trace without gap buckets has neither column
    for p in profiles:
        del p["idle_gaps"]
    setting = _current(tmp_path, data, kind="idle")["settings"][0]
    assert "gaps < 5" not in report.idle_table(setting, str(tmp_path), "r")


def test_idle_table_gives_each_timed_trace_with_the_build_it_ran(tmp_path):
    data = _side_by_side(profiles=[_profile("base", False), _profile("patched", False),
                                   _profile("patched", True)])
    setting = _current(tmp_path, data, kind="idle")["settings"][0]
    rows = report.idle_table(setting, str(tmp_path), "r").splitlines()[2:]
    # base's TPOT 2.0 ms and patched's 1.5 ms, accept length 2.9; the stack
    # trace is not timed by the bench
    # and its GPU busy time over base's forward: 1000 / 5800
    assert rows == [
        f"| [{STEM}](r/{STEM}.md) | NVIDIA H200 | small | default | chain (topk 1) | base "
        "| 5800.0 | 1000.0 | 82.8 | 0.172 |",
        f"| [{STEM}](r/{STEM}.md) | NVIDIA H200 | small | default | chain (topk 1) | 0001-0012 "
        "| 4350.0 | 1000.0 | 77.0 | 0.172 |"]
    assert "| 82.8 |" in report.results_page(_current(tmp_path, data, kind="idle"), str(tmp_path))
