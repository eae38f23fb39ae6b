"""Where a server's start went, from its log: the target model's CUDA-graph
capture, and how much of it the first batch size took.

sglang captures one CUDA graph per batch size, largest first, and logs a
progress bar ("Capturing batches (bs=32 ...): 5%| 1/20 [03:46<...") and, at
the end, "Capture cuda graph end. Time elapsed: 231.55 s". Work done once
per process (compiling or loading kernels) lands in the first batch size,
so a first size much slower than the rest points there rather than at the
capture itself.

    python3 capture_log.py DIR [--out FILE.json]

DIR holds a call's `server-<setting>.log` files, at any depth (the unpacked
server-logs.tgz of benchmark/device_compare.sh; with PAIRS, one folder per
copy). Prints a markdown table and, with --out, writes the rows as JSON.
"""

import argparse
import re
import sys

from decode_log import find_logs, run_probe  # what the log probes share

CAPTURE_END = re.compile(r"Capture cuda graph end\. Time elapsed: ([0-9.]+) s")
# the log line's own clock, e.g. "[2026-11-27 00:55:04 TP0] Capture cuda graph begin"
STAMPED = r"\[(\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d) TP0\] Capture cuda graph {}"
BEGIN_AT, END_AT = re.compile(STAMPED.format("begin")), re.compile(STAMPED.format("end"))
# the bar's first step: "1/20 [03:46<" (minutes:seconds, or h:mm:ss)
FIRST_SIZE = re.compile(r"Capturing batches \(bs=(\d+)[^)]*\):\s+\d+%\|[^|]*\|\s*1/(\d+) \[([\d:]+)<")


def seconds(clock):
    """"03:46" or "1:03:46" -> seconds."""
    total = 0
    for part in clock.split(":"):
        total = total * 60 + int(part)
    return total


def read_log(path):
    """The log's first (target model) capture: its total seconds, the first
    batch size and the seconds its step took, the number of sizes, and the
    log's times of rank 0's begin and end lines. None where the log holds
    no finished capture."""
    with open(path, errors="replace") as fh:
        text = fh.read().replace("\r", "\n")
    end = CAPTURE_END.search(text)
    if end is None:
        return None
    first = FIRST_SIZE.search(text, 0, end.start())
    row = {"capture_s": float(end.group(1))}
    # when rank 0 began and ended it (servers side by side: did they overlap?)
    began, ended = BEGIN_AT.search(text), END_AT.search(text)
    if began and ended:
        row.update(began=began.group(1), ended=ended.group(1))
    if first:
        row.update(first_bs=int(first.group(1)), sizes=int(first.group(2)),
                   first_bs_s=seconds(first.group(3)))
    return row


def collect(dir_path):
    rows = []
    for name, path in find_logs(dir_path, "server"):
        row = read_log(path)
        if row is not None:
            rows.append({"server": name, **row})
    return rows


def table(rows):
    out = ["| server | capture s | first batch size | its step s | sizes | began | ended |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['server']} | {r['capture_s']:.1f} | {r.get('first_bs', '—')} | "
                   f"{r.get('first_bs_s', '—')} | {r.get('sizes', '—')} | "
                   f"{r.get('began', '—')} | {r.get('ended', '—')} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--out", help="also write the rows as JSON here")
    a = ap.parse_args(argv)
    return run_probe("capture_log", a.dir, lambda: collect(a.dir), table, a.out,
                     empty=lambda rows: not rows,
                     nothing=f"no server log with a finished capture under {a.dir}")


if __name__ == "__main__":
    sys.exit(main())
