"""CPU tests of benchmark/probes/decode_log.py: from the server logs of a
side-by-side call it keeps rank 0's "Decode batch" lines at one batch size,
per build, and groups them into wall-clock windows."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(REPO, "benchmark", "probes", "decode_log.py")
sys.path.insert(0, os.path.dirname(PROBE))
import decode_log  # noqa: E402
from log_probe_cli import assert_refuses_bad_input  # noqa: E402


def decode_line(clock, running, tput, rank="TP0"):
    """A scheduler's decode line; rank None: a server without tensor
    parallelism, whose lines name no rank."""
    stamp = f"2026-11-26 {clock}" + (f" {rank}" if rank else "")
    return (f"[{stamp}] Decode batch, #running-req: {running}, #token: 300, "
            f"token usage: 0.00, accept len: 2.95, accept rate: 0.65, cuda graph: True, "
            f"gen throughput (token/s): {tput}, #queue-req: 0\n")


def write_logs(tmp_path):
    base = [decode_line("14:00:01", 1, 700.0), decode_line("14:00:03", 1, 720.0),
            decode_line("14:00:05", 1, 710.0),
            # other batch sizes, another rank and other lines are not counted
            decode_line("14:00:06", 8, 4000.0), decode_line("14:00:06", 1, 10.0, rank="TP1"),
            "[2026-11-26 14:00:07 TP0] Prefill batch, #new-seq: 1, #new-token: 256\n",
            decode_line("14:00:21", 1, 500.0), decode_line("14:00:22", 1, 520.0),
            decode_line("14:00:24", 1, 540.0)]
    patched = [decode_line("14:00:11", 1, 650.0), decode_line("14:00:12", 1, 660.0),
               decode_line("14:00:31", 1, 400.0)]
    (tmp_path / "server-base-triton-ov1-EAGLE3-pcg1.log").write_text("".join(base))
    (tmp_path / "server-patched-triton-ov1-EAGLE3-pcg1.log").write_text("".join(patched))
    (tmp_path / "bench-base-triton-ov1-EAGLE3-pcg1-c1-r0.log").write_text(
        decode_line("14:00:01", 1, 1.0))


def test_rank0_lines_at_one_batch_size_by_build_and_window(tmp_path):
    write_logs(tmp_path)
    data = decode_log.summarize(str(tmp_path), running_req=1, window_s=10, min_lines=2)
    assert sorted(data["builds"]) == ["base-triton-ov1-EAGLE3-pcg1",
                                      "patched-triton-ov1-EAGLE3-pcg1"]
    base = data["builds"]["base-triton-ov1-EAGLE3-pcg1"]
    assert base["lines"] == 6
    assert base["median"] == 620.0  # of 500, 520, 540, 700, 710, 720
    assert base["windows"] == [{"start": "14:00:00", "lines": 3, "median": 710.0},
                               {"start": "14:00:20", "lines": 3, "median": 520.0}]
    patched = data["builds"]["patched-triton-ov1-EAGLE3-pcg1"]
    assert patched["lines"] == 3
    # a window with fewer than min_lines lines is left out
    assert patched["windows"] == [{"start": "14:00:10", "lines": 2, "median": 655.0}]

    at8 = decode_log.summarize(str(tmp_path), running_req=8, window_s=10, min_lines=1)
    assert list(at8["builds"]) == ["base-triton-ov1-EAGLE3-pcg1"]
    assert at8["builds"]["base-triton-ov1-EAGLE3-pcg1"]["median"] == 4000.0


def test_a_server_without_tensor_parallelism_names_no_rank(tmp_path):
    # TP=1: "[date time] Decode batch"; its lines count, another rank's never
    lines = [decode_line("14:00:01", 1, 700.0, rank=None),
             decode_line("14:00:02", 1, 600.0, rank=None),
             decode_line("14:00:03", 1, 10.0, rank="TP1")]
    assert lines[0].startswith("[2026-11-26 14:00:01] Decode batch")
    (tmp_path / "server-base-flashinfer-ov1-EAGLE3-pcg1.log").write_text("".join(lines))
    data = decode_log.summarize(str(tmp_path), running_req=1, window_s=10, min_lines=1)
    base = data["builds"]["base-flashinfer-ov1-EAGLE3-pcg1"]
    assert base["lines"] == 2 and base["median"] == 650.0


def test_command_line_prints_the_table_and_writes_json(tmp_path):
    write_logs(tmp_path)
    out = tmp_path / "decode.json"
    res = subprocess.run([sys.executable, PROBE, str(tmp_path), "--min-lines", "2",
                          "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "| base-triton-ov1-EAGLE3-pcg1 | 6 | 620.0 |" in res.stdout
    assert "14:00:00=710, 14:00:20=520" in res.stdout
    assert json.loads(out.read_text())["builds"]["patched-triton-ov1-EAGLE3-pcg1"]["lines"] == 3


def test_bad_input_is_one_line(tmp_path):
    assert_refuses_bad_input(PROBE, tmp_path, "no rank-0 'Decode batch' line")


def test_committed_decode_logs_are_what_the_probe_makes_of_their_lines():
    probes = os.path.join(REPO, "benchmark", "results", "2026-11-26-h100-probes")
    names = [n[:-len("-decode-lines")] for n in os.listdir(probes) if n.endswith("-decode-lines")]
    assert names
    for name in names:
        data = decode_log.summarize(os.path.join(probes, name + "-decode-lines"))
        with open(os.path.join(probes, name + "-decode-log.json")) as fh:
            assert json.load(fh) == data
        with open(os.path.join(probes, name + "-decode-log.md")) as fh:
            assert fh.read() == decode_log.table(data)
