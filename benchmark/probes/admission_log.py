"""How a server admitted new requests while others decoded, and what the
client saw between tokens, from the logs of one call.

At high concurrency a running request's tokens stop while the server runs a
prefill forward for newly arrived ones, so its mean time per output token
holds two parts: the decode steps (the median inter-token latency) and the
prefill forwards that interrupt them (the long tail: P95 and P99 ITL far
above the median, the mean pulled up). How many prefill forwards there are
depends on how many arrivals each one admits, and that depends on the
scheduler loop: one that reaches the admission check sooner after an
arrival admits fewer requests per prefill forward and so runs more of them.

    python3 admission_log.py DIR [--min-running 16] [--out FILE.json]

DIR holds a call's logs at any depth (the unpacked server-logs.tgz of
benchmark/device_compare.sh; with PAIRS, one folder per copy):
`server-<setting>.log` gives rank 0's "Prefill batch" lines (`#new-seq`
requests admitted by a forward while `#running-req` others were running),
counted where at least --min-running were running; `bench-<setting>-c<C>-r<R>.log`
gives bench_serving's ITL and TTFT summary of each point. Prints two
markdown tables and, with --out, writes the rows as JSON.
"""

import argparse
import re
import sys

from decode_log import find_logs, run_probe  # what the log probes share

# [2026-11-26 21:31:48 TP0] Prefill batch, #new-seq: 1, #new-token: 256, ..., #running-req: 30, ...
# A server without tensor parallelism names no rank.
PREFILL_LINE = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: DP\d+)?(?: TP0[^\]]*)?\] Prefill batch, "
    r"#new-seq: (\d+),.*?#running-req: (\d+)")
# find_logs names a bench log <server>-c<C>-r<R> (pair0/base-x-c32-r1)
BENCH_NAME = re.compile(r"(.+)-c(\d+)-r(\d+)")
# bench_serving's summary: "Mean ITL (ms):   4.70"
BENCH_FIELDS = {"mean_itl_ms": "Mean ITL", "median_itl_ms": "Median ITL",
                "p95_itl_ms": "P95 ITL", "p99_itl_ms": "P99 ITL",
                "mean_tpot_ms": "Mean TPOT", "mean_ttft_ms": "Mean TTFT"}


def admissions(path, min_running):
    """Rank 0's prefill forwards with >= min_running requests running: their
    number and the requests they admitted."""
    forwards = requests = 0
    with open(path, errors="replace") as fh:
        for line in fh:
            m = PREFILL_LINE.search(line)
            if m and int(m.group(2)) >= min_running:
                forwards += 1
                requests += int(m.group(1))
    return forwards, requests


def bench_summary(path):
    """The ITL/TTFT fields of one bench_serving log; None without its summary."""
    with open(path, errors="replace") as fh:
        text = fh.read()
    row = {}
    for key, label in BENCH_FIELDS.items():
        m = re.search(rf"^{re.escape(label)} \(ms\):\s+([0-9.]+)", text, re.M)
        if m:
            row[key] = float(m.group(1))
    return row or None


def collect(dir_path, min_running=16):
    servers = []
    for name, path in find_logs(dir_path, "server"):
        forwards, requests = admissions(path, min_running)
        servers.append({"server": name, "min_running": min_running,
                        "prefill_forwards": forwards, "requests_admitted": requests,
                        "requests_per_forward": round(requests / forwards, 3) if forwards else None})
    points = []
    for name, path in find_logs(dir_path, "bench"):
        m = BENCH_NAME.fullmatch(name)
        summary = bench_summary(path)
        if m and summary:
            points.append({"server": m.group(1),
                           "concurrency": int(m.group(2)), "rep": int(m.group(3)), **summary})
    points.sort(key=lambda p: (p["concurrency"], p["rep"], p["server"]))
    return {"servers": servers, "points": points}


def cell(value):
    return "—" if value is None else f"{value:g}"


def table(data):
    out = ["| server | prefill forwards | requests admitted | requests per forward |",
           "|---|---|---|---|"]
    for s in data["servers"]:
        out.append(f"| {s['server']} | {s['prefill_forwards']} | {s['requests_admitted']} | "
                   f"{cell(s['requests_per_forward'])} |")
    if data["servers"]:
        out.insert(0, f"Prefill forwards of rank 0 while at least {data['servers'][0]['min_running']} "
                      "requests were running:\n")
    out += ["", "bench_serving, per point (ms):", "",
            "| server | c | rep | mean TPOT | mean ITL | median ITL | P95 ITL | P99 ITL | mean TTFT |",
            "|---|---|---|---|---|---|---|---|---|"]
    for p in data["points"]:
        out.append(f"| {p['server']} | {p['concurrency']} | {p['rep']} | "
                   + " | ".join(cell(p.get(k)) for k in ("mean_tpot_ms", "mean_itl_ms",
                                                         "median_itl_ms", "p95_itl_ms",
                                                         "p99_itl_ms", "mean_ttft_ms")) + " |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--min-running", type=int, default=16,
                    help="count prefill forwards with at least this many requests running")
    ap.add_argument("--out", help="also write the rows as JSON here")
    a = ap.parse_args(argv)
    return run_probe("admission_log", a.dir, lambda: collect(a.dir, a.min_running), table,
                     a.out, empty=lambda data: not data["servers"] and not data["points"],
                     nothing=f"no server or bench log under {a.dir}")


if __name__ == "__main__":
    sys.exit(main())
