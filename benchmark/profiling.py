"""Take a torch-profiler trace of a running sglang server in steady decode.

`capture()` keeps `concurrency` long greedy requests decoding, asks the
server for a profile of the next `steps` scheduler forwards through its own
`/start_profile` endpoint (sglang stops the profiler itself after that many
forwards and writes one `<id>-TP-<rank>.trace.json.gz` per tensor-parallel
rank into `out_dir`), waits until every rank's trace is complete and returns
their paths by rank.  benchmark/trace_steps.py reads them.  Standard library
only.
"""

import glob
import gzip
import os
import re
import time

import greedy
import pace
from server import http_json

LEAD_S = 0.3  # prefill and the first decode steps happen before the window
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


def capture(url, out_dir, steps, with_stack, concurrency, vocab, input_len=256,
            timeout_s=300, ranks=1, fake_bootstrap=False):
    """Profile `steps` forwards while `concurrency` requests decode.

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
    threads, errors = greedy.decode_in_background(url, prompts, new_tokens, timeout_s,
                                                  fake_bootstrap=fake_bootstrap)
    time.sleep(LEAD_S)
    try:
        http_json(url + "/start_profile", {
            "output_dir": out_dir, "num_steps": steps, "record_shapes": False,
            "activities": ["CPU", "GPU"] if with_stack else ["GPU"],
            "with_stack": with_stack}, timeout=60)
    except ValueError:
        pass  # sglang answers "Start profiling." in plain text, not JSON
    paths = wait_for_traces(out_dir, before, ranks, timeout_s)
    for th in threads:
        th.join(timeout_s)
    if errors:
        raise RuntimeError(f"decode request failed during the profile: {errors[0]}")
    return paths
