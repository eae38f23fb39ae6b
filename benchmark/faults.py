"""`e2e.py run --faults`: a storm of clients that disconnect, are aborted
or complete, while greedy prompts check the constructed chain; then an idle
pause (sglang's idle self-check crashes a server that leaked a KV slot), a
last greedy check and a liveness check.  One `faults` record per server.

Clients, in threads, against 127.0.0.1 only, standard library only, each
request bounded by the storm's deadline:
- "cut": a streamed long generation, the socket closed after a random
  0.05-2 s (a client that goes away mid-stream);
- "abort": a long generation with a known rid, aborted by POST
  /abort_request {"rid": ...} after a random 0.05-2 s;
- "complete": a streamed long generation read to its end;
- "grammar" (only with --fault-grammar-clients N): a generation under a
  regex only one sequence of tokens meets, GRAMMAR_TOKENS repeated
  GRAMMAR_REPEATS times and then EOS; each step allows one token, so a
  scheduler that builds a step's vocab mask before the grammar holds the
  previous step's tokens lets the wrong token through, and sglang aborts
  the request ("Tokens not accepted"). A grammar client that completes with
  any other output, or is aborted, is an error.
Per streamed request the time to its first byte (the first token); over the
storm the longest time without a request's response ending (from the
storm's start) and the longest time in which no storm client got a byte
from the server (a server that produces nothing for anyone, not only a long
queue): a stall shows in all three.  Beside the clients, the scheduler's
load (GET /v1/loads) once a second, and when it does not answer, whether
the HTTP process alone does (GET /model_info).

Rids are of one length: sglang's Scheduler.abort_request aborts every
queued or running request whose rid starts with the rid it is given, so
aborting "...-1" would also abort "...-10" to "...-19".
"""

import http.client
import json
import random
import re
import socket
import statistics
import threading
import time

import greedy
from server import lines_with

KINDS = ("cut", "abort", "complete")
# The synthetic models' tokenizer (benchmark/models/make_models.py) names id
# i "t<i>" (ids 0-2 are unk, bos and eos), so the regex below is met by these
# ids in this order only. A step of EAGLE drafts tokens that are none of
# them: the grammar's mask refuses most drafts at every verify.
GRAMMAR_TOKENS = (4, 5, 6)
GRAMMAR_REPEATS = 20
EOS_ID = 2


def grammar_regex():
    return "(" + "".join(f"t{t}" for t in GRAMMAR_TOKENS) + "){%d}" % GRAMMAR_REPEATS


def grammar_output():
    """The only output the grammar allows, EOS left out."""
    return list(GRAMMAR_TOKENS) * GRAMMAR_REPEATS


# sglang 0.5.12.post1, Scheduler (srt/managers/scheduler.py), when a decode
# batch does not fit the KV pool:
#   "KV cache pool is full. Retract requests. #retracted_reqs: N, ..."
RETRACT_LINE = "KV cache pool is full. Retract requests."
RETRACTED = re.compile(r"#retracted_reqs: (\d+)")
RANK = re.compile(r"\bTP(\d+)\b")
LOADS_EVERY_S = 1.0
LOADS_TIMEOUT_S = 5.0


class Client:
    """One storm request and what became of it."""

    def __init__(self, i, kind, prompt, new_tokens, delay_s, rid):
        self.i, self.kind, self.prompt, self.delay_s, self.rid = i, kind, prompt, delay_s, rid
        self.new_tokens = new_tokens
        self.outcome = None  # completed | disconnected | aborted | error
        self.error = None
        self.t0 = self.ttfb_s = self.end_t = None  # end_t: its response ended (server side)
        self.arrivals = []  # when bytes of its response arrived
        self.abort_sent = False

    def payload(self, fake_bootstrap):
        if self.kind == "grammar":  # ends at the grammar's EOS, well before the limit
            params = {"temperature": 0.0, "max_new_tokens": len(grammar_output()) + 8,
                      "regex": grammar_regex()}
        else:
            params = {"temperature": 0.0, "max_new_tokens": self.new_tokens,
                      "ignore_eos": True}
        return greedy.mark_fake_bootstrap(
            {"input_ids": self.prompt, "rid": self.rid, "sampling_params": params,
             "stream": self.kind not in ("abort", "grammar")}, fake_bootstrap)


def make_clients(n, vocab, new_tokens, seed, grammar=0, storm=0):
    """n clients of the three kinds in turn, then `grammar` grammar clients.
    Storm k > 0 of a server (e2e.py run --fault-storms) has the same prompts,
    cut and abort times of its own, and rids of its own: a rid sglang has
    seen, or one aborted before, is never sent again."""
    rng = random.Random(seed + 100003 * storm)
    total = n + grammar
    prompts = greedy.make_prompts(total, vocab, seed=seed + 1000)
    width = len(str(max(total - 1, 0)))  # one length: no rid is a prefix of another
    prefix = f"sglpatch-fault-{seed}-" + (f"s{storm}-" if storm else "")
    return [Client(i, KINDS[i % 3] if i < n else "grammar", prompts[i], new_tokens,
                   rng.uniform(0.05, 2.0), f"{prefix}{i:0{width}d}")
            for i in range(total)]


def _connect(port, client, fake_bootstrap, timeout):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = json.dumps(client.payload(fake_bootstrap)).encode()
    client.t0 = time.time()
    try:
        conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
        sock = conn.sock  # the response takes it over when the server closes after it
        return conn, sock, conn.getresponse()
    except BaseException:
        conn.close()
        raise


def stream_end(done, last):
    """The outcome of a stream the server ended, from its last data event
    (bytes) and whether [DONE] came: "completed", or RuntimeError.  sglang
    ends a stream it aborted (abort by rid, out of memory) like any other:
    its finish_reason, then [DONE] (http_server.py, stream_results)."""
    if not done or last is None:
        raise RuntimeError(f"stream ended without [DONE]: {(last or b'')[-200:]!r}")
    try:
        out = json.loads(last)
    except ValueError:
        raise RuntimeError(f"last stream event is not JSON: {last[:200]!r}") from None
    if "error" in out:
        raise RuntimeError(f"stream error: {str(out['error'])[:200]}")
    fin = (out.get("meta_info") or {}).get("finish_reason") or {}
    if fin.get("type") == "abort":
        raise RuntimeError(f"stream finished by an abort: {str(fin.get('message'))[:200]}")
    if not fin:
        raise RuntimeError("last stream event without a finish_reason")
    return "completed"


def _stream(port, c, fake_bootstrap, deadline):
    """A streamed request: read until the cut ("cut") or its end ("complete").
    A cut is a cut whenever it comes, also before the response headers."""
    stop = time.time() + c.delay_s if c.kind == "cut" else deadline
    try:
        conn, sock, resp = _connect(port, c, fake_bootstrap,
                                    max(min(stop, deadline) - time.time(), 0.1))
    except (socket.timeout, TimeoutError):
        if c.kind != "cut":
            raise
        c.outcome = "disconnected"  # _connect closed the socket
        return
    try:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read(300)!r}")
        buf, last, done = b"", None, False
        while True:
            left = min(stop, deadline) - time.time()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                data = resp.read1(65536)
            except (socket.timeout, TimeoutError):
                break
            now = time.time()
            if not data:
                c.end_t = now
                c.outcome = stream_end(done, last)
                return
            c.arrivals.append(now)
            if c.ttfb_s is None:
                c.ttfb_s = now - c.t0
            *events, buf = (buf + data).split(b"\n\n")
            for ev in events:
                if ev == b"data: [DONE]":
                    done = True
                elif ev.startswith(b"data: "):
                    last = ev[6:]
        if c.kind != "cut":
            raise TimeoutError("storm deadline before the stream ended")
        c.outcome = "disconnected"
    finally:  # unread data pending: the peer sees the connection reset
        resp.close()
        conn.close()
        sock.close()


def _abort_after(port, c, done, deadline):
    if done.wait(c.delay_s):
        return  # ended first: nothing to abort
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=max(deadline - time.time(), 0.1))
    try:
        conn.request("POST", "/abort_request", json.dumps({"rid": c.rid}).encode(),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        c.abort_sent = resp.status == 200
        if not c.abort_sent:
            c.error = f"/abort_request HTTP {resp.status}"
    except Exception as e:
        c.error = f"/abort_request: {type(e).__name__}: {e}"
    finally:
        conn.close()


def _aborted(port, c, fake_bootstrap, deadline):
    done = threading.Event()
    timer = threading.Thread(target=_abort_after, args=(port, c, done, deadline), daemon=True)
    timer.start()
    conn = None
    try:
        conn, _, resp = _connect(port, c, fake_bootstrap, max(deadline - time.time(), 0.1))
        body = resp.read()
        c.end_t = time.time()
    finally:
        done.set()
        if conn is not None:
            conn.close()
    timer.join(max(deadline - time.time(), 0.1))
    if resp.status == 200:
        fin = (json.loads(body).get("meta_info") or {}).get("finish_reason") or {}
        c.outcome = "aborted" if fin.get("type") == "abort" else "completed"
    elif c.abort_sent:  # an abort sglang answers with an error status
        c.outcome = "aborted"
    else:
        raise RuntimeError(f"HTTP {resp.status}: {body[:300]!r}")


def grammar_outcome(status, body):
    """"completed" for the grammar's own output, or RuntimeError."""
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {body[:300]!r}")
    out = json.loads(body)
    fin = (out.get("meta_info") or {}).get("finish_reason") or {}
    if fin.get("type") == "abort":
        raise RuntimeError(f"finished by an abort: {str(fin.get('message'))[:200]}")
    ids = list(out.get("output_ids") or [])
    if ids and ids[-1] == EOS_ID:
        ids.pop()
    want = grammar_output()
    if ids != want:
        at = next((k for k, (a, b) in enumerate(zip(ids, want)) if a != b),
                  min(len(ids), len(want)))
        raise RuntimeError(f"output leaves the grammar at token {at} of {len(ids)} "
                           f"({ids[at:at + 4]}, finish {fin.get('type')})")
    return "completed"


def _grammar(port, c, fake_bootstrap, deadline):
    conn, _, resp = _connect(port, c, fake_bootstrap, max(deadline - time.time(), 0.1))
    try:
        body = resp.read()
        c.end_t = time.time()
    finally:
        conn.close()
    c.outcome = grammar_outcome(resp.status, body)


def _run_client(port, c, fake_bootstrap, deadline):
    run = {"abort": _aborted, "grammar": _grammar}.get(c.kind, _stream)
    try:
        run(port, c, fake_bootstrap, deadline)
    except Exception as e:
        c.outcome = "error"
        c.error = c.error or f"{c.kind} #{c.i}: {type(e).__name__}: {e}"[:300]


def _get_json(port, path, timeout):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}")
        return json.loads(body)
    finally:
        conn.close()


def poll_loads(port, t0, stop, samples):
    """Until `stop` is set, every LOADS_EVERY_S: [s since t0, s the scheduler
    took to answer GET /v1/loads, running, waiting, used KV tokens] (summed
    over DP ranks).  sglang's scheduler answers it between two batches, so a
    scheduler stuck in one answers late or not at all; then the answer slot
    says whether the HTTP process alone answers (GET /model_info): "http
    only" or "no answer", and the counts are None."""
    while not stop.is_set():
        t = time.time()
        try:
            loads = _get_json(port, "/v1/loads", LOADS_TIMEOUT_S)["loads"]
            samples.append([round(t - t0, 2), round(time.time() - t, 3),
                            *(sum(x[k] for x in loads) for k in
                              ("num_running_reqs", "num_waiting_reqs", "num_used_tokens"))])
        except Exception:
            try:
                _get_json(port, "/model_info", LOADS_TIMEOUT_S)
                who = "http only"
            except Exception:
                who = "no answer"
            samples.append([round(t - t0, 2), who, None, None, None])
        stop.wait(max(LOADS_EVERY_S - (time.time() - t), 0))


def storm(port, clients, deadline_s, fake_bootstrap=False, loads=True):
    """Run all clients at once (and, with `loads`, poll_loads beside them);
    returns the storm's summary fields."""
    t0 = time.time()
    deadline = t0 + deadline_s
    samples, stop = [], threading.Event()
    poller = threading.Thread(target=poll_loads, args=(port, t0, stop, samples), daemon=True)
    if loads:
        poller.start()
    threads = [threading.Thread(target=_run_client, args=(port, c, fake_bootstrap, deadline),
                                daemon=True) for c in clients]
    for th in threads:
        th.start()
    for th in threads:
        th.join(max(deadline + 5 - time.time(), 0))
    t_end = time.time()
    stop.set()
    if loads:
        poller.join(LOADS_TIMEOUT_S * 2 + 1)
    for c in clients:
        if c.outcome is None:
            c.outcome, c.error = "error", f"{c.kind} #{c.i}: still running at the storm deadline"
    ends = sorted(c.end_t for c in clients if c.end_t is not None)
    errors = [c.error for c in clients if c.outcome == "error"]
    ttfb = [c.ttfb_s for c in clients if c.ttfb_s is not None]  # streamed requests
    # server output any client saw; the storm's end closes the last gap
    gap, a, b = gap_window([t0, t_end] + ends + [t for c in clients for t in c.arrivals])
    answer_s = [x[1] for x in samples if not isinstance(x[1], str)]
    return {
        "clients": len(clients),
        "completed": sum(c.outcome == "completed" for c in clients),
        "disconnected": sum(c.outcome == "disconnected" for c in clients),
        "aborted": sum(c.outcome == "aborted" for c in clients),
        "abort_requests_sent": sum(c.abort_sent for c in clients),
        "grammar_clients": sum(c.kind == "grammar" for c in clients),
        "grammar_exact": sum(c.kind == "grammar" and c.outcome == "completed" for c in clients),
        "errors": len(errors),
        "error_messages": errors[:5],
        "storm_s": round(t_end - t0, 3),
        "max_silence_s": round(max_gap([t0] + ends), 3),
        "max_output_gap_s": round(gap, 3),
        "output_gap_window_s": [round(a - t0, 2), round(b - t0, 2)],
        "max_ttfb_s": round(max(ttfb), 3) if ttfb else None,
        "median_ttfb_s": round(statistics.median(ttfb), 3) if ttfb else None,
        "streams_cut_before_first_byte": sum(c.outcome == "disconnected" and c.ttfb_s is None
                                             for c in clients),
        "loads_max_answer_s": max(answer_s) if answer_s else None,
        "loads_unanswered": len(samples) - len(answer_s),
        "loads": samples if loads else None,
    }


def max_gap(times):
    """Longest time between consecutive instants (0 for fewer than two)."""
    return gap_window(times)[0]


def gap_window(times):
    """(longest time between consecutive instants, its start, its end);
    (0.0, None, None) for fewer than two instants."""
    times = sorted(times)
    return max(((b - a, a, b) for a, b in zip(times, times[1:])), default=(0.0, None, None))


def count_retractions(log_path):
    """(retraction log lines, requests retracted) in a server log, rank 0's
    lines only (each tensor-parallel rank logs its own)."""
    found = lines_with(log_path, RETRACT_LINE)
    if found is None:
        return None, None
    lines = reqs = 0
    for line in found:
        rank = RANK.search(line)
        if rank and rank.group(1) != "0":
            continue
        lines += 1
        n = RETRACTED.search(line)
        reqs += int(n.group(1)) if n else 0
    return lines, reqs
