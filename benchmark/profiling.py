"""Take a torch-profiler trace of a running sglang server in steady decode,
or (capture_arrivals) while requests arrive and finish as under a bench.

`capture()` keeps `concurrency` long greedy requests decoding, streamed,
and once every one of them has decoded LEAD_TOKENS tokens asks the server
for a profile of the next `steps` scheduler forwards through its own
`/start_profile` endpoint (sglang stops the profiler itself after that many
forwards and writes one `<id>-TP-<rank>.trace.json.gz` per tensor-parallel
rank into `out_dir`), waits until every rank's trace is complete and returns
their paths by rank.  benchmark/trace_steps.py reads them.  Standard library
only.

The window opens at a number of decoded tokens, not at a time after the
requests start: attention kernels take longer as the sequences grow, so a
window opened at a fixed time would find a faster build further into its
requests, and charge it GPU time that is only the longer sequences'.

`capture_arrivals()` profiles what a steady-decode window leaves out: the
iterations that admit and prefill new requests, where a first token's
time goes. Its `concurrency` clients each send requests one after
another, and the window opens once each has finished one.
"""

import glob
import gzip
import json
import os
import re
import threading
import time
import urllib.request

import greedy
import pace
from server import http_json

# prefill and the first decode steps happen before the window: it opens
# once every request has decoded this many tokens (the same sequence lengths
# in every build, whatever its speed)
LEAD_TOKENS = 128
TOKENS_PER_STEP_MAX = 4  # EAGLE3 with 3 draft steps: at most 4 tokens a forward


def _trace_done(path):
    """Whether the trace decompresses to its end. An empty file is one
    whose writer has not flushed its first block yet, not a trace."""
    try:
        size = 0
        with gzip.open(path, "rb") as fh:
            while True:
                block = fh.read(1 << 20)
                if not block:
                    break
                size += len(block)
        return size > 0
    except (OSError, EOFError):
        return False  # still being written


def trace_rank(path):
    """The tensor-parallel rank a trace file is from (sglang names it -TP-<rank>)."""
    m = re.search(r"-TP-(\d+)", os.path.basename(path))
    return int(m.group(1)) if m else 0


def wait_for_traces(out_dir, before, ranks, timeout_s):
    """{rank: path} once all `ranks` ranks' new traces are complete."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        new = sorted(set(glob.glob(os.path.join(out_dir, "*.trace.json.gz"))) - before)
        by_rank = {trace_rank(p): p for p in new}
        if len(by_rank) >= ranks and all(_trace_done(p) for p in by_rank.values()):
            return dict(sorted(by_rank.items()))
        time.sleep(pace.poll_s(1))
    raise TimeoutError(f"no complete trace of all {ranks} ranks in {out_dir} after {timeout_s}s")


class Progress:
    """Tokens each streamed request has decoded, and a wait for all
    of them to reach a count (or for one to fail or end short of it)."""

    def __init__(self, n):
        self.tokens = [0] * n
        self.ended = [False] * n
        self._cond = threading.Condition()

    def update(self, i, tokens=None, ended=False):
        with self._cond:
            if tokens is not None:
                self.tokens[i] = max(self.tokens[i], tokens)
            self.ended[i] = self.ended[i] or ended
            self._cond.notify_all()

    def wait_all(self, tokens, timeout_s):
        """True once every request has decoded `tokens` tokens; False if one
        ended (finished or failed) short of that, or after timeout_s."""
        deadline = time.time() + timeout_s
        with self._cond:
            while True:
                if all(t >= tokens for t in self.tokens):
                    return True
                if any(e and t < tokens for e, t in zip(self.ended, self.tokens)):
                    return False
                left = deadline - time.time()
                if left <= 0:
                    return False
                self._cond.wait(left)

    def snapshot(self):
        with self._cond:
            return list(self.tokens)


def stream_in_background(url, prompts, new_tokens, timeout_s, fake_bootstrap=False):
    """One streamed greedy /generate request per prompt, each in its own
    (started) thread. Returns the threads, the list their exceptions are
    appended to, their Progress (the tokens each has decoded, from the
    cumulative meta_info.completion_tokens of sglang's chunks or, in a
    chunk without it, its output_ids counted as new ones) and an event
    that, set, makes each close its stream at its next chunk: sglang
    aborts a request whose client went away."""
    errors = []
    progress = Progress(len(prompts))
    stop = threading.Event()

    def one(i, p):
        body = greedy.greedy_body(p, new_tokens, fake_bootstrap, stream=True)
        req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        seen = 0
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                for line in resp:
                    if stop.is_set():
                        break
                    line = line.strip()
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    done = (chunk.get("meta_info") or {}).get("completion_tokens")
                    seen = done if done is not None else seen + len(chunk.get("output_ids") or ())
                    progress.update(i, seen)
        except Exception as e:
            errors.append(e)
        finally:
            progress.update(i, ended=True)

    threads = [threading.Thread(target=one, args=(i, p), daemon=True)
               for i, p in enumerate(prompts)]
    for th in threads:
        th.start()
    return threads, errors, progress, stop


def arrive_in_background(url, clients, vocab, input_len, output_len, timeout_s,
                         fake_bootstrap=False):
    """`clients` closed-loop clients, each in its own (started) thread,
    sending greedy /generate requests of input_len random ids and
    output_len new tokens one after another, a new prompt each time (no
    prefix-cache hits), until the returned stop event is set: requests
    arrive, prefill and finish all the time, as under bench_serving at that
    concurrency. Returns the threads, the list their exceptions are
    appended to, the stop event and a Progress of each client's finished
    requests."""
    errors = []
    stop = threading.Event()
    progress = Progress(clients)

    def client(i):
        k = 0
        try:
            while not stop.is_set():
                prompt = greedy.make_prompts(1, vocab, seed=1000 * i + k, min_len=input_len,
                                             max_len=input_len)[0]
                body = greedy.greedy_body(prompt, output_len, fake_bootstrap)
                http_json(url + "/generate", body, timeout=timeout_s)
                k += 1
                progress.update(i, k)
        except Exception as e:
            errors.append(e)
        finally:
            progress.update(i, ended=True)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for th in threads:
        th.start()
    return threads, errors, stop, progress


def _start_profile(url, out_dir, steps, with_stack):
    try:
        http_json(url + "/start_profile", {
            "output_dir": out_dir, "num_steps": steps, "record_shapes": False,
            "activities": ["CPU", "GPU"] if with_stack else ["GPU"],
            "with_stack": with_stack}, timeout=60)
    except ValueError:
        pass  # sglang answers "Start profiling." in plain text, not JSON


def capture_arrivals(url, out_dir, steps, with_stack, concurrency, vocab, input_len=256,
                     output_len=256, timeout_s=300, ranks=1, fake_bootstrap=False):
    """Profile `steps` forwards while `concurrency` clients send requests
    one after another (arrive_in_background): prefills, their first tokens
    and the decode steps beside them, in the mix bench_serving makes. The
    window opens once every client has finished one request, so their
    requests are at different points when it does. Returns {rank: trace
    path}."""
    os.makedirs(out_dir, exist_ok=True)
    before = set(glob.glob(os.path.join(out_dir, "*.trace.json.gz")))
    threads, errors, stop, progress = arrive_in_background(
        url, concurrency, vocab, input_len, output_len, timeout_s, fake_bootstrap)
    try:
        if not progress.wait_all(1, timeout_s):
            why = f": {errors[0]}" if errors else ""
            raise RuntimeError(f"the clients had finished {progress.snapshot()} requests, "
                               f"not one each, when the profile was due{why}")
        _start_profile(url, out_dir, steps, with_stack)
        paths = wait_for_traces(out_dir, before, ranks, timeout_s)
    finally:
        stop.set()
        for th in threads:
            th.join(timeout_s)
    if errors:
        raise RuntimeError(f"a request failed during the profile: {errors[0]}")
    return paths


def capture(url, out_dir, steps, with_stack, concurrency, vocab, input_len=256,
            timeout_s=300, ranks=1, fake_bootstrap=False):
    """Profile `steps` forwards while `concurrency` requests decode, from
    the moment every one of them has decoded LEAD_TOKENS tokens. Returns
    ({rank: trace path}, [fewest, most] tokens the requests had decoded
    when the profile was asked for).

    with_stack=False records GPU activity and CUDA runtime calls only (no
    Python tracer: step times stay close to an unprofiled server);
    with_stack=True adds CPU ops and every Python frame (slow; for shares).
    """
    os.makedirs(out_dir, exist_ok=True)
    before = set(glob.glob(os.path.join(out_dir, "*.trace.json.gz")))
    # enough tokens that every request still decodes when the window ends,
    # however slowly the profiled steps run
    new_tokens = steps * TOKENS_PER_STEP_MAX + 2000
    prompts = greedy.make_prompts(concurrency, vocab, seed=321, min_len=input_len,
                                  max_len=input_len)
    threads, errors, progress, stop = stream_in_background(
        url, prompts, new_tokens, timeout_s, fake_bootstrap=fake_bootstrap)
    try:
        if not progress.wait_all(LEAD_TOKENS, timeout_s):
            why = f": {errors[0]}" if errors else ""
            raise RuntimeError(f"the requests had decoded {progress.snapshot()} tokens, not "
                               f"{LEAD_TOKENS} each, when the profile was due{why}")
        tokens = progress.snapshot()
        _start_profile(url, out_dir, steps, with_stack)
        paths = wait_for_traces(out_dir, before, ranks, timeout_s)
    except BaseException:
        stop.set()  # no request decodes on into the measurements after this one
        for th in threads:
            th.join(5)
        raise
    for th in threads:
        th.join(timeout_s)
    if errors:
        raise RuntimeError(f"decode request failed during the profile: {errors[0]}")
    return paths, [min(tokens), max(tokens)]
