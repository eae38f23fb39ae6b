"""Greedy-equivalence check: speculative output ids == plain decoding's.

The same prompts (random token ids, fixed seed, varied lengths so the batch
mixes shapes) go to every server in one batched /generate call at
temperature 0; outputs are compared token for token, per prompt, reporting
the first differing position.  Standard library only.
"""

import random
import threading

from server import http_json


# sglang's marker for "no real prefill server": a decode-only server with the
# fake KV transfer needs it on each request (0.5.12.post1 fails to build a
# bootstrap address from a request without a host)
FAKE_BOOTSTRAP_HOST = "2.2.2.2"


def mark_fake_bootstrap(payload, fake_bootstrap=True):
    """`payload`, a request's body, with the fake transfer's marker where
    `fake_bootstrap`; a bootstrap host the body names already is kept."""
    if fake_bootstrap:
        payload.setdefault("bootstrap_host", FAKE_BOOTSTRAP_HOST)
    return payload


def greedy_body(input_ids, new_tokens, fake_bootstrap=False, **fields):
    """The body of a greedy /generate request (temperature 0, exactly
    new_tokens tokens: EOS ignored) for one prompt or a batch of them, with
    any other top-level `fields` (stream, return_logprob, ...) and, where
    fake_bootstrap, the fake transfer's marker."""
    return mark_fake_bootstrap({
        "input_ids": input_ids, **fields,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": new_tokens,
                            "ignore_eos": True},
    }, fake_bootstrap)


def decode_in_background(url, prompts, new_tokens, timeout=600, fake_bootstrap=False):
    """One greedy /generate request per prompt, each in its own (started)
    thread, so that len(prompts) requests decode at once.  Returns the
    threads and the list their exceptions are appended to: the caller joins
    the threads and decides what a failure means. fake_bootstrap: each
    request carries the marker a decode-only server with the fake transfer
    needs (as generate's)."""
    errors = []

    def one(p):
        try:
            http_json(url + "/generate", greedy_body(p, new_tokens, fake_bootstrap),
                      timeout=timeout)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in prompts]
    for th in threads:
        th.start()
    return threads, errors


def make_prompts(n, vocab, seed=0, min_len=16, max_len=160):
    rng = random.Random(seed)
    # ids 0-2 are the synthetic tokenizer's special tokens: keep them out
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(min_len, max_len))]
            for _ in range(n)]


def generate(url, prompts, new_tokens, fake_bootstrap=False):
    """One batched request; returns (output id lists, accept length or None)."""
    out = http_json(url + "/generate", greedy_body(prompts, new_tokens, fake_bootstrap),
                    timeout=900)
    ids = [o["output_ids"] for o in out]
    tokens = sum(o["meta_info"].get("completion_tokens", 0) for o in out)
    verify = sum(o["meta_info"].get("spec_verify_ct", 0) for o in out)
    return ids, (tokens / verify if verify else None)


def top_logprobs(url, prompts, new_tokens, k, fake_bootstrap=False):
    """The prompts' greedy outputs once more, with the logprobs of the k most
    likely tokens at every output position: per prompt, per position,
    {token id: logprob}. A kernel that read other KV would leave the
    synthetic models' greedy tokens as they are (their margin), but not
    these."""
    payload = greedy_body(prompts, new_tokens, fake_bootstrap, return_logprob=True,
                          top_logprobs_num=k)
    out = http_json(url + "/generate", payload, timeout=900)
    # sglang: each position a list of (logprob, token id, text or None); a
    # position it has none for counts as empty
    return [[{int(e[1]): float(e[0]) for e in (position or ()) if e[0] is not None}
             for position in o["meta_info"].get("output_top_logprobs") or ()] for o in out]


def logprob_max_diff(a, b):
    """The largest |logprob difference| between two top_logprobs results over
    the tokens both name at the same prompt and position, to 6 places; None
    when they name none in common."""
    diffs = [abs(pa[t] - pb[t])
             for qa, qb in zip(a, b) for pa, pb in zip(qa, qb) for t in pa.keys() & pb.keys()]
    return round(max(diffs), 6) if diffs else None


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(outputs, reference):
    """Per-prompt mismatches of `outputs` against `reference`."""
    bad = []
    for i, (a, b) in enumerate(zip(outputs, reference)):
        pos = first_difference(a, b)
        if pos is not None:
            bad.append({"prompt": i, "first_diff": pos,
                        "got": a[pos:pos + 4], "want": b[pos:pos + 4]})
    return bad


def expected_chain(prompts, fmap, new_tokens):
    """What the constructed token function f says greedy decoding gives."""
    out = []
    for p in prompts:
        seq, t = [], p[-1]
        for _ in range(new_tokens):
            t = fmap[t]
            seq.append(t)
        out.append(seq)
    return out


def prompts_off_own_chain(outputs, fmap):
    """Outputs in which some token is not f(the token before it).

    Unlike the chain from the prompt, this holds however the first token was
    made: a disaggregated decode server with the fake transfer gets its
    first token and KV from no real prefill, but must then follow f."""
    return sum(1 for ids in outputs
               if any(fmap[a] != b for a, b in zip(ids, ids[1:])))
