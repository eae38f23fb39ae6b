"""Where each request's time before its first forward went, per build, from
sglang's own per-request time stats in the server logs of one call.

A call whose servers all run with `--server-arg=--enable-request-time-stats-logging`
(every build alike: 0.5.12.post1 code the series does not touch) has rank
0's scheduler log one line per finished request:

    [...] ReqTimeStats(rid=..., input_len=256, cached_input_len=0, output_len=256,
    type=unified): queue_duration=1.23ms, forward_duration=456.78ms, entry_time=...

An aggregated server's `queue_duration` runs from the request's entry into
the waiting queue to the prefill forward that takes it in. A decode-only
server's line splits the time before its first forward into
`bootstrap_duration` (from its entry into the preallocation queue until its
handshake with the prefill side is done), `alloc_wait_duration` (until its
KV is preallocated and its transfer begins; a request whose handshake time
was not recorded gives `prealloc_queue_duration` for both),
`transfer_duration` (until the transfer is done and it waits to join) and
`queue_duration` (until the prebuilt batch that joins it to the running
decode). `forward_duration` runs from there to its last token. So where a
build's first-token time (bench_serving's TTFT) is longer than another's,
these say whether the scheduler took the request in later or the forwards
after that took longer.

    python3 request_stats_log.py DIR [--output-len 256] [--out FILE.json]

DIR holds the call's `server-<setting>.log` files at any depth (the
unpacked server-logs.tgz of benchmark/device_compare.sh). --output-len keeps
only the requests of at least that many output tokens (bench_serving's,
apart from the greedy check's shorter ones): a speculative server counts
the tokens its last verify accepted past the request's limit too, so a
bench request of 256 tokens can log 258. Prints, per build, each duration's median, 90th
percentile and mean in ms over its requests and, with --out, writes the
same as JSON.
"""

import argparse
import re
import statistics
import sys

from decode_log import find_logs, run_probe  # what the log probes share

# later releases put more fields before type= (0.5.17: attempts=0)
STATS_LINE = re.compile(r"ReqTimeStats\(rid=[^,]*,.*?output_len=(\d+),.*?type=(\w+)\): (.*)$")
DURATION = re.compile(r"(\w+_duration)=(-?[0-9.]+)ms")
# the order the stages come in; a field sglang adds later sorts after these
ORDER = ("bootstrap_duration", "alloc_wait_duration", "prealloc_queue_duration",
         "bootstrap_queue_duration", "transfer_duration", "queue_duration",
         "forward_duration")


def read_log(path, output_len=None):
    """({field: [ms per request]}, request types) of one server log."""
    fields, types = {}, set()
    with open(path, errors="replace") as fh:
        for line in fh:
            m = STATS_LINE.search(line)
            if not m or (output_len is not None and int(m.group(1)) < output_len):
                continue
            types.add(m.group(2))
            for name, value in DURATION.findall(m.group(3)):
                fields.setdefault(name, []).append(float(value))
    return fields, types


def summary(values):
    values = sorted(values)
    return {"requests": len(values), "median_ms": round(statistics.median(values), 3),
            "p90_ms": round(values[min(len(values) - 1, (9 * len(values)) // 10)], 3),
            "mean_ms": round(statistics.fmean(values), 3)}


def field_order(name):
    return (ORDER.index(name), name) if name in ORDER else (len(ORDER), name)


def collect(dir_path, output_len=None):
    servers = []
    for name, path in find_logs(dir_path, "server"):
        fields, types = read_log(path, output_len)
        if fields:
            servers.append({"server": name, "types": sorted(types),
                            "durations": {f: summary(fields[f])
                                          for f in sorted(fields, key=field_order)}})
    return {"output_len": output_len, "servers": servers}


def table(data):
    kept = ("every request" if data["output_len"] is None
            else f"requests of {data['output_len']} or more output tokens")
    out = [f"sglang's per-request time stats ({kept}), ms:", "",
           "| server | type | stage | requests | median | p90 | mean |",
           "|---|---|---|---|---|---|---|"]
    for s in data["servers"]:
        for field, d in s["durations"].items():
            out.append(f"| {s['server']} | {', '.join(s['types'])} | {field} | {d['requests']} | "
                       f"{d['median_ms']:g} | {d['p90_ms']:g} | {d['mean_ms']:g} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--output-len", type=int, default=None,
                    help="keep only the requests of at least this many output tokens")
    ap.add_argument("--out", help="also write the numbers as JSON here")
    a = ap.parse_args(argv)
    return run_probe("request_stats_log", a.dir, lambda: collect(a.dir, a.output_len), table,
                     a.out, empty=lambda data: not data["servers"],
                     nothing=f"no ReqTimeStats line in {a.dir}/**/server-*.log (launch with "
                             "--server-arg=--enable-request-time-stats-logging)")


if __name__ == "__main__":
    sys.exit(main())
