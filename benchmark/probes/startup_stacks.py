"""Probe: where a server's start goes, by Python stack, per process.

A TP server's start is mostly its target model's CUDA-graph capture, and
nearly all of that the first batch size (capture_log.py reads it from the
logs: 2 to 400 s for the same build on the same warm machine). The logs
cannot say what that step waits on. This probe can: loaded by
sitecustomize.py (same folder) when SGLPATCH_STARTUP_STACKS=1 and
SGLPATCH_PROBE_DIR are set, it starts a thread in every process of the
server that looks at the main thread's Python stack every
SGLPATCH_STARTUP_STACKS_INTERVAL seconds (0.25) and adds the time since
the last look to that stack. It stops once the main thread is in an
`event_loop*` function (the scheduler, or the detokenizer, is serving) or
after SGLPATCH_STARTUP_STACKS_S seconds (900), and writes, every 10 s and
at the end, `<pid>-startup.json`:

    build        the site the process imported sglang from
    rank         tp_rank of `run_scheduler_process` (None elsewhere)
    covered_s    seconds the samples add up to
    stopped_by   "event loop", "limit" or null (still sampling)
    stacks       {"outermost;...;innermost": seconds}, frames as file:function
    timeline     [[seconds since start, innermost sglang frame, innermost frame]]
                 at each change of either

A sample that waits for the GIL (the main thread in C code that holds
it) lands late, and its time goes to the stack seen then: the call that
held the GIL, if it is still running.

    python3 startup_stacks.py DIR [--rank R] [--top N]

prints, per build and scheduler rank, the frames that held the most time
(inclusive), the innermost frames, and the longest spans of the timeline.
Without SGLPATCH_PROBE_DIR nothing is loaded. Benchmark runs do not
install it (benchmark/device_compare.sh STARTUP_STACKS=1 does).
"""

import argparse
import json
import os
import sys
import threading
import time

from host_time import sglang_site  # beside this file, in the probe site too

WRITE_EVERY_S = 10.0
TIMELINE_CAP = 5000  # changes kept per process
_PACKAGES = ("sglang", "torch", "triton", "tvm_ffi", "flashinfer", "sgl_kernel",
             "transformers", "multiprocessing", "threading", "uvicorn", "asyncio")


def frame_label(code):
    """file:function, the file from its package down (sglang/srt/...)."""
    path = code.co_filename.replace(os.sep, "/")
    for pkg in _PACKAGES:
        i = path.rfind(f"/{pkg}/")
        if i >= 0:
            return f"{path[i + 1:]}:{code.co_name}"
    return f"{os.path.basename(path)}:{code.co_name}"


def _sglang_frame(label):
    return label.startswith("sglang/")


class StartupSampler:
    """Time per Python stack of one thread, from `sample(frame, dt)` calls."""

    def __init__(self, out_dir, pid=None):
        self.out_dir, self.pid = out_dir, pid or os.getpid()
        self.stacks, self.timeline = {}, []
        self.rank = None
        self.covered_s = 0.0
        self.stopped_by = None
        self._last_change = None

    def sample(self, frame, dt, at):
        """Adds dt seconds to frame's stack; `at` is seconds since start.
        True once the thread serves (an event_loop* frame)."""
        labels, serving = [], False
        while frame is not None:
            code = frame.f_code
            if code.co_name == "run_scheduler_process" and self.rank is None:
                self.rank = frame.f_locals.get("tp_rank")
            serving = serving or code.co_name.startswith("event_loop")
            labels.append(frame_label(code))
            frame = frame.f_back
        labels.reverse()
        key = ";".join(labels)
        self.stacks[key] = self.stacks.get(key, 0.0) + dt
        self.covered_s += dt
        inner = next((x for x in reversed(labels) if _sglang_frame(x)), None)
        change = (inner, labels[-1] if labels else None)
        if change != self._last_change and len(self.timeline) < TIMELINE_CAP:
            self.timeline.append([round(at, 3), *change])
            self._last_change = change
        return serving

    def report(self):
        return {"pid": self.pid, "build": sglang_site(),
                "rank": self.rank, "covered_s": round(self.covered_s, 3),
                "stopped_by": self.stopped_by,
                "stacks": {k: round(v, 3) for k, v in self.stacks.items()},
                "timeline": self.timeline}

    def dump(self):
        path = os.path.join(self.out_dir, f"{self.pid}-startup.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(self.report(), fh)
        os.replace(path + ".tmp", path)


def sample_main_thread(out_dir, interval_s, limit_s, clock=time.monotonic):
    """The sampler thread's body: samples this process's main thread."""
    target = threading.main_thread().ident
    sampler = StartupSampler(out_dir)
    start = last = last_write = clock()
    while True:
        time.sleep(interval_s)
        now = clock()
        frame = sys._current_frames().get(target)
        if frame is None:
            break
        serving = sampler.sample(frame, now - last, now - start)
        del frame
        last = now
        if serving or now - start >= limit_s:
            sampler.stopped_by = "event loop" if serving else "limit"
            break
        if now - last_write >= WRITE_EVERY_S:
            sampler.dump()
            last_write = now
    sampler.dump()
    return sampler


def start(out_dir):
    """Starts the sampler in this process and in every child it forks."""
    interval = float(os.environ.get("SGLPATCH_STARTUP_STACKS_INTERVAL", "0.25"))
    limit = float(os.environ.get("SGLPATCH_STARTUP_STACKS_S", "900"))

    def run():
        threading.Thread(target=sample_main_thread, args=(out_dir, interval, limit),
                         name="sglpatch-startup-stacks", daemon=True).start()

    run()
    os.register_at_fork(after_in_child=run)


# ---- the report ----

def load(dir_path):
    out = []
    for root, _, files in os.walk(dir_path):
        for name in sorted(files):
            if name.endswith("-startup.json"):
                with open(os.path.join(root, name)) as fh:
                    data = json.load(fh)
                if not isinstance(data, dict) or not isinstance(data.get("stacks"), dict):
                    raise ValueError(f"{name}: not a startup-stacks file")
                out.append(data)
    return out


def inclusive(stacks):
    """{frame: seconds of the stacks it is in}, each stack counted once per frame."""
    out = {}
    for key, secs in stacks.items():
        for label in set(key.split(";")):
            out[label] = out.get(label, 0.0) + secs
    return out


def innermost(stacks):
    out = {}
    for key, secs in stacks.items():
        leaf = key.rsplit(";", 1)[-1]
        out[leaf] = out.get(leaf, 0.0) + secs
    return out


def spans(timeline, end_s):
    """The timeline's stretches: (seconds, start, sglang frame, innermost frame),
    longest first."""
    out = []
    for i, (at, inner, leaf) in enumerate(timeline):
        until = timeline[i + 1][0] if i + 1 < len(timeline) else end_s
        out.append((round(until - at, 3), at, inner, leaf))
    return sorted(out, key=lambda s: -s[0])


def _top(table, n):
    return sorted(table.items(), key=lambda kv: -kv[1])[:n]


def page(reports, top=15):
    lines = []
    for r in sorted(reports, key=lambda r: (r["build"], r["rank"] if r["rank"] is not None else 99)):
        secs = r["covered_s"] or 1e-9
        lines.append(f"\n## {os.path.basename(r['build']) or '?'}, rank {r['rank']} "
                     f"(pid {r['pid']}): {r['covered_s']:.1f} s sampled, stopped by "
                     f"{r['stopped_by'] or 'nothing yet'}\n")
        lines.append("| frame (inclusive) | s | share |\n|---|---|---|")
        lines += [f"| `{k}` | {v:.1f} | {v / secs:.0%} |"
                  for k, v in _top(inclusive(r["stacks"]), top)]
        lines.append("\n| innermost frame | s | share |\n|---|---|---|")
        lines += [f"| `{k}` | {v:.1f} | {v / secs:.0%} |"
                  for k, v in _top(innermost(r["stacks"]), top)]
        lines.append("\n| longest spans: s | from s | innermost sglang frame | innermost frame |"
                     "\n|---|---|---|---|")
        lines += [f"| {d:.1f} | {at:.1f} | `{inner}` | `{leaf}` |"
                  for d, at, inner, leaf in spans(r["timeline"], r["covered_s"])[:5]]
    return "\n".join(lines).lstrip("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--rank", type=int, default=None,
                    help="only this scheduler rank (default: every process that has one)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    if not os.path.isdir(args.dir):
        print(f"startup_stacks: {args.dir}: not a directory", file=sys.stderr)
        return 2
    try:
        reports = load(args.dir)
    except (ValueError, json.JSONDecodeError) as e:
        print(f"startup_stacks: {e}", file=sys.stderr)
        return 2
    reports = [r for r in reports if r["rank"] is not None
               and (args.rank is None or r["rank"] == args.rank)]
    if not reports:
        print(f"startup_stacks: no scheduler's *-startup.json under {args.dir}", file=sys.stderr)
        return 1
    print(page(reports, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
