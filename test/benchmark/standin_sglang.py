"""A stand-in sglang for CPU tests of `benchmark/e2e.py run`.

The stand-in site holds `sglang.launch_server` (a small HTTP server with the
endpoints the harness calls: /generate, batched or one prompt, streamed or
not; /abort_request; /health; /get_server_info; /start_profile) and
`sglang.bench_serving` (writes the result line bench_serving writes).  Each
records what it did in a shared journal (FAKE_JOURNAL), so a test can check
the order of events and count what the server saw.  Greedy output: the
prompt's last id + 1, + 2, ... (the chain f(t) = t + 1); with return_logprob,
top_logprobs_num entries at each position, the same on every server.  Like sglang's
scheduler, /abort_request aborts every request whose rid starts with the
given rid, streamed or not; an aborted stream ends with an abort
finish_reason and [DONE]; /v1/loads answers between two steps.  Environment:
FAKE_BOOT_S, seconds the start-up takes before anything else (default 0.5);
FAKE_TOKEN_S, seconds per generated token (all requests step under one
lock, like one scheduler); FAKE_STALL_S, the whole server stalls that long
when the first streamed request arrives; FAKE_START_S, seconds before the
server starts listening; FAKE_CAPTURE_S, then seconds between the log's
"Capture cuda graph begin" and "end" lines (FAKE_NO_CAPTURE: no such lines,
as with --disable-cuda-graph); FAKE_PREFILL_GRAPH, "True" or "False": each
/generate logs sglang's prefill-batch line with that "cuda graph:". A
request with a "regex" of the storm's grammar clients' shape,
"(t4t5t6){20}", gets that sequence and EOS.
"""

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
E2E = os.path.join(REPO, "benchmark", "e2e.py")

# The harness's waits, shortened for a server that starts in a moment
# (benchmark/pace.py; unset on the GPU machine): it looks every 50 ms, and
# side by side the next server starts 0.5 s after the last one's capture;
# the stand-in's own start-up takes 0.1 s before its other delays.
FAST_PACE = {"SGLPATCH_BENCH_POLL_S": "0.05", "SGLPATCH_BENCH_START_SPACING_S": "0.5",
             "FAKE_BOOT_S": "0.1"}
START_SPACING_S = float(FAST_PACE["SGLPATCH_BENCH_START_SPACING_S"])

# e2e.py picks its servers' ports upward from --port-base: each run gets a
# block of its own, so runs at the same time (pytest-xdist workers, another
# checkout's suite) never race for one port. Below 30000: e2e.py's default
# base, which benchmark/pairs.py's copies use (test_pairs_cpu holds it).
PORT_LOCKS = os.path.join(tempfile.gettempdir(), "sglpatch-test-ports")
PORT_BLOCKS = range(20000, 30000, 500)


@contextlib.contextmanager
def port_block(first=None):
    """The first port of a block of 500: `first`'s (waiting for whoever
    holds it), or the first block of PORT_BLOCKS that nobody holds. Held
    with a lock file, across processes, until the with-block ends."""
    os.makedirs(PORT_LOCKS, mode=0o1777, exist_ok=True)
    bases = [first] if first is not None else list(PORT_BLOCKS)
    while True:
        for base in bases:
            fd = os.open(os.path.join(PORT_LOCKS, f"{base}.lock"), os.O_RDONLY | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if first is not None else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield base
            finally:
                os.close(fd)  # releases the lock
            return
        time.sleep(0.2)  # every block held: wait for one

LAUNCH_SERVER = textwrap.dedent('''
    import gzip, http.server, json, os, re, sys, threading, time
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    spec = "--speculative-algorithm" in argv
    tp = int(argv[argv.index("--tp") + 1]) if "--tp" in argv else 1
    journal = os.environ["FAKE_JOURNAL"]
    token_s = float(os.environ.get("FAKE_TOKEN_S") or 0)
    stall_s = float(os.environ.get("FAKE_STALL_S") or 0)
    step_lock = threading.Lock()  # one scheduler: a stall holds it
    aborted = set()
    running = []  # rids generating now
    journal_lock = threading.Lock()

    def note(event):
        with journal_lock, open(journal, "a") as fh:
            fh.write(json.dumps({"t": time.time(), "port": port, "event": event,
                                 "argv": argv,
                                 "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                 "cpus": sorted(os.sched_getaffinity(0)),
                                 "jit_cache": {k: os.environ.get(k) for k in (
                                     "FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR",
                                     "TVM_FFI_CACHE_DIR")}}) + "\\n")

    def is_aborted(rid):  # sglang: req.rid.startswith(recv_req.rid)
        return rid is not None and any(rid.startswith(a) for a in list(aborted))

    steps_done = [0]  # tokens generated, all requests

    def step():
        with step_lock:
            steps_done[0] += 1
        if token_s:
            time.sleep(token_s)

    def grammar_ids(regex):  # "(t4t5t6){20}" -> [4, 5, 6] * 20
        group, count = re.fullmatch(r"\\((.*)\\)\\{(\\d+)\\}", regex).groups()
        return [int(t) for t in re.findall(r"t(\\d+)", group)] * int(count)

    stalled = []

    def stall_once():
        with journal_lock:
            if stalled:
                return
            stalled.append(True)
        with step_lock:
            note("stall")
            time.sleep(stall_s)

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
            if self.path in ("/health", "/model_info"):
                return self._send({})
            if self.path == "/v1/loads":
                with step_lock:  # the scheduler answers between two steps
                    n = len(running)
                return self._send({"loads": [{"num_running_reqs": n, "num_waiting_reqs": 0,
                                              "num_used_tokens": 10 * n}]})
            state = {"avg_spec_accept_length": 2.5 if spec else None}
            if os.environ.get("FAKE_TRUTH"):  # a patched server with the truth check on
                with journal_lock:
                    state.update(seq_lens_truth_checks=steps_done[0],
                                 seq_lens_truth_violations=0)
            self._send({"internal_states": [state]})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(n) or b"{}")
            if self.path == "/start_profile":
                note({"start_profile": req})
                threading.Thread(target=write_trace, args=(req,)).start()
                return self._send({"success": True})
            if self.path == "/abort_request":
                aborted.add(req["rid"])
                note({"abort": req["rid"]})
                if os.environ.get("FAKE_RETRACT_ON_ABORT"):  # sglang's line, rank 0's
                    print("[2026-11-29 10:00:00 TP0] KV cache pool is full. Retract "
                          "requests. #retracted_reqs: 2, #new_tokens_gained: 64", flush=True)
                return self._send({})
            if self.path != "/generate":
                return self._send({"success": True})
            ids = req["input_ids"]
            note({"generate_bootstrap_host": req.get("bootstrap_host")})
            if os.environ.get("FAKE_PREFILL_GRAPH"):  # sglang's line per prefill batch
                print("[2026-11-30 10:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 8, "
                      "#cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, "
                      f"#pending-token: 0, cuda graph: {os.environ['FAKE_PREFILL_GRAPH']}, "
                      "input throughput (token/s): 1.00", flush=True)
            batch = ids if ids and isinstance(ids[0], list) else [ids]
            k = req["sampling_params"]["max_new_tokens"]
            if req.get("stream"):
                return self._stream(req, ids, k)
            regex = req["sampling_params"].get("regex")
            if regex:
                out, reason = grammar_ids(regex) + [2], {"type": "stop", "matched": 2}
                for _ in out:
                    step()
                note({"grammar": req.get("rid"), "finish": reason["type"]})
                return self._send({"output_ids": out, "meta_info": {
                    "completion_tokens": len(out), "finish_reason": reason}})
            outs = [[] for _ in batch]
            reason = {"type": "length", "length": k}
            running.append(req.get("rid"))
            for i in range(k):
                if is_aborted(req.get("rid")):
                    note({"aborted_generation": req["rid"]})
                    reason = {"type": "abort", "message": "Abort in the stand-in"}
                    break
                step()
                for p, out in zip(batch, outs):
                    out.append(p[-1] + i + 1)
            running.remove(req.get("rid"))
            # same output with and without spec
            outs = [{"output_ids": out,
                     "meta_info": {"completion_tokens": len(out), "finish_reason": reason,
                                   "spec_verify_ct": (k // 2) if spec else 0}}
                    for out in outs]
            if req.get("return_logprob"):  # sglang's shape: (logprob, id, text) per token
                n = req.get("top_logprobs_num") or 0
                for o in outs:
                    o["meta_info"]["output_top_logprobs"] = [
                        [[-0.5 * j, t + j, None] for j in range(n)] for t in o["output_ids"]]
            self._send(outs if batch is ids else outs[0])

        def _stream(self, req, prompt, k):
            self.send_response(200)  # HTTP/1.0: the body ends when the connection closes
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            if stall_s:
                stall_once()
            rid, fin = req.get("rid"), None
            running.append(rid)
            try:
                for i in range(k):
                    step()
                    fin = None
                    if is_aborted(rid):
                        fin = {"type": "abort", "message": "Abort in the stand-in"}
                    elif i == k - 1:
                        fin = {"type": "length", "length": k}
                    chunk = {"output_ids": [prompt[-1] + i + 1],
                             "meta_info": {"finish_reason": fin}}
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\\n\\n")
                    self.wfile.flush()
                    if fin:
                        break
                self.wfile.write(b"data: [DONE]\\n\\n")
                self.wfile.flush()
                note({("stream_aborted" if fin and fin["type"] == "abort" else "stream_done"): rid})
            except (BrokenPipeError, ConnectionResetError):
                note({"stream_cut": rid})
            finally:
                running.remove(rid)

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

    time.sleep(float(os.environ.get("FAKE_BOOT_S") or 0.5))  # a start-up that takes a moment
    if os.environ.get("FAKE_SGLPATCH_LINE"):  # a patched scheduler's start-up line
        print("[2026-11-26 10:00:00 TP0] sglpatch: patches 0001-0008 applied by sglpatch "
              "0.2.0; per-step seq_lens host pull off: every attention backend of the "
              "decode step reads device lengths", flush=True)
    time.sleep(float(os.environ.get("FAKE_START_S") or 0))  # a slow (or hung) start-up
    if not os.environ.get("FAKE_NO_CAPTURE"):  # sglang's CUDA-graph capture and its log lines
        note("capture_begin")
        print("[2026-11-26 10:00:01 TP0] Capture cuda graph begin. This can take up to "
              "several minutes.", flush=True)
        time.sleep(float(os.environ.get("FAKE_CAPTURE_S") or 0))
        print("[2026-11-26 10:00:02 TP0] Capture cuda graph end. Time elapsed: 1.00 s.",
              flush=True)
        note("capture_end")
    http.server.ThreadingHTTPServer.request_queue_size = 256  # a storm connects at once
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    note("up")
    print("[2026-11-26 10:00:03] The server is fired up and ready to roll!", flush=True)
    import signal
    def down(*_):
        note("down")
        os._exit(0)
    signal.signal(signal.SIGTERM, down)
    srv.serve_forever()
''')

BENCH_SERVING = textwrap.dedent('''
    import json, os, sys, time


    def main():
        argv = sys.argv[1:]
        opt = lambda name: argv[argv.index(name) + 1]
        port, conc, n = int(opt("--port")), int(opt("--max-concurrency")), int(opt("--num-prompts"))
        with open(os.environ["FAKE_JOURNAL"], "a") as fh:
            fh.write(json.dumps({"t": time.time(), "port": port, "event": "bench",
                                 "concurrency": conc,
                                 "site": os.environ["PYTHONPATH"].split(os.pathsep)[0],
                                 "body": (opt("--extra-request-body")
                                          if "--extra-request-body" in argv else None),
                                 "cpus": sorted(os.sched_getaffinity(0))}) + "\\n")
        time.sleep(0.05)
        # TPOT that tells the servers apart: 1 ms a concurrency step, +0.5 on 30000s+10
        tpot = 1.0 + conc + (port % 100) / 20.0
        rec = {"median_tpot_ms": tpot, "median_itl_ms": tpot / 2,
               "output_throughput": 100.0 * conc, "accept_length": None, "duration": 1.0,
               "median_ttft_ms": 10.0 * conc, "p99_itl_ms": tpot * 4}
        with open(opt("--output-file"), "a") as fh:
            fh.write(json.dumps(rec) + "\\n")


    # run as `python -m sglang.bench_serving`, or by the harness's bench
    # worker (runpy, run_name "__main__"); importing it runs nothing, as
    # importing sglang's own does
    if __name__ == "__main__":
        main()
''')


def make_site(tmp_path, token_map=False):
    """The stand-in site under tmp_path, and a models dir the harness reuses
    instead of building weights (with token_map: the chain f(t) = t + 1 the
    stand-in follows; needs torch)."""
    site = tmp_path / "site" / "sglang"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "launch_server.py").write_text(LAUNCH_SERVER)
    (site / "bench_serving.py").write_text(BENCH_SERVING)
    models = tmp_path / "work" / "models-tiny"
    meta = {"preset": "tiny", "accept_steps": 3, "draft_accuracy": 0.8, "spec_steps": 3,
            "vocab": 50}
    for draft in ("draft", "draft-eagle"):  # the EAGLE3 draft and the EAGLE (v1) one
        (models / draft).mkdir(parents=True)
        (models / draft / "synthetic.json").write_text(json.dumps(meta))
    if token_map:
        import torch

        torch.save({"f": torch.arange(1, 10001)}, str(models / "token_map.pt"))
    return str(tmp_path / "site")


def run_e2e(tmp_path, *extra, env=None, token_map=False,
            variants=("base", "upstream-0.5.13"), own_sites=()):
    """`e2e.py run` of the builds `variants` on the stand-in; returns the
    journal's events and the results file. The builds of `own_sites` each
    get the stand-in site under a path of their own (a link to it), as
    builds of different sites would."""
    site = make_site(tmp_path, token_map=token_map)

    def site_of(variant):
        if variant not in own_sites:
            return site
        link = tmp_path / f"site-{variant}"
        link.symlink_to(site)
        return str(link)
    journal = tmp_path / "journal.jsonl"
    env = dict(os.environ, FAKE_JOURNAL=str(journal), PYTHONPATH=site, **FAST_PACE, **(env or {}))
    out = tmp_path / "out"
    with port_block() as port_base:
        cmd = [sys.executable, E2E, "run",
               *[x for v in variants for x in ("--variant", f"{v}={site_of(v)}")],
               "--preset", "tiny",
               "--speculative", "EAGLE3", "--piecewise", "default",
               "--concurrency", "1,4", "--repeats", "2", "--min-seconds", "0.5",
               "--greedy-prompts", "3", "--greedy-new-tokens", "4", "--card", "FAKE",
               "--port-base", str(port_base),
               "--work-dir", str(tmp_path / "work"), "--out-dir", str(out), *extra]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    events = [json.loads(x) for x in journal.read_text().splitlines()]
    (path,) = [p for p in out.iterdir() if p.suffix == ".json"]
    return events, json.loads(path.read_text())


def model_configs(tmp_path, preset, names):
    """benchmark/models/make_models.py's config.json of each of NAMES
    ("target", "draft", "draft-eagle") for PRESET, written under tmp_path/NAME;
    returns the module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_models", os.path.join(os.path.dirname(E2E), "models", "make_models.py"))
    mm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mm)
    p = mm.PRESETS[preset]
    make = {"target": mm.target_config, "draft": mm.draft_config,
            "draft-eagle": getattr(mm, "eagle_draft_config", None)}
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(make[name](p)))
    return mm
