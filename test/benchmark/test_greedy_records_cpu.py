"""CPU tests of the greedy records `e2e.py run` writes (greedy_equivalence and
greedy_runs): the fields the results schema and the steering checks read."""

import os
import dataclasses
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmark"))

import greedy  # noqa: E402
import run  # noqa: E402  (benchmark/run.py: the run loop)
from options import RunOptions  # noqa: E402

EAGLE = ("base", "triton", True, "EAGLE3", True)
NOSPEC = ("base", "triton", True, "none", True)


def _state(outputs):
    st = object.__new__(run.Run)
    st.opts = RunOptions(greedy_new_tokens=2, tp=2)
    st.fmap = None
    st.greedy_debug = {}
    st.greedy_out = dict(outputs)
    st.greedy_meta = {EAGLE: 2.9}
    st.greedy_logprobs, st.greedy_logprob_errors = {}, {}
    return st


def test_equivalence_entry_counts_the_differing_prompts():
    st = _state({EAGLE: [[1, 2], [3, 4]], NOSPEC: [[1, 2], [3, 5]]})
    (entry,) = st.greedy_entries()
    assert entry["variant"] == "base" and entry["overlap"] is True
    assert entry["piecewise_cuda_graph"] is True and entry["tp"] == 2
    assert (entry["prompts"], entry["mismatched_prompts"]) == (2, 1)
    assert entry["mismatches"][0]["prompt"] == 1
    assert entry["accept_length"] == 2.9 and entry["new_tokens"] == 2


def test_no_equivalence_entry_without_a_nospec_reference():
    assert _state({EAGLE: [[1, 2]]}).greedy_entries() == []


def test_runs_digest_equal_outputs_equally():
    st = _state({EAGLE: [[1, 2]], NOSPEC: [[1, 2]]})
    runs = {r["speculative"]: r for r in st.greedy_runs()}
    assert runs["EAGLE3"]["sha256"] == runs["none"]["sha256"]
    assert runs["EAGLE3"]["accept_length"] == 2.9 and runs["none"]["accept_length"] is None
    other = _state({EAGLE: [[1, 3]]}).greedy_runs()[0]["sha256"]
    assert other != runs["EAGLE3"]["sha256"]


def test_records_say_disaggregated_decode_and_the_own_chain():
    st = _state({EAGLE: [[1, 2, 3], [7, 8, 9]], NOSPEC: [[1, 2, 3], [7, 8, 0]]})
    st.opts = dataclasses.replace(st.opts, disaggregation_decode=True)
    st.fmap = {t: t + 1 for t in range(10)}
    st.prompts = [[5], [6]]
    st.greedy_debug = {EAGLE: {"seq_lens_truth_checks": 40, "seq_lens_truth_violations": 0}}
    runs = {r["speculative"]: r for r in st.greedy_runs()}
    # the first token came from no real prefill: only the chain after it counts
    assert runs["EAGLE3"]["prompts_off_own_chain"] == 0
    assert runs["none"]["prompts_off_own_chain"] == 1
    assert runs["EAGLE3"]["prompts_off_constructed_f"] == 2
    assert runs["EAGLE3"]["disaggregation"] == "decode"
    assert runs["EAGLE3"]["seq_lens_truth_checks"] == 40
    assert "seq_lens_truth_checks" not in runs["none"]


def test_probe_switches_are_recorded_as_debug_env(monkeypatch):
    # a run with a probe's timers on measures host time, not latency: its
    # file says so, with the extra functions it timed
    monkeypatch.setenv("SGLPATCH_HOST_TIME", "1")
    monkeypatch.setenv("SGLPATCH_HOST_TIME_EXTRA", "pkg.mod:helper")
    monkeypatch.setenv("SGLPATCH_UNRELATED", "x")
    got = run.debug_env()
    assert got["SGLPATCH_HOST_TIME"] == "1" and got["SGLPATCH_HOST_TIME_EXTRA"] == "pkg.mod:helper"
    assert "SGLPATCH_UNRELATED" not in got


PATCHED = ("patched",) + EAGLE[1:]


def test_each_server_gives_its_largest_logprob_difference_from_base():
    st = _state({EAGLE: [[1, 2]], PATCHED: [[1, 2]], NOSPEC: [[1, 2]]})
    # per prompt, per position, {token: logprob}: same greedy tokens, one
    # alternative's logprob moved by 0.25 in the patched build
    st.greedy_logprobs = {EAGLE: [[{2: -0.1, 7: -3.0}, {3: -0.2}]],
                          PATCHED: [[{2: -0.1, 7: -2.75}, {3: -0.2, 9: -4.0}]],
                          NOSPEC: [[{2: -0.1}, {3: -0.2}]]}
    runs = {(r["variant"], r["speculative"]): r for r in st.greedy_runs()}
    assert runs[("base", "EAGLE3")]["logprob_max_diff_vs_base"] == 0.0
    assert runs[("patched", "EAGLE3")]["logprob_max_diff_vs_base"] == 0.25
    # base's no-spec server is its own reference
    assert runs[("base", "none")]["logprob_max_diff_vs_base"] == 0.0


def test_builds_on_the_series_also_give_their_difference_from_patched():
    """patched-again (the series' A/A copy) and a trial patch's server are
    measured against the patched server too: a logprob the series moves
    from base's but its own second server reproduces is the code, one that
    moves between the two patched servers is their scatter."""
    again = ("patched-again",) + EAGLE[1:]
    trial = ("candidate-x",) + EAGLE[1:]
    st = _state({EAGLE: [[1, 2]], PATCHED: [[1, 2]], again: [[1, 2]], trial: [[1, 2]]})
    st.greedy_logprobs = {EAGLE: [[{2: -0.1, 7: -3.0}]],
                          PATCHED: [[{2: -0.1, 7: -2.75}]],
                          again: [[{2: -0.1, 7: -2.75}]],
                          trial: [[{2: -0.1, 7: -2.5}]]}
    runs = {r["variant"]: r for r in st.greedy_runs()}
    assert runs["patched-again"]["logprob_max_diff_vs_base"] == 0.25
    assert runs["patched-again"]["logprob_max_diff_vs_patched"] == 0.0
    assert runs["candidate-x"]["logprob_max_diff_vs_patched"] == 0.25
    assert "logprob_max_diff_vs_patched" not in runs["base"]
    assert "logprob_max_diff_vs_patched" not in runs["patched"]


def test_a_server_without_logprobs_says_why_and_others_have_no_field():
    st = _state({EAGLE: [[1, 2]], PATCHED: [[1, 2]]})
    st.greedy_logprob_errors = {PATCHED: "HTTPError: 400"}
    runs = {r["variant"]: r for r in st.greedy_runs()}
    assert runs["patched"]["logprob_error"] == "HTTPError: 400"
    assert "logprob_max_diff_vs_base" not in runs["base"]  # none were taken


def test_top_logprobs_reads_sglangs_shape_and_empty_positions(monkeypatch):
    out = [{"meta_info": {"output_top_logprobs": [[[-0.1, 5, None], [-2.0, 9, None]], None]}},
           {"meta_info": {}}]
    monkeypatch.setattr(greedy, "http_json", lambda url, payload, timeout: out)
    assert greedy.top_logprobs("u", [[1], [2]], 2, 2) == [[{5: -0.1, 9: -2.0}, {}], []]


def test_logprob_difference_counts_only_tokens_both_name():
    assert greedy.logprob_max_diff([[{1: -1.0}]], [[{2: -1.0}]]) is None
    assert greedy.logprob_max_diff([[{1: -1.0, 2: -2.0}]], [[{2: -2.5}]]) == 0.5
