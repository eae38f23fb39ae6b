"""The scheduler's own decode throughput, per build and time window, from the
server logs of one side-by-side call.

sglang's scheduler logs a "Decode batch" line every 40 decode steps on rank
0, with the generation throughput since the line before. Taken at one
batch size (`#running-req`, e.g. 1 for the concurrency-1 points), that is
the decode step rate seen by the scheduler, without the client, the HTTP
stream or the detokenizer in it. Grouped into wall-clock windows, it shows
whether a slow repeat was one build's or the machine's: side by side, the
builds take turns, so a slow spell of the machine shows up in every build's
windows around the same time.

    python3 decode_log.py DIR [--running-req 1] [--window-s 10] [--out FILE.json]

DIR holds the call's `server-<setting>.log` files (the unpacked
server-logs.tgz of benchmark/device_compare.sh). Prints a table per build
and, with --out, writes the same numbers as JSON.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys

# [2026-11-26 14:15:38 TP0] Decode batch, #running-req: 1, ... gen throughput (token/s): 683.2, ...
# A server without tensor parallelism names no rank: [2026-11-26 14:15:38] Decode batch, ...
DECODE_LINE = re.compile(
    r"\[(\d{4}-\d\d-\d\d) (\d\d):(\d\d):(\d\d)(?: DP\d+)?(?: TP0[^\]]*)?\] Decode batch, "
    r"#running-req: (\d+),.*?gen throughput \(token/s\): ([0-9.]+)")


def read_log(path, running_req):
    """[(seconds since midnight, tokens/s)] of the log's rank-0 decode lines
    at that batch size. A run that crosses midnight is not expected (one
    device call lasts at most ten minutes)."""
    out = []
    with open(path, errors="replace") as fh:
        for line in fh:
            m = DECODE_LINE.search(line)
            if m and int(m.group(5)) == running_req:
                h, mi, s = int(m.group(2)), int(m.group(3)), int(m.group(4))
                out.append((h * 3600 + mi * 60 + s, float(m.group(6))))
    return out


def build_name(path):
    """server-base-triton-ov1-EAGLE3-pcg1.log -> base-triton-ov1-EAGLE3-pcg1"""
    return os.path.basename(path)[len("server-"):-len(".log")]


def summarize(dir_path, running_req=1, window_s=10, min_lines=3):
    """Per build: every line's throughput summarized, and the median of each
    wall-clock window of `window_s` seconds that holds >= min_lines lines."""
    builds = {}
    for path in sorted(glob.glob(os.path.join(dir_path, "server-*.log"))):
        rows = read_log(path, running_req)
        if not rows:
            continue
        values = sorted(v for _, v in rows)
        windows = {}
        for t, v in rows:
            windows.setdefault(t // window_s * window_s, []).append(v)
        builds[build_name(path)] = {
            "lines": len(rows),
            "median": round(statistics.median(values), 1),
            "p25": round(values[len(values) // 4], 1),
            "p75": round(values[(3 * len(values)) // 4], 1),
            "windows": [{"start": clock(t), "lines": len(vs),
                         "median": round(statistics.median(vs), 1)}
                        for t, vs in sorted(windows.items()) if len(vs) >= min_lines],
        }
    return {"running_req": running_req, "window_s": window_s, "min_lines": min_lines,
            "builds": builds}


def clock(seconds):
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def table(data):
    lines = [f"Scheduler decode throughput (tokens/s) at #running-req "
             f"{data['running_req']}, rank 0, one line per 40 decode steps; windows of "
             f"{data['window_s']} s with at least {data['min_lines']} lines.", "",
             "| build | lines | median | p25 | p75 | window medians (start=tokens/s) |",
             "|---|---|---|---|---|---|"]
    for name, b in data["builds"].items():
        wins = ", ".join(f"{w['start']}={w['median']:.0f}" for w in b["windows"])
        lines.append(f"| {name} | {b['lines']} | {b['median']} | {b['p25']} | {b['p75']} | {wins} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--running-req", type=int, default=1)
    p.add_argument("--window-s", type=int, default=10)
    p.add_argument("--min-lines", type=int, default=3)
    p.add_argument("--out", help="also write the numbers as JSON here")
    a = p.parse_args(argv)
    return run_probe(
        "decode_log", a.dir, lambda: summarize(a.dir, a.running_req, a.window_s, a.min_lines),
        lambda data: table(data).rstrip("\n"), a.out, empty=lambda data: not data["builds"],
        nothing=f"no rank-0 'Decode batch' line at #running-req {a.running_req} "
                f"in {a.dir}/server-*.log")


def find_logs(dir_path, prefix):
    """[(name, path)] of the `<prefix>-*.log` files under DIR at any depth
    (with PAIRS, one folder per copy), sorted by path; the name is the path
    under DIR without the prefix and ".log": pair0/server-base-x.log ->
    pair0/base-x (capture_log.py and admission_log.py read them so)."""
    pattern = os.path.join(dir_path, "**", f"{prefix}-*.log")
    out = []
    for path in sorted(glob.glob(pattern, recursive=True)):
        head, tail = os.path.split(os.path.relpath(path, dir_path))
        name = tail[len(prefix) + 1:-len(".log")]
        out.append(("/".join(head.split(os.sep) + [name]) if head else name, path))
    return out


def run_probe(name, dir_path, collect, page, out, empty, nothing):
    """The log probes' command (capture_log.py and admission_log.py use it
    too): 2 with one line for a DIR that is not a directory, 1 with
    `nothing` when DIR holds nothing the probe reads (`empty(data)`), else
    print the markdown page and, given `out`, write the data there as JSON."""
    if not os.path.isdir(dir_path):
        print(f"{name}: {dir_path}: not a directory", file=sys.stderr)
        return 2
    data = collect()
    if empty(data):
        print(f"{name}: {nothing}", file=sys.stderr)
        return 1
    print(page(data))
    if out:
        with open(out, "w") as fh:
            json.dump(data, fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
