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

Without SGLPATCH_PROBE_DIR it does nothing. Benchmark runs do not install it.
"""

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import sys

_TARGET = "sglang.srt.managers.overlap_utils"
_DIR = os.environ.get("SGLPATCH_PROBE_DIR")
_counts = {"relayed_resolves": 0, "host_pulls": 0, "cpu_mirror_none": 0}


def _dump():
    if any(_counts.values()):
        path = os.path.join(_DIR, f"{os.getpid()}.json")
        with open(path, "w") as f:
            json.dump(dict(_counts, pid=os.getpid()), f)


def _instrument(module):
    future_map = module.FutureMap
    resolve, pull = future_map.resolve_seq_lens_cpu, future_map._pull_seq_lens_cpu

    def resolve_seq_lens_cpu(self, batch):
        fi = getattr(batch.spec_info, "future_indices", None)
        relayed = bool(fi is not None and fi.seq_lens_pending and fi.indices.numel())
        resolve(self, batch)
        if relayed:
            _counts["relayed_resolves"] += 1
            if batch.seq_lens_cpu is None:
                _counts["cpu_mirror_none"] += 1
            _dump()  # the server is killed, not exited: keep the file current

    def _pull_seq_lens_cpu(self, batch, new_seq_lens):
        _counts["host_pulls"] += 1
        return pull(self, batch, new_seq_lens)

    future_map.resolve_seq_lens_cpu = resolve_seq_lens_cpu
    future_map._pull_seq_lens_cpu = _pull_seq_lens_cpu
    atexit.register(_dump)


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_instrument(module):
            exec_module(module)
            _instrument(module)

        spec.loader.exec_module = exec_then_instrument
        return spec


if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    sys.meta_path.insert(0, _AfterImport())
