"""Probe: counts seq_lens device-to-host pulls in a patched sglang server.

Copy this file into the site directory of the server under test (it is then
imported by every Python process of that server, the scheduler included) and
set SGLPATCH_PROBE_DIR. Once `sglang.srt.managers.overlap_utils` loads, it
wraps `FutureMap.resolve_seq_lens_cpu` and `FutureMap._pull_seq_lens_cpu` (the
only place the patched decode path copies relayed seq_lens to the host; see
docs/patches/0005-*.md) and writes, per process, `<pid>.json` with

    relayed_resolves   decode iterations whose lengths came through the relay
    host_pulls         of those, how many copied seq_lens to the host
    cpu_mirror_none    of those, how many left seq_lens_cpu = None (no copy)

With SGLPATCH_SYNC_TRACE=1 as well, it also finds every host synchronization
of the scheduler process in steady decode: after SGLPATCH_SYNC_SKIP (20)
decode forwards it turns on torch's CUDA sync debug mode ("warn") for the
next SGLPATCH_SYNC_STEPS (100) forwards and writes `<pid>-sync.json`:

    forwards, decode_forwards   what the window covered
    syncs                       [{"count": n, "where": innermost sglang frames}]
    syncs_per_forward           all counted syncs / forwards

The sync debug mode flags blocking copies, `.item()`, `.tolist()`, stream
synchronizes; an event `synchronize()` (the scheduler's wait for the last
result) is not flagged. Tracing costs a stack walk per sync: never measure
latency with it on.

With SGLPATCH_HOST_TIME=1 it also loads host_time.py (copy it beside this
file): host wall time per scheduler iteration, by function, per rank.

With SGLPATCH_STARTUP_STACKS=1 it also loads startup_stacks.py (beside this
file): where each process's start goes, by Python stack.

Without SGLPATCH_PROBE_DIR it does nothing. Benchmark runs do not install it.
"""

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import sys
import traceback
import warnings

_TARGET = "sglang.srt.managers.overlap_utils"
_SCHEDULER = "sglang.srt.managers.scheduler"
_SYNC_MESSAGE = "called a synchronizing CUDA operation"
_DIR = os.environ.get("SGLPATCH_PROBE_DIR")
_counts = {"relayed_resolves": 0, "host_pulls": 0, "cpu_mirror_none": 0}
_DUMP_EVERY = 100  # relayed resolves between two writes of <pid>.json


def _dump():
    if any(_counts.values()):
        path = os.path.join(_DIR, f"{os.getpid()}.json")
        with open(path, "w") as f:
            json.dump(dict(_counts, pid=os.getpid()), f)


def _instrument(module):
    future_map = module.FutureMap
    if not hasattr(future_map, "_pull_seq_lens_cpu"):
        return  # unpatched sglang: no relay to count
    resolve, pull = future_map.resolve_seq_lens_cpu, future_map._pull_seq_lens_cpu

    def resolve_seq_lens_cpu(self, batch):
        fi = getattr(batch.spec_info, "future_indices", None)
        relayed = bool(fi is not None and fi.seq_lens_pending and fi.indices.numel())
        resolve(self, batch)
        if relayed:
            _counts["relayed_resolves"] += 1
            if batch.seq_lens_cpu is None:
                _counts["cpu_mirror_none"] += 1
            # The server is killed, not exited: keep the file current, but not
            # at every step: a file write (and the json encoder's reference
            # cycles) per decode step would cost the patched build alone
            # ~270 us a step under HOST_TIME, and Python collections.
            if _counts["relayed_resolves"] % _DUMP_EVERY == 1:
                _dump()

    def _pull_seq_lens_cpu(self, *args, **kwargs):
        _counts["host_pulls"] += 1
        return pull(self, *args, **kwargs)

    future_map.resolve_seq_lens_cpu = resolve_seq_lens_cpu
    future_map._pull_seq_lens_cpu = _pull_seq_lens_cpu
    atexit.register(_dump)


class _SyncTrace:
    """Counts host syncs by call site over a window of scheduler forwards."""

    def __init__(self, skip, steps):
        self.skip, self.steps = skip, steps
        self.forwards = self.decode_forwards = self.seen_decode = 0
        self.sites = {}
        self.on = self.done = False
        self._show = None

    def before_forward(self, batch):
        if self.done:
            return
        decode = batch.forward_mode.is_decode()
        self.seen_decode += decode
        if not self.on and self.seen_decode > self.skip:
            self._start()
        if self.on and self.forwards == self.steps:
            self._stop()  # this forward is after the window
            return
        if self.on:
            self.forwards += 1
            self.decode_forwards += decode

    def _start(self):
        import torch

        self.on = True
        warnings.filterwarnings("always", message=_SYNC_MESSAGE)
        self._show = warnings.showwarning
        warnings.showwarning = self._record
        torch.cuda.set_sync_debug_mode("warn")

    def _stop(self):
        import torch

        torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = self._show
        self.on, self.done = False, True
        self.dump()

    def _record(self, message, category, filename, lineno, file=None, line=None):
        if _SYNC_MESSAGE not in str(message):
            return self._show(message, category, filename, lineno, file, line)
        frames = [
            f"{f.filename.split('/sglang/', 1)[1]}:{f.lineno} {f.name}"
            for f in traceback.extract_stack()
            if "/sglang/" in f.filename
        ]
        where = " < ".join(reversed(frames[-4:])) or f"{filename}:{lineno}"
        self.sites[where] = self.sites.get(where, 0) + 1

    def dump(self):
        total = sum(self.sites.values())
        report = {
            "pid": os.getpid(),
            "forwards": self.forwards,
            "decode_forwards": self.decode_forwards,
            "syncs_per_forward": round(total / self.forwards, 3) if self.forwards else None,
            "syncs": [
                {"count": n, "where": w}
                for w, n in sorted(self.sites.items(), key=lambda kv: -kv[1])
            ],
        }
        with open(os.path.join(_DIR, f"{os.getpid()}-sync.json"), "w") as f:
            json.dump(report, f, indent=1)


def _instrument_scheduler(module):
    trace = _SyncTrace(
        int(os.environ.get("SGLPATCH_SYNC_SKIP", "20")),
        int(os.environ.get("SGLPATCH_SYNC_STEPS", "100")),
    )
    run_batch = module.Scheduler.run_batch

    def traced_run_batch(self, batch, *args, **kwargs):
        trace.before_forward(batch)
        return run_batch(self, batch, *args, **kwargs)

    module.Scheduler.run_batch = traced_run_batch
    atexit.register(lambda: trace.on and trace.dump())


_HOOKS = {_TARGET: [_instrument]}  # module -> hooks run once it has loaded


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        hook = _HOOKS.get(name)
        if hook is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_instrument(module):
            exec_module(module)
            for h in hook:
                h(module)

        spec.loader.exec_module = exec_then_instrument
        return spec


if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    if os.environ.get("SGLPATCH_SYNC_TRACE") == "1":
        _HOOKS.setdefault(_SCHEDULER, []).append(_instrument_scheduler)
    if os.environ.get("SGLPATCH_HOST_TIME") == "1":
        # host_time.py sits beside this file in the site under test
        import host_time

        for name, hook in host_time.hooks(_DIR).items():
            _HOOKS.setdefault(name, []).append(hook)
    if os.environ.get("SGLPATCH_STARTUP_STACKS") == "1":
        import startup_stacks  # beside this file, like host_time.py

        startup_stacks.start(_DIR)
    sys.meta_path.insert(0, _AfterImport())
