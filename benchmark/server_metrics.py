"""Where a bench point's first-token time went, from the server's own
Prometheus histograms: read before and after the point, so their
differences hold only that point's requests.

A server launched with `--enable-metrics` (every build alike: 0.5.12.post1
code the series does not touch, and upstream releases keep the names)
serves `/metrics`. A point's sample then gets, as means in ms over its
requests (bench_serving's one warm-up request among them):

- `ttft`: `sglang:time_to_first_token_seconds`, from the tokenizer
  manager's receipt of the request to its first output there. The client's
  mean TTFT minus this is the HTTP server and the client.
- `request_process`: the scheduler's receipt to the waiting queue.
- `queue`: `sglang:queue_time_seconds`, the waiting queue to the prefill
  forward that takes the request in.
- `prefill_forward`: that forward's start to the scheduler's processing of
  its result.

Server TTFT minus the three scheduler stages is the way in (tokenizer, IPC
to the scheduler) and the way out (the detokenizer, back to the tokenizer
manager). Each histogram sums over its label sets (TP ranks, DP workers):
the means hold, and a scheduler stage's request count is per rank summed.
"""

import re
import urllib.request

# (metric, stage label or None) -> the key a sample records
FIELDS = {
    ("sglang:time_to_first_token_seconds", None): "ttft",
    ("sglang:per_stage_req_latency_seconds", "request_process"): "request_process",
    ("sglang:queue_time_seconds", None): "queue",
    ("sglang:per_stage_req_latency_seconds", "prefill_forward"): "prefill_forward",
}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)_(sum|count)(?:\{(.*)\})?\s+(\S+)")
STAGE = re.compile(r'(?:^|,)\s*stage="([^"]*)"')


def parse(text):
    """{(metric, stage or None): [sum, count]} of the histograms FIELDS
    names, summed over their other labels."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        name, part, labels, value = m.groups()
        stage = STAGE.search(labels or "")
        key = (name, stage.group(1) if stage else None)
        if key not in FIELDS:
            continue
        out.setdefault(key, [0.0, 0.0])[part == "count"] += float(value)
    return out


def scrape(url, timeout=10):
    """parse() of the /metrics of the server at `url` (Server.url)."""
    with urllib.request.urlopen(url + "/metrics", timeout=timeout) as r:
        return parse(r.read().decode("utf-8", "replace"))


def point_means(before, after):
    """{key: mean ms} over the requests observed between two scrapes, and
    {key + "_requests": count}; a histogram with none is left out."""
    out = {}
    for key, name in FIELDS.items():
        s1, n1 = after.get(key, (0.0, 0.0))
        s0, n0 = before.get(key, (0.0, 0.0))
        if n1 - n0 > 0:
            out[name] = round(1000.0 * (s1 - s0) / (n1 - n0), 3)
            out[name + "_requests"] = int(n1 - n0)
    return out


def wanted(server_args):
    """Whether a run's servers serve the histograms."""
    return "--enable-metrics" in server_args
