"""CPU tests of the probe's host-sync trace (benchmark/probes/sitecustomize.py).

The GPU run turns on torch's CUDA sync debug mode; here a stand-in for that
switch lets the test raise the same warning from code whose file name is
under sglang/, and checks the window counting and the report.
"""

import importlib.util
import json
import os
import warnings
from types import SimpleNamespace

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(REPO, "benchmark", "probes", "sitecustomize.py")


@pytest.fixture
def probe(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLPATCH_PROBE_DIR", str(tmp_path))
    monkeypatch.setenv("SGLPATCH_SYNC_TRACE", "1")
    spec = importlib.util.spec_from_file_location("probe_under_test", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # The probe registers itself in sys.meta_path on import: take it out again.
    import sys

    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, mod._AfterImport)]
    modes = []
    import torch

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    mod.modes = modes
    return mod


def _forward(decode=True):
    return SimpleNamespace(forward_mode=SimpleNamespace(is_decode=lambda: decode))


# Code "inside sglang" that syncs: its frames are what the report names.
_SGLANG_CODE = compile(
    "import warnings\n"
    "def prepare_for_decode(msg):\n"
    "    warnings.warn(msg)\n",
    "/site/sglang/srt/speculative/eagle_info_v2.py",
    "exec",
)


def test_window_counts_sync_sites_then_restores(probe, tmp_path):
    ns = {}
    exec(_SGLANG_CODE, ns)
    trace = probe._SyncTrace(skip=2, steps=3)
    show_before = warnings.showwarning
    for _ in range(2):  # warm-up decodes: not traced
        trace.before_forward(_forward())
        ns["prepare_for_decode"](probe._SYNC_MESSAGE)
    assert probe.modes == [] and trace.sites == {}
    trace.before_forward(_forward())  # third decode opens the window
    assert probe.modes == ["warn"]
    ns["prepare_for_decode"](probe._SYNC_MESSAGE)
    ns["prepare_for_decode"](probe._SYNC_MESSAGE)
    trace.before_forward(_forward(decode=False))
    ns["prepare_for_decode"](probe._SYNC_MESSAGE)
    trace.before_forward(_forward())
    trace.before_forward(_forward())  # the fourth forward closes it
    assert probe.modes == ["warn", "default"]
    assert warnings.showwarning is show_before
    report = json.loads((tmp_path / f"{os.getpid()}-sync.json").read_text())
    assert report["forwards"] == 3
    assert report["decode_forwards"] == 2
    assert report["syncs"] == [
        {"count": 3, "where": "srt/speculative/eagle_info_v2.py:3 prepare_for_decode"}
    ]
    assert report["syncs_per_forward"] == 1.0
    # After the window nothing is counted any more.
    ns["prepare_for_decode"](probe._SYNC_MESSAGE)
    trace.before_forward(_forward())
    assert sum(trace.sites.values()) == 3


def test_other_warnings_pass_through(probe):
    trace = probe._SyncTrace(skip=0, steps=5)
    seen = []
    old_show = warnings.showwarning
    warnings.showwarning = lambda *a, **k: seen.append(str(a[0]))
    try:
        trace.before_forward(_forward())
        warnings.warn("something else entirely")
        trace.before_forward(_forward())
    finally:
        trace._stop() if trace.on else None
        warnings.showwarning = old_show
    assert seen == ["something else entirely"]
    assert trace.sites == {}


def test_unpatched_future_map_is_left_alone(probe):
    class FutureMap:  # 0.5.12.post1's FutureMap has no relay pull
        def resolve_seq_lens_cpu(self, batch):
            return "base"

    module = SimpleNamespace(FutureMap=FutureMap)
    probe._instrument(module)
    assert FutureMap().resolve_seq_lens_cpu(None) == "base"


def test_relay_counter_writes_its_file_now_and_then_not_every_step(probe, tmp_path):
    """The counter's file must stay current on a killed server, but a write
    per decode step is host work only the patched build would pay."""
    import types

    class FutureMap:
        def resolve_seq_lens_cpu(self, batch):
            batch.spec_info.future_indices.seq_lens_pending = False
            batch.seq_lens_cpu = None

        def _pull_seq_lens_cpu(self, *args):
            return None

    module = types.SimpleNamespace(FutureMap=FutureMap)
    probe._instrument(module)
    writes = []
    real_dump = probe._dump
    probe._dump = lambda: (writes.append(dict(probe._counts)), real_dump())
    fm = FutureMap()
    for _ in range(250):
        fi = SimpleNamespace(seq_lens_pending=True, indices=SimpleNamespace(numel=lambda: 2))
        fm.resolve_seq_lens_cpu(SimpleNamespace(spec_info=SimpleNamespace(future_indices=fi)))
    assert probe._counts["relayed_resolves"] == 250
    assert probe._counts["cpu_mirror_none"] == 250
    assert [w["relayed_resolves"] for w in writes] == [1, 101, 201]
    saved = json.loads((tmp_path / f"{os.getpid()}.json").read_text())
    assert saved["relayed_resolves"] == 201
