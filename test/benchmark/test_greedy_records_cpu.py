"""CPU tests of the greedy records e2e.py writes (greedy_equivalence and
greedy_runs): the fields the results schema and the steering checks read."""

import importlib.util
import os
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("bench_e2e", os.path.join(REPO, "benchmark", "e2e.py"))
e2e = importlib.util.module_from_spec(spec)
spec.loader.exec_module(e2e)

EAGLE = ("base", "triton", True, "EAGLE3", True)
NOSPEC = ("base", "triton", True, "none", True)


def _state(outputs):
    st = object.__new__(e2e.Run)
    st.a = types.SimpleNamespace(greedy_new_tokens=2, tp=2)
    st.fmap = None
    st.greedy_out = dict(outputs)
    st.greedy_meta = {EAGLE: 2.9}
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
