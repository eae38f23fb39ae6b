"""`e2e.py run --mixed-load`: new prompts prefill on one DP rank while the
other ranks decode, every output checked against the constructed chain.

Per round: `--mix-decodes` long greedy generations per DP rank, streamed,
each pinned to its rank with sglang's `routed_dp_rank` (0.5.12.post1's DP
controller sends such a request to that rank, whatever its balancing
method), `--mix-decode-tokens` new tokens each. Once every one of them has
streamed a token (each is then decoding), new prompts of `--mix-prompt-len`
tokens (`--mix-new-tokens` new tokens each) go one at a time, pinned to the
ranks in turn, for as long as no long generation has ended. So while a new
prompt prefills on its rank, every other rank has its long generations
decoding. The record counts as `overlapped` each prompt for which the
client's clock shows it: every long generation of the other ranks had
streamed a token before the prompt was sent, and streamed another after
its answer came. Rounds repeat until `--mix-prompts` prompts overlapped, or
`--mix-deadline-s`.
Without DP (--dp 1) the same load runs on the one scheduler: each prompt's
prefill comes between decode steps of the long generations.

Standard library only; against 127.0.0.1.
"""

import http.client
import json
import threading
import time

import greedy
from server import http_json

FIRST_TOKEN_TIMEOUT_S = 120.0  # the long generations of a round must all be decoding by then


def payload(prompt, new_tokens, rank, stream):
    p = greedy.greedy_body(prompt, new_tokens, stream=stream)
    if rank is not None:
        p["routed_dp_rank"] = rank
    return p


def stream_ids(chunks):
    """The output ids of a streamed /generate from its data events' output_ids
    lists: sglang 0.5.12.post1 streams the whole output up to that token in each event
    (unless --incremental-streaming-output), other servers only the new ids.
    Whole-so-far when each event's list begins with the one before it."""
    if not chunks:
        return []
    cumulative = len(chunks) > 1 and all(
        len(b) >= len(a) and b[:len(a)] == a for a, b in zip(chunks, chunks[1:]))
    if cumulative:
        return list(chunks[-1])
    return [t for c in chunks for t in c]


class LongGeneration(threading.Thread):
    """One long streamed greedy generation pinned to a DP rank: when its
    first token came (t_first), when each data event came (arrivals), when
    it ended (t_end), its output ids."""

    def __init__(self, port, prompt, new_tokens, rank, timeout):
        super().__init__(daemon=True)
        self.port, self.prompt, self.new_tokens, self.rank = port, prompt, new_tokens, rank
        self.timeout = timeout
        self.t_sent = self.t_first = self.t_end = None
        self.arrivals = []
        self.ids, self.error = [], None
        self.started_decoding = threading.Event()

    def run(self):
        chunks = []
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            body = json.dumps(payload(self.prompt, self.new_tokens, self.rank, True)).encode()
            self.t_sent = time.time()
            conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.read(300)!r}")
            buf = b""
            while True:
                data = resp.read1(65536)
                if not data:
                    break
                *events, buf = (buf + data).split(b"\n\n")
                for ev in events:
                    if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                        continue
                    out = json.loads(ev[6:])
                    if "error" in out:
                        raise RuntimeError(f"stream error: {str(out['error'])[:200]}")
                    if out.get("output_ids"):
                        chunks.append(out["output_ids"])
                        self.arrivals.append(time.time())
                        if self.t_first is None:
                            self.t_first = time.time()
                            self.started_decoding.set()
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"[:300]
        finally:
            self.t_end = time.time()
            self.ids = stream_ids(chunks)
            self.started_decoding.set()  # no waiter hangs on a failed request
            conn.close()


def new_prompt(port, prompt, new_tokens, rank, timeout):
    """One greedy /generate of a new prompt on `rank`: (sent, answered, ids)."""
    t_sent = time.time()
    out = http_json(f"http://127.0.0.1:{port}/generate",
                    payload(prompt, new_tokens, rank, False), timeout=timeout)
    return t_sent, time.time(), out["output_ids"]


def overlapped(longs, rank, t_sent, t_done):
    """Whether every long generation of another rank (with one rank: of
    that rank) streamed a token before `t_sent` and another after `t_done`:
    it decoded all the while the prompt was served."""
    others = [g for g in longs if g.rank != rank] or longs
    return bool(others) and all(
        g.t_first is not None and g.t_first < t_sent and g.arrivals[-1] > t_done
        for g in others)


def off_chain(prompt, ids, fmap):
    """1 when `ids` leave the chain the weights encode from `prompt`, else 0."""
    want = greedy.expected_chain([prompt], fmap, len(ids))[0]
    return int(ids != want)


def run(port, dp, vocab, fmap, decodes=4, decode_tokens=2048, want=16, prompt_len=1536,
        new_tokens=16, deadline_s=90.0, seed=7, log=print):
    """The mixed load against one server; returns its record's fields."""
    t0 = time.time()
    deadline = t0 + deadline_s
    ranks = list(range(dp)) if dp > 1 else [None]
    rec = {"dp_ranks": len(ranks), "rounds": 0, "long_generations": 0,
           "long_new_tokens": decode_tokens, "long_off_chain": None, "long_errors": 0,
           "prompts": 0, "prompt_len": prompt_len, "prompt_new_tokens": new_tokens,
           "prompts_off_chain": None, "prompt_errors": 0, "overlapped": 0,
           "prompts_per_rank": {}, "errors": []}
    long_off = prompt_off = 0
    n = 0  # prompts made in earlier rounds (each round's prompts are new ones)
    while rec["overlapped"] < want and time.time() < deadline:
        rec["rounds"] += 1
        long_prompts = greedy.make_prompts(decodes * len(ranks), vocab,
                                           seed=seed + 1000 * rec["rounds"])
        longs = [LongGeneration(port, p, decode_tokens, ranks[i % len(ranks)],
                                timeout=max(deadline - time.time(), 1) + 60)
                 for i, p in enumerate(long_prompts)]
        for g in longs:
            g.start()
        wait_until = min(deadline, time.time() + FIRST_TOKEN_TIMEOUT_S)
        for g in longs:
            g.started_decoding.wait(max(wait_until - time.time(), 0))
        if not all(g.t_first is not None for g in longs):
            rec["errors"].append(f"round {rec['rounds']}: {sum(g.t_first is None for g in longs)}"
                                 f" of {len(longs)} long generations streamed no token")
        i, served = 0, []  # served: (rank, sent, answered) of the round's prompts
        while (rec["overlapped"] + len(served) < want and time.time() < deadline
               and all(g.t_first is not None for g in longs)
               and not any(g.t_end is not None for g in longs)):
            rank = ranks[i % len(ranks)]
            prompt = greedy.make_prompts(1, vocab, seed=seed + n, min_len=prompt_len,
                                         max_len=prompt_len)[0]
            n += 1
            i += 1
            rec["prompts"] += 1
            key = "all" if rank is None else str(rank)
            rec["prompts_per_rank"][key] = rec["prompts_per_rank"].get(key, 0) + 1
            try:
                t_sent, t_done, ids = new_prompt(port, prompt, new_tokens, rank,
                                                 timeout=max(deadline - time.time(), 1) + 60)
            except Exception as e:
                rec["prompt_errors"] += 1
                rec["errors"].append(f"prompt {n - 1} (rank {key}): {type(e).__name__}: {e}"[:300])
                continue
            served.append((rank, t_sent, t_done))
            if fmap:
                prompt_off += off_chain(prompt, ids, fmap)
        for g in longs:
            g.join(max(deadline - time.time(), 0) + 60)
        rec["overlapped"] += sum(overlapped(longs, *x) for x in served)
        round_errors = len(rec["errors"])
        for g in longs:
            rec["long_generations"] += 1
            if g.error or g.is_alive():
                rec["long_errors"] += 1
                rec["errors"].append(f"long generation (rank {g.rank}): "
                                     f"{g.error or 'did not end'}")
            elif fmap:
                long_off += off_chain(g.prompt, g.ids, fmap) or int(len(g.ids) != decode_tokens)
        log(f"  mixed load round {rec['rounds']}: {rec['prompts']} prompts in all, "
            f"{rec['overlapped']} overlapped")
        if not served:  # another round would fare no better
            if len(rec["errors"]) == round_errors:
                rec["errors"].append(f"round {rec['rounds']}: the long generations ended "
                                     "before a prompt was answered (raise --mix-decode-tokens)")
            break
    if fmap:
        rec["long_off_chain"], rec["prompts_off_chain"] = long_off, prompt_off
    rec["mixed_s"] = round(time.time() - t0, 1)
    return rec
