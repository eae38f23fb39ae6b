"""CPU test of `benchmark/e2e.py run` end to end, against a stand-in sglang.

The stand-in site holds `sglang.launch_server` (a small HTTP server with the
endpoints the harness calls) and `sglang.bench_serving` (writes the result
line bench_serving writes).  Each records what it did in a shared journal,
so the test can check the order of events: with --side-by-side all servers
serve at once and their repeats interleave; without it each server is gone
before the next starts.  The results file must hold every point.
"""

import json
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
E2E = os.path.join(REPO, "benchmark", "e2e.py")

LAUNCH_SERVER = textwrap.dedent('''
    import gzip, http.server, json, os, sys, threading, time
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    spec = "--speculative-algorithm" in argv
    tp = int(argv[argv.index("--tp") + 1]) if "--tp" in argv else 1
    journal = os.environ["FAKE_JOURNAL"]

    def note(event):
        with open(journal, "a") as fh:
            fh.write(json.dumps({"t": time.time(), "port": port, "event": event,
                                 "argv": argv}) + "\\n")

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send({"internal_states": [{"avg_spec_accept_length": 2.5 if spec else None}]})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(n) or b"{}")
            if self.path == "/start_profile":
                note({"start_profile": req})
                threading.Thread(target=write_trace, args=(req,)).start()
                return self._send({"success": True})
            if self.path != "/generate":
                return self._send({"success": True})
            ids = req["input_ids"]
            note({"generate_bootstrap_host": req.get("bootstrap_host")})
            batch = ids if ids and isinstance(ids[0], list) else [ids]
            k = req["sampling_params"]["max_new_tokens"]
            # output: the prompt's last id + 1, +2, ... (same with and without spec)
            outs = [{"output_ids": [p[-1] + i + 1 for i in range(k)],
                     "meta_info": {"completion_tokens": k,
                                   "spec_verify_ct": (k // 2) if spec else 0}}
                    for p in batch]
            self._send(outs if batch is ids else outs[0])

    def write_trace(req):
        # like sglang: the trace appears once num_steps forwards have run.
        # Each forward: a kernel of (port % 100) us, then 50 us of idle GPU
        # one trace per tensor-parallel rank; rank r's kernels are r us longer
        time.sleep(0.2)
        stamp = time.time()
        for rank in range(tp):
            busy = port % 100 + 10 + rank
            ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                   "ts": i * (busy + 50), "dur": busy} for i in range(req["num_steps"])]
            name = f"{stamp}-TP-{rank}.trace.json.gz"
            with gzip.open(os.path.join(req["output_dir"], name), "wt") as fh:
                json.dump({"traceEvents": ev}, fh)

    time.sleep(0.5)  # a start-up that takes a moment
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    note("up")
    import signal
    def down(*_):
        note("down")
        os._exit(0)
    signal.signal(signal.SIGTERM, down)
    srv.serve_forever()
''')

BENCH_SERVING = textwrap.dedent('''
    import json, os, sys, time
    argv = sys.argv[1:]
    opt = lambda name: argv[argv.index(name) + 1]
    port, conc, n = int(opt("--port")), int(opt("--max-concurrency")), int(opt("--num-prompts"))
    with open(os.environ["FAKE_JOURNAL"], "a") as fh:
        fh.write(json.dumps({"t": time.time(), "port": port, "event": "bench",
                             "concurrency": conc}) + "\\n")
    time.sleep(0.05)
    # TPOT that tells the servers apart: 1 ms a concurrency step, +0.5 on 30000s+10
    tpot = 1.0 + conc + (port % 100) / 20.0
    rec = {"median_tpot_ms": tpot, "median_itl_ms": tpot / 2, "output_throughput": 100.0 * conc,
           "accept_length": None, "duration": 1.0}
    with open(opt("--output-file"), "a") as fh:
        fh.write(json.dumps(rec) + "\\n")
''')


def _site(tmp_path):
    site = tmp_path / "site" / "sglang"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "launch_server.py").write_text(LAUNCH_SERVER)
    (site / "bench_serving.py").write_text(BENCH_SERVING)
    # a models dir the harness reuses instead of building weights
    draft = tmp_path / "work" / "models-tiny" / "draft"
    draft.mkdir(parents=True)
    (draft / "synthetic.json").write_text(json.dumps(
        {"preset": "tiny", "accept_steps": 3, "draft_accuracy": 0.8, "spec_steps": 3,
         "vocab": 50}))
    return str(tmp_path / "site")


def _run(tmp_path, *extra):
    site = _site(tmp_path)
    journal = tmp_path / "journal.jsonl"
    env = dict(os.environ, FAKE_JOURNAL=str(journal), PYTHONPATH=site)
    out = tmp_path / "out"
    cmd = [sys.executable, E2E, "run", "--variant", f"base={site}",
           "--variant", f"upstream-0.5.13={site}", "--preset", "tiny",
           "--speculative", "EAGLE3", "--piecewise", "default",
           "--concurrency", "1,4", "--repeats", "2", "--min-seconds", "0.5",
           "--greedy-prompts", "3", "--greedy-new-tokens", "4", "--card", "FAKE",
           "--work-dir", str(tmp_path / "work"), "--out-dir", str(out), *extra]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    events = [json.loads(x) for x in journal.read_text().splitlines()]
    (path,) = [p for p in out.iterdir() if p.suffix == ".json"]
    return events, json.loads(path.read_text())


def test_side_by_side_servers_overlap_and_repeats_interleave(tmp_path):
    events, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "12345")
    ups = [e for e in events if e["event"] == "up"]
    downs = [e for e in events if e["event"] == "down"]
    assert len(ups) == 2 and len(downs) == 2
    # both served at once: the second came up before the first went down
    assert max(e["t"] for e in ups) < min(e["t"] for e in downs)
    for e in ups:
        argv = e["argv"]
        assert argv[argv.index("--max-total-tokens") + 1] == "12345"
        # an idle server must not busy-poll beside the one being measured
        assert "--sleep-on-idle" in argv
    # the bench points alternate between the two servers at every (rep, c)
    ports = [e["port"] for e in events if e["event"] == "bench"]
    assert len(ports) == 2 * 2 * 2
    assert all(a != b for a, b in zip(ports, ports[1:]))
    concs = [e["concurrency"] for e in events if e["event"] == "bench"]
    assert concs == [1, 1, 4, 4, 1, 1, 4, 4]
    runs = {(r["variant"], r["concurrency"]): r for r in data["runs"]}
    assert sorted(runs) == [("base", 1), ("base", 4), ("upstream-0.5.13", 1),
                            ("upstream-0.5.13", 4)]
    assert all(r["repeats"] == 2 for r in runs.values())
    # each variant's numbers came from its own server (TPOT encodes the port)
    assert runs[("base", 1)]["tpot_ms_median"] != runs[("upstream-0.5.13", 1)]["tpot_ms_median"]
    assert data["bench"]["side_by_side"] is True and data["bench"]["max_total_tokens"] == 12345
    starts = data["server_starts"]
    assert [s["side_by_side"] for s in starts] == [2, 2]


def test_default_runs_one_server_at_a_time(tmp_path):
    events, data = _run(tmp_path)
    life = [e for e in events if e["event"] in ("up", "down")]
    assert [e["event"] for e in life] == ["up", "down", "up", "down"]
    assert "--max-total-tokens" not in life[0]["argv"]
    ports = [e["port"] for e in events if e["event"] == "bench"]
    first = life[0]["port"]
    # all of the first server's points, then all of the second's
    assert ports[:4] == [first] * 4 and first not in ports[4:]
    assert len(data["runs"]) == 4 and data["bench"]["side_by_side"] is False
    assert [g["sha256"] for g in data["greedy_runs"]][0] == data["greedy_runs"][1]["sha256"]


def test_side_by_side_needs_a_fixed_kv_pool(tmp_path):
    res = subprocess.run([sys.executable, E2E, "run", "--side-by-side"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--max-total-tokens" in res.stderr


def test_profiles_of_each_server_plain_then_with_stack(tmp_path):
    events, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "1", "--no-bench",
                        "--profile-steps", "6", "--profile-stack-steps", "2")
    asked = [(e["port"], e["event"]["start_profile"]) for e in events
             if isinstance(e["event"], dict) and "start_profile" in e["event"]]
    # both servers plain first, then both with Python stacks
    assert [(r["activities"], r["with_stack"], r["num_steps"]) for _, r in asked] == [
        (["GPU"], False, 6), (["GPU"], False, 6),
        (["CPU", "GPU"], True, 2), (["CPU", "GPU"], True, 2)]
    assert asked[0][0] != asked[1][0]
    profiles = {(p["variant"], p["with_stack"]): p for p in data["profiles"]}
    assert len(profiles) == 4 and not data.get("errors")
    for (var, stack), p in profiles.items():
        assert p["steps"] == (2 if stack else 6) and p["concurrency"] == 1
        # the trace's own numbers: one kernel and one 50 us gap a forward
        # (the last forward's gap is outside the window)
        assert p["gpu_kernels_per_step"] == 1
        idle = 50 * (p["steps"] - 1) / p["steps"]
        assert p["gpu_idle_us_per_step"] == round(idle, 3)
        assert p["trace"].endswith(("-gpu.trace.json.gz", "-stack.trace.json.gz"))
        assert os.path.exists(tmp_path / "work" / "profiles" / p["trace"])
    # each variant's profile came from its own server (kernel length = port)
    assert profiles[("base", False)]["gpu_busy_us_per_step"] != \
        profiles[("upstream-0.5.13", False)]["gpu_busy_us_per_step"]


def test_profiles_of_every_tensor_parallel_rank(tmp_path):
    _, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "1", "--no-bench",
                   "--profile-steps", "4", "--tp", "2")
    assert not data.get("errors")
    by = {(p["variant"], p["rank"]): p for p in data["profiles"]}
    assert sorted(by) == [("base", 0), ("base", 1), ("upstream-0.5.13", 0), ("upstream-0.5.13", 1)]
    for (var, rank), p in by.items():
        assert p["tp"] == 2 and p["trace"].endswith(f"-gpu-rank{rank}.trace.json.gz")
        assert os.path.exists(tmp_path / "work" / "profiles" / p["trace"])
    # each rank's numbers come from its own trace
    assert by[("base", 1)]["gpu_busy_us_per_step"] == by[("base", 0)]["gpu_busy_us_per_step"] + 1
    assert all(g["tp"] == 2 for g in data["greedy_runs"])


def test_disaggregated_decode_servers_use_the_fake_transfer(tmp_path):
    events, data = _run(tmp_path, "--no-bench", "--disaggregation-decode")
    for e in [e for e in events if e["event"] == "up"]:
        argv = e["argv"]
        assert argv[argv.index("--disaggregation-mode") + 1] == "decode"
        assert argv[argv.index("--disaggregation-transfer-backend") + 1] == "fake"
        assert "--sleep-on-idle" not in argv  # one server at a time
    assert {g["disaggregation"] for g in data["greedy_runs"]} == {"decode"}
    hosts = [e["event"]["generate_bootstrap_host"] for e in events
             if isinstance(e["event"], dict) and "generate_bootstrap_host" in e["event"]]
    assert hosts and set(hosts) == {"2.2.2.2"}  # the fake transfer's marker
