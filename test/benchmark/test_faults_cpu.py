"""CPU tests of `e2e.py run --faults` against the stand-in sglang
(standin_sglang.py): the storm's counts in the results file match what the
stand-in saw (which, like sglang, aborts every rid that starts with the rid
it is given), and a stall of the server shows in max_silence_s,
max_output_gap_s, max_ttfb_s and the load polls."""

import collections
import os
import socket
import sys
import threading
import time

import pytest

from standin_sglang import REPO, run_e2e

sys.path.insert(0, os.path.join(REPO, "benchmark"))

import faults  # noqa: E402

pytest.importorskip("torch")  # the stand-in's token map (the chain f(t) = t + 1)

# 4 clients of each kind; every stream and generation lasts >= 2.5 s, so each
# cut (<= 2 s) and each abort (<= 2 s) lands mid-generation
FAULTS = ("--faults", "--no-bench", "--side-by-side", "--max-total-tokens", "4000",
          "--fault-clients", "12", "--fault-new-tokens", "250", "--fault-idle-s", "0.3",
          "--fault-deadline-s", "20")


def _seen(events, port, what):
    return [e["event"][what] for e in events
            if e["port"] == port and isinstance(e["event"], dict) and what in e["event"]]


@pytest.mark.slow
def test_fault_storm_counts_match_what_the_server_saw(tmp_path):
    events, data = run_e2e(tmp_path, *FAULTS, env={"FAKE_TOKEN_S": "0.01"}, token_map=True)
    assert not data.get("errors")
    ports = {e["port"]: e["argv"] for e in events if e["event"] == "up"}
    by_port = {int(argv[argv.index("--port") + 1]): argv for argv in ports.values()}
    recs = data["faults"]
    assert sorted(f["variant"] for f in recs) == ["base", "upstream-0.5.13"]
    for f, port in zip(recs, sorted(by_port)):
        assert f["clients"] == 12 and f["tp"] == 1 and f["speculative"] == "EAGLE3"
        assert (f["completed"], f["disconnected"], f["aborted"], f["errors"]) == (4, 4, 4, 0)
        # what the stand-in saw of this server's storm
        assert len(_seen(events, port, "abort")) == f["abort_requests_sent"] == 4
        assert len(_seen(events, port, "aborted_generation")) == f["aborted"]
        assert len(_seen(events, port, "stream_cut")) == f["disconnected"]
        assert len(_seen(events, port, "stream_done")) == f["completed"]
        assert _seen(events, port, "stream_aborted") == []  # no rid aborted by another's
        assert f["prompts_off_chain_during"] == f["prompts_off_chain_after"] == 0
        assert f["greedy_prompts"] == 3 and f["alive"] is True and f["health_status"] == 200
        assert f["retractions"] == 0 and f["idle_s"] == 0.3
        assert f["max_ttfb_s"] < 1.0 and f["storm_s"] >= 2.5  # no stall: first tokens at once
        assert f["max_output_gap_s"] < 1.0
        assert f["loads"] and f["loads_unanswered"] == 0 and f["loads_max_answer_s"] < 1.0
    # side by side: the second storm starts after the first ended
    assert recs[0]["variant"] != recs[1]["variant"]


@pytest.mark.slow
def test_fault_record_carries_the_truth_counts_of_the_whole_check(tmp_path):
    # a server that keeps truth-check counts (patched, switch on): the fault
    # record holds them as read after the storm and the idle pause, so they
    # cover more than the greedy check before the storm; and two grammar
    # clients beside the storm get the grammar's one sequence
    events, data = run_e2e(tmp_path, *FAULTS, "--fault-grammar-clients", "2",
                           env={"FAKE_TOKEN_S": "0.001", "FAKE_TRUTH": "1"}, token_map=True)
    greedy_checks = {g["variant"]: g["seq_lens_truth_checks"] for g in data["greedy_runs"]}
    for f in data["faults"]:
        assert f["seq_lens_truth_violations"] == 0
        assert f["seq_lens_truth_checks"] > greedy_checks[f["variant"]] > 0
        assert (f["clients"], f["grammar_clients"], f["grammar_exact"]) == (14, 2, 2)
        assert f["errors"] == 0
    grammar = [e["event"] for e in events
               if isinstance(e["event"], dict) and "grammar" in e["event"]]
    assert len(grammar) == 2 * len(data["faults"]) and {g["finish"] for g in grammar} == {"stop"}


@pytest.mark.slow
def test_several_storms_take_turns_and_count_their_own_retractions(tmp_path):
    # the stand-in logs one retraction of 2 requests per abort it receives:
    # each storm's record holds its own 4 aborts' retractions, not the
    # server's running total
    events, data = run_e2e(tmp_path, *FAULTS, "--fault-storms", "2",
                           env={"FAKE_TOKEN_S": "0.01", "FAKE_RETRACT_ON_ABORT": "1"},
                           token_map=True)
    assert not data.get("errors")
    recs = data["faults"]
    assert [(f["variant"], f["storm"]) for f in recs] == [
        ("base", 0), ("upstream-0.5.13", 0), ("upstream-0.5.13", 1), ("base", 1)]
    for f in recs:
        assert (f["retractions"], f["retracted_requests"]) == (4, 8)
        assert (f["completed"], f["disconnected"], f["aborted"]) == (4, 4, 4)
        assert f["alive"] is True
    # what the servers saw: the storms in that order, one after another
    port_of = {int(e["argv"][e["argv"].index("--port") + 1]): e["argv"]
               for e in events if e["event"] == "up"}
    aborts = [e["port"] for e in events if isinstance(e["event"], dict) and "abort" in e["event"]]
    turns = [aborts[i] for i in range(0, len(aborts), 4)]
    assert len(aborts) == 16 and all(aborts[i:i + 4] == [turns[i // 4]] * 4
                                     for i in range(0, 16, 4))
    assert turns[0] == turns[3] != turns[1] == turns[2] and set(turns) == set(port_of)


def test_storm_order_starts_each_storm_with_the_next_server():
    import run

    assert run.storm_order(["b", "p", "c"], 1) == [(0, "b"), (0, "p"), (0, "c")]
    assert run.storm_order(["b", "p", "c"], 3) == [
        (0, "b"), (0, "p"), (0, "c"), (1, "p"), (1, "c"), (1, "b"),
        (2, "c"), (2, "b"), (2, "p")]


def test_fewer_than_one_storm_is_refused(tmp_path):
    import subprocess

    from standin_sglang import E2E

    res = subprocess.run([sys.executable, E2E, "run", "--work-dir", str(tmp_path),
                          "--preset", "tiny", "--faults", "--fault-storms", "0"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--fault-storms" in res.stderr, res.stderr
    assert not (tmp_path / "models-tiny").exists()


def test_a_stalled_server_shows_in_silence_and_first_byte(tmp_path):
    # and a disaggregated decode server: every storm request carries the fake
    # transfer's bootstrap host, the greedy prompts are checked on their own chain
    events, data = run_e2e(tmp_path, *FAULTS, "--disaggregation-decode",
                           env={"FAKE_TOKEN_S": "0.01", "FAKE_STALL_S": "1.5"},
                           token_map=True, variants=("base",))
    assert not data.get("errors")
    hosts = [e["event"]["generate_bootstrap_host"] for e in events
             if isinstance(e["event"], dict) and "generate_bootstrap_host" in e["event"]]
    assert len(hosts) == 12 + 3 and set(hosts) == {"2.2.2.2"}  # storm + greedy checks
    assert data["faults"][0]["disaggregation"] == "decode"
    f = data["faults"][0]
    assert (f["clients"], f["grammar_clients"]) == (12, 0)
    assert (f["completed"], f["disconnected"], f["aborted"]) == (4, 4, 4)
    stalls = collections.Counter(e["port"] for e in events if e["event"] == "stall")
    assert list(stalls.values()) == [1]  # once, at the storm's first stream
    for f in data["faults"]:
        # the 1.5 s stall starts with the storm's first stream; a request sent
        # a moment later waits that much less of it (a tenth covers a loaded
        # machine; an unstalled first byte takes hundredths)
        assert f["max_silence_s"] >= 1.35 and f["max_ttfb_s"] >= 1.35
        assert f["max_output_gap_s"] >= 1.35  # nothing reached any client
        assert f["output_gap_window_s"][0] < 0.5  # from the storm's start
        assert f["loads_max_answer_s"] >= 0.3  # the scheduler answered late, between steps
        assert f["median_ttfb_s"] >= 1.0  # not one slow request: all waited
        assert f["errors"] == 0 and f["alive"] is True
        assert f["prompts_off_chain_during"] == 0


def test_retractions_are_counted_from_rank_0s_log_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-11-26 10:00:00 TP0] KV cache pool is full. Retract requests. "
        "#retracted_reqs: 3, #new_tokens_gained: 120, #new_token_ratio: 0.7 -> 1.0\n"
        "[2026-11-26 10:00:00 TP1] KV cache pool is full. Retract requests. "
        "#retracted_reqs: 3, #new_tokens_gained: 120, #new_token_ratio: 0.7 -> 1.0\n"
        "[2026-11-26 10:00:01] KV cache pool is full. Retract requests. "
        "#retracted_reqs: 2, #new_tokens_gained: 64\n"
        "[2026-11-26 10:00:02] Decode batch. #running-req: 40\n")
    assert faults.count_retractions(str(log)) == (2, 5)
    assert faults.count_retractions(str(tmp_path / "missing.log")) == (None, None)


def test_max_gap():
    assert faults.max_gap([]) == 0.0 and faults.max_gap([3.0]) == 0.0
    assert faults.max_gap([0.0, 4.0, 1.0]) == 3.0
    assert faults.gap_window([0.0, 4.0, 1.0]) == (3.0, 1.0, 4.0)


def test_no_storm_rid_is_a_prefix_of_another():
    # sglang 0.5.12.post1 Scheduler.abort_request: req.rid.startswith(recv_req.rid);
    # "...-1" would abort "...-10" to "...-19" as well
    for n, grammar in ((12, 0), (64, 0), (1000, 0), (8, 2)):
        rids = [c.rid for c in faults.make_clients(n, 50, 8, seed=1, grammar=grammar)]
        assert len(set(rids)) == n + grammar
        assert not [(a, b) for a in rids for b in rids if a != b and b.startswith(a)]


def test_each_storm_of_a_server_has_its_own_rids_and_times_and_the_same_prompts():
    storms = [faults.make_clients(12, 50, 8, seed=1, storm=k) for k in range(3)]
    rids = [c.rid for clients in storms for c in clients]
    assert len(set(rids)) == 36  # no rid of an earlier storm is sent again
    assert not [(a, b) for a in rids for b in rids if a != b and b.startswith(a)]
    assert [c.rid for c in storms[0]] == [c.rid for c in faults.make_clients(12, 50, 8, seed=1)]
    for clients in storms[1:]:
        assert [c.prompt for c in clients] == [c.prompt for c in storms[0]]
        assert [c.kind for c in clients] == [c.kind for c in storms[0]]
        assert [c.delay_s for c in clients] != [c.delay_s for c in storms[0]]


def test_grammar_clients_come_after_the_storms_kinds_and_ask_for_the_regex():
    clients = faults.make_clients(6, 50, 300, seed=1, grammar=2)
    assert [c.kind for c in clients] == ["cut", "abort", "complete"] * 2 + ["grammar"] * 2
    p = clients[-1].payload(fake_bootstrap=False)
    assert p["stream"] is False and "ignore_eos" not in p["sampling_params"]
    assert p["sampling_params"]["regex"] == "(t4t5t6){20}"
    assert p["sampling_params"]["max_new_tokens"] > len(faults.grammar_output())
    assert clients[0].payload(False)["sampling_params"]["ignore_eos"] is True


def test_the_regex_is_met_by_the_synthetic_tokenizers_ids_in_order(tmp_path):
    # make_models.py's tokenizer: the ids the regex names, and its EOS
    import json

    sys.path.insert(0, os.path.join(REPO, "benchmark", "models"))
    import make_models

    make_models.write_tokenizer(str(tmp_path), 64)
    vocab = json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"]
    names = [f"t{t}" for t in faults.GRAMMAR_TOKENS]
    assert [vocab[n] for n in names] == list(faults.GRAMMAR_TOKENS)
    assert vocab["</s>"] == faults.EOS_ID
    assert faults.grammar_regex() == "(" + "".join(names) + "){%d}" % faults.GRAMMAR_REPEATS


def test_a_grammar_client_completes_only_with_the_grammars_sequence():
    import json

    def body(ids, fin):
        return json.dumps({"output_ids": ids, "meta_info": {"finish_reason": fin}}).encode()

    want = faults.grammar_output()
    stop = {"type": "stop", "matched": 2}
    assert faults.grammar_outcome(200, body(want + [2], stop)) == "completed"
    assert faults.grammar_outcome(200, body(want, stop)) == "completed"
    with pytest.raises(RuntimeError, match="finished by an abort: Tokens not accepted"):
        faults.grammar_outcome(200, body(want[:3], {"type": "abort",
                                                    "message": "Tokens not accepted: 7"}))
    with pytest.raises(RuntimeError, match="leaves the grammar at token 4 of 60"):
        faults.grammar_outcome(200, body(want[:4] + [9] + want[5:], stop))
    with pytest.raises(RuntimeError, match="at token 30 of 30"):
        faults.grammar_outcome(200, body(want[:30], {"type": "length", "length": 30}))
    with pytest.raises(RuntimeError, match="HTTP 400"):
        faults.grammar_outcome(400, b"bad regex")


def test_a_stream_is_completed_only_by_a_finish_that_is_not_an_abort():
    end = b'{"output_ids": [5], "meta_info": {"finish_reason": %s}}'
    assert faults.stream_end(True, end % b'{"type": "length", "length": 8}') == "completed"
    with pytest.raises(RuntimeError, match="finished by an abort: Abort in waiting queue"):
        faults.stream_end(True, end % b'{"type": "abort", "message": "Abort in waiting queue"}')
    with pytest.raises(RuntimeError, match="without a finish_reason"):
        faults.stream_end(True, end % b"null")
    with pytest.raises(RuntimeError, match="stream error"):
        faults.stream_end(True, b'{"error": {"message": "x"}}')
    with pytest.raises(RuntimeError, match=r"without \[DONE\]"):
        faults.stream_end(False, end % b'{"type": "length", "length": 8}')


def test_a_cut_comes_on_time_also_before_the_response_headers():
    # a server that accepts and never answers: the client still goes away
    # after its delay, not at the storm's deadline
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    held = []
    threading.Thread(target=lambda: held.append(srv.accept()), daemon=True).start()
    c = faults.Client(0, "cut", [5, 6], 8, 0.2, "sglpatch-fault-1-0")
    t = time.time()
    faults._run_client(srv.getsockname()[1], c, False, time.time() + 5)
    assert (c.outcome, c.error, c.ttfb_s) == ("disconnected", None, None)
    assert time.time() - t < 2
    srv.close()


FAULT = {"variant": "patched", "attention_backend": "triton", "speculative": "EAGLE3",
         "overlap": True, "piecewise_cuda_graph": True, "tp": 2, "clients": 64,
         "completed": 21, "disconnected": 22, "aborted": 21, "errors": 1,
         "error_messages": ["cut #3: TimeoutError: x"], "prompts_off_chain_during": 0,
         "prompts_off_chain_after": 0, "retractions": 7, "retracted_requests": 19,
         "max_silence_s": 61.2,
         "max_ttfb_s": 60.1, "storm_s": 75.0, "idle_s": 20.0, "alive": True}


def test_fault_records_validate_pool_and_render():
    import report
    import results

    data = {"card": "H200", "date": "2026-11-26", "model_preset": "small", "runs": [],
            "greedy_equivalence": [], "faults": [FAULT]}
    results.validate(data)
    pooled = results.pool(results.pool(None, data, "run A"), data, "run B")
    assert [f["call"] for f in pooled["faults"]] == ["run A", "run B"]  # every call's kept
    page = report.render(pooled, "x.json")
    assert "## Load and faults" in page and "| patched EAGLE3 triton pcg tp2 | 64 | 21 | 22 |" in page
    assert "cut #3: TimeoutError: x" in page
    # a retraction that takes several requests shows beside the count
    assert "| 21 | 1 | 0 | 0 | 7 | 19 | 75.0 |" in page
    assert "grammar exact" not in page  # no grammar clients: no such columns
    with_grammar = dict(data, faults=[dict(FAULT, clients=66, grammar_clients=2,
                                           grammar_exact=1)])
    page = report.render(with_grammar, "x.json")
    assert "| patched EAGLE3 triton pcg tp2 | 66 | 21 | 22 | 21 | 1 | 2 | 1 | 0 |" in page
    bad = dict(data, faults=[dict(FAULT, alive="yes")])
    with pytest.raises(ValueError, match="alive"):
        results.validate(bad)


def test_storms_of_one_server_are_kept_apart_and_summed_on_the_page():
    import report
    import results

    storms = [dict(FAULT, storm=k, retractions=r, retracted_requests=r, completed=c,
                   max_output_gap_s=g)
              for k, r, c, g in ((0, 14, 39, 0.08), (1, 16, 40, 0.16), (2, 18, 38, 0.1))]
    base = [dict(FAULT, variant="base", storm=k, retractions=5, retracted_requests=5)
            for k in range(3)]
    data = {"card": "H200", "date": "2026-11-29", "model_preset": "small", "runs": [],
            "greedy_equivalence": [], "faults": storms + base}
    results.validate(data)
    # one server's storms share every other key field: merging keeps all three
    merged = results.merge(None, data)
    merged = results.merge(merged, dict(data, faults=[dict(storms[1], completed=41)]))
    assert [(f["variant"], f["storm"], f["completed"]) for f in merged["faults"]] == [
        ("patched", 0, 39), ("patched", 1, 41), ("patched", 2, 38),
        ("base", 0, 21), ("base", 1, 21), ("base", 2, 21)]
    page = report.render(data, "x.json")
    assert "| patched EAGLE3 triton pcg tp2 | 1 | 64 | 40 |" in page  # the storm column
    # setting, storms, completed, retractions, retracted requests, per storm,
    # largest max output gap
    assert "| patched EAGLE3 triton pcg tp2 | 3 | 117 | 48 | 48 | 16.0 | 0.16 |" in page
    assert "| base EAGLE3 triton pcg tp2 | 3 | 63 | 15 | 15 | 5.0 |" in page
    # one storm per server: neither the column nor the totals
    single = report.render(dict(data, faults=[FAULT]), "x.json")
    assert "storms together" not in single and "| storm |" not in single
    with pytest.raises(ValueError, match="storm"):
        results.validate(dict(data, faults=[dict(FAULT, storm="1")]))


def test_servers_of_a_storm_with_grammar_clients_get_the_grammar_backend():
    import run
    from options import RunOptions
    from server import server_command

    base = dict(python="python3", target="T", draft="D", port=30000,
                attention_backend="default", speculative="EAGLE3", overlap=True,
                piecewise=True)

    def backend(cmd):
        return cmd[cmd.index("--grammar-backend") + 1]

    assert backend(server_command(**base)) == "none"
    assert backend(server_command(grammar=True, **base)) == "xgrammar"
    m = run.Member("patched", {}, "default", True, "EAGLE3", True)
    for opts, want in ((RunOptions(faults=True, fault_grammar_clients=4), "xgrammar"),
                       (RunOptions(faults=True), "none"),
                       (RunOptions(fault_grammar_clients=4), "none")):  # no storm
        assert backend(run.member_command(opts, m, "T", "D", 30000)) == want


def test_grammar_clients_on_a_decode_only_server_are_refused(tmp_path):
    # its fake transfer makes 0 every request's first token, which no grammar
    # accepts: each grammar client would fail alike on every build
    import subprocess

    from standin_sglang import E2E

    res = subprocess.run([sys.executable, E2E, "run", "--work-dir", str(tmp_path),
                          "--preset", "tiny", "--faults", "--disaggregation-decode",
                          "--fault-grammar-clients", "8"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--fault-grammar-clients" in res.stderr, res.stderr
    assert not (tmp_path / "models-tiny").exists()
