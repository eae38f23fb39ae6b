"""CPU tests of what lets the stand-in tests run fast without changing a GPU
run: the harness's waits (benchmark/pace.py) keep their defaults unless the
environment shortens them; a trace file polled before its writer flushed
anything is not taken for a finished trace; a run whose models have no
token map starts without importing torch."""

import gzip
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "benchmark")
sys.path.insert(0, BENCH)
import pace  # noqa: E402
import profiling  # noqa: E402


def test_the_waits_keep_their_defaults_unless_the_environment_shortens_them(monkeypatch):
    monkeypatch.delenv("SGLPATCH_BENCH_POLL_S", raising=False)
    monkeypatch.delenv("SGLPATCH_BENCH_START_SPACING_S", raising=False)
    assert (pace.poll_s(1), pace.poll_s(0.5), pace.start_spacing_s()) == (1, 0.5, 3.0)
    monkeypatch.setenv("SGLPATCH_BENCH_POLL_S", "0.05")
    monkeypatch.setenv("SGLPATCH_BENCH_START_SPACING_S", "0.5")
    assert (pace.poll_s(1), pace.poll_s(0.01), pace.start_spacing_s()) == (0.05, 0.01, 0.5)


def test_an_empty_trace_file_is_not_a_finished_trace(tmp_path, monkeypatch):
    # gzip.open(..., "w") creates the file and writes its header only on the
    # first flush: a poll in between sees zero bytes
    monkeypatch.setenv("SGLPATCH_BENCH_POLL_S", "0.05")
    path = tmp_path / "1-TP-0.trace.json.gz"
    path.write_bytes(b"")
    with pytest.raises(TimeoutError):
        profiling.wait_for_traces(str(tmp_path), set(), 1, timeout_s=0.3)
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": []}, fh)
    assert profiling.wait_for_traces(str(tmp_path), set(), 1, timeout_s=5) == {0: str(path)}


def test_models_without_a_token_map_leave_torch_unimported(tmp_path):
    code = ("import sys\n"
            f"sys.path.insert(0, {BENCH!r})\n"
            "import builds\n"
            "print(builds.load_fmap(sys.argv[1]), 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout
    assert out.split() == ["None", "False"]
