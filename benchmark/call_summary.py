"""The summary at the end of a device call's log: a results file in a few
lines, for the reply's output tail (the file itself comes back too).

    python3 benchmark/call_summary.py LABEL RESULTS.json

One line a greedy run (its digest and prompts off the chain), a mixed-load
record, a bench point (sorted by concurrency, then build, so that a point's
builds stand together) and an error, each starting with LABEL.
"""

import json
import sys


def summary_lines(label, data):
    out = []
    for g in data.get("greedy_runs", []):
        out.append(f"{label} greedy {g['variant']} {g.get('speculative')} "
                   f"{g.get('spec_params', '3/1/4')}: sha256 {g['sha256']}, "
                   f"{g.get('prompts_off_constructed_f')} of {g['prompts']} prompts off the chain")
    for m in data.get("mixed_load", []):
        out.append(f"{label} mixed load {m['variant']}: {m.get('overlapped')} prompts while the "
                   f"other rank decoded (per rank {m.get('prompts_per_rank')}), off chain "
                   f"{m.get('prompts_off_chain')} + long {m.get('long_off_chain')}, "
                   f"alive {m.get('alive')}")
    for r in sorted(data.get("runs", []), key=lambda r: (r["concurrency"], r["variant"])):
        out.append(f"{label} bench {r['variant']} c={r['concurrency']}: "
                   f"TPOT {r['tpot_ms_median']} ms, accept {r.get('accept_length')}")
    for e in data.get("errors", []):
        out.append(f"{label} ERROR {e[:300]}")
    return out


def main(argv):
    label, path = argv
    with open(path) as fh:
        print("\n".join(summary_lines(label, json.load(fh))))


if __name__ == "__main__":
    main(sys.argv[1:])
