"""benchmark/profiling.py: the profile window opens at a number of decoded
tokens, so builds of different speed are profiled at the same sequence
lengths; a request that ends or fails short of that fails the capture at
once instead of profiling the wrong thing."""

import gzip
import http.server
import json
import os
import sys
import threading
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmark"))
import profiling  # noqa: E402


class Fake:
    """A server that streams one token a chunk, `token_s` apart, until
    /start_profile arrives (then the rest at once), and records how many
    tokens each stream had sent at that moment. `stop_after`: each stream
    ends after that many tokens. `meta`: chunks carry sglang's cumulative
    meta_info.completion_tokens (else only output_ids)."""

    def __init__(self, token_s=0.003, stop_after=None, meta=True, first_stops_after=None):
        self.token_s, self.stop_after, self.meta = token_s, stop_after, meta
        self.first_stops_after = first_stops_after  # only the first stream ends early
        self.streams = 0
        self.cut = []
        self.sent = {}
        self.at_profile = None
        self.requests, self.finished = [], {}
        self.profiled = threading.Event()
        self.lock = threading.Lock()
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
                if self.path == "/start_profile":
                    with fake.lock:
                        fake.at_profile = dict(fake.sent)
                        fake.done_at_profile = sum(fake.finished.values())
                    fake.profiled.set()
                    name = os.path.join(req["output_dir"], f"{time.time()}-TP-0.trace.json.gz")
                    with gzip.open(name, "wt") as fh:
                        json.dump({"traceEvents": []}, fh)
                    body = b"Start profiling."
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                assert self.path == "/generate"
                if not req.get("stream"):  # one closed-loop client's request
                    with fake.lock:
                        fake.requests.append(req)
                    time.sleep(fake.token_s)
                    me = threading.get_ident()
                    with fake.lock:
                        fake.finished[me] = fake.finished.get(me, 0) + 1
                    body = json.dumps({"output_ids": [7], "meta_info": {}}).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                k = req["sampling_params"]["max_new_tokens"]
                if fake.stop_after is not None:
                    k = min(k, fake.stop_after)
                with fake.lock:
                    fake.streams += 1
                    if fake.streams == 1 and fake.first_stops_after is not None:
                        k = fake.first_stops_after
                me = threading.get_ident()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    for i in range(k):
                        if not fake.profiled.is_set():
                            time.sleep(fake.token_s)
                        chunk = {"output_ids": [7]}
                        if fake.meta:
                            chunk["meta_info"] = {"completion_tokens": i + 1}
                        # the count moves with the chunk, under the lock /start_profile
                        # reads it with: a client that read this chunk and asked for the
                        # profile at once found the count one short (127 < 128) otherwise
                        with fake.lock:
                            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                            self.wfile.flush()
                            fake.sent[me] = i + 1
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    with fake.lock:
                        fake.cut.append(fake.sent.get(me, 0))

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fast_polls(monkeypatch):
    monkeypatch.setenv("SGLPATCH_BENCH_POLL_S", "0.02")


@pytest.mark.parametrize("meta", [True, False])
def test_the_window_opens_once_every_request_has_decoded_the_lead(tmp_path, fast_polls, meta):
    # at 3 ms a token the lead takes 0.38 s: a window opened at a fixed
    # 0.3 s would find each stream short of it
    fake = Fake(meta=meta)
    try:
        paths, start = profiling.capture(fake.url, str(tmp_path), steps=4, with_stack=False,
                                         concurrency=3, vocab=100, input_len=8, timeout_s=60)
    finally:
        fake.close()
    assert list(paths) == [0] and os.path.exists(paths[0])
    assert len(fake.at_profile) == 3
    assert min(fake.at_profile.values()) >= profiling.LEAD_TOKENS
    assert profiling.LEAD_TOKENS <= start[0] <= start[1]


def test_a_stream_that_ends_short_of_the_lead_fails_the_capture_at_once(tmp_path, fast_polls):
    fake = Fake(token_s=0, stop_after=10)
    t0 = time.time()
    try:
        with pytest.raises(RuntimeError, match="decoded"):
            profiling.capture(fake.url, str(tmp_path), steps=4, with_stack=False,
                              concurrency=2, vocab=100, input_len=8, timeout_s=60)
    finally:
        fake.close()
    assert time.time() - t0 < 30 and fake.at_profile is None


def test_when_one_stream_ends_short_the_others_are_closed_not_left_decoding(
        tmp_path, fast_polls):
    # 2000+ tokens at 3 ms each would keep the other two decoding for
    # seconds into whatever the harness measures next
    fake = Fake(first_stops_after=10)
    try:
        with pytest.raises(RuntimeError, match="decoded"):
            profiling.capture(fake.url, str(tmp_path), steps=4, with_stack=False,
                              concurrency=3, vocab=100, input_len=8, timeout_s=60)
        deadline = time.time() + 5
        while len(fake.cut) < 2 and time.time() < deadline:
            time.sleep(0.05)
    finally:
        fake.close()
    # both cut by the client, long before their 2000 tokens
    assert len(fake.cut) == 2 and max(fake.cut) < 1000


def test_with_arrivals_each_client_has_finished_a_request_before_the_window(tmp_path,
                                                                           fast_polls):
    fake = Fake(token_s=0.01)
    try:
        paths = profiling.capture_arrivals(fake.url, str(tmp_path), steps=4, with_stack=True,
                                           concurrency=3, vocab=100, input_len=8,
                                           output_len=5, timeout_s=60)
        sent = len(fake.requests)
        time.sleep(0.1)
        after = len(fake.requests)
    finally:
        fake.close()
    assert list(paths) == [0] and os.path.exists(paths[0])
    # three clients, each of which had finished a request when the profile
    # was asked for; none sent another after capture_arrivals returned
    assert fake.done_at_profile >= 3 and after == sent
    reqs = fake.requests
    assert {r["sampling_params"]["max_new_tokens"] for r in reqs} == {5}
    assert all(len(r["input_ids"]) == 8 for r in reqs)
    assert len({tuple(r["input_ids"]) for r in reqs}) == len(reqs)  # no prefix-cache hits


def test_with_arrivals_a_failing_request_fails_the_capture(tmp_path, fast_polls):
    fake = Fake(token_s=0)
    fake.httpd.shutdown()  # nothing answers
    fake.httpd.server_close()
    with pytest.raises(RuntimeError, match="finished"):
        profiling.capture_arrivals(fake.url, str(tmp_path), steps=4, with_stack=False,
                                   concurrency=2, vocab=100, timeout_s=5)
