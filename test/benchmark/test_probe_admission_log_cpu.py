"""CPU tests of benchmark/probes/admission_log.py: rank 0's prefill forwards
while many requests run (how many arrivals each admitted), and
bench_serving's ITL summary per point, from a call's logs at any depth."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(REPO, "benchmark", "probes", "admission_log.py")
sys.path.insert(0, os.path.dirname(PROBE))
import admission_log  # noqa: E402
from log_probe_cli import assert_refuses_bad_input  # noqa: E402


def prefill_line(new_seq, running, rank="TP0"):
    stamp = "2026-11-26 21:31:48" + (f" {rank}" if rank else "")
    return (f"[{stamp}] Prefill batch, #new-seq: {new_seq}, #new-token: {256 * new_seq}, "
            f"#cached-token: 0, token usage: 0.01, #running-req: {running}, #queue-req: 0, "
            f"#pending-token: 0, cuda graph: False, input throughput (token/s): 9.0\n")


def bench_log(mean_itl, median_itl):
    return ("============ Serving Benchmark Result ============\n"
            "Max request concurrency:                 32\n"
            "---------------Time to First Token----------------\n"
            "Mean TTFT (ms):                          91.31\n"
            "-----Time per Output Token (excl. 1st token)------\n"
            f"Mean TPOT (ms):                          {mean_itl}\n"
            "---------------Inter-Token Latency----------------\n"
            f"Mean ITL (ms):                           {mean_itl}\n"
            f"Median ITL (ms):                         {median_itl}\n"
            "P95 ITL (ms):                            18.31\n"
            "P99 ITL (ms):                            37.59\n")


def test_prefill_forwards_and_itl_per_point(tmp_path):
    pair = tmp_path / "pair0"
    pair.mkdir()
    (pair / "server-base-x.log").write_text(
        prefill_line(1, 0) + prefill_line(2, 30) + prefill_line(1, 31)
        # another rank's line and one with few running are not counted
        + prefill_line(5, 30, rank="TP1") + prefill_line(3, 4)
        + "[2026-11-26 21:31:49 TP0] Decode batch, #running-req: 32, #token: 9\n")
    (tmp_path / "server-patched-x.log").write_text(prefill_line(1, 16) + prefill_line(1, 20, rank=None))
    (pair / "bench-base-x-c32-r1.log").write_text(bench_log(4.7, 1.8))
    (pair / "bench-base-x-c8-r0.log").write_text("Traceback: the client died\n")
    data = admission_log.collect(str(tmp_path), min_running=16)
    assert data["servers"] == [
        {"server": "pair0/base-x", "min_running": 16, "prefill_forwards": 2,
         "requests_admitted": 3, "requests_per_forward": 1.5},
        {"server": "patched-x", "min_running": 16, "prefill_forwards": 2,
         "requests_admitted": 2, "requests_per_forward": 1.0},
    ]
    assert data["points"] == [
        {"server": "pair0/base-x", "concurrency": 32, "rep": 1, "mean_itl_ms": 4.7,
         "median_itl_ms": 1.8, "p95_itl_ms": 18.31, "p99_itl_ms": 37.59,
         "mean_tpot_ms": 4.7, "mean_ttft_ms": 91.31},
    ]
    page = admission_log.table(data)
    assert "| pair0/base-x | 2 | 3 | 1.5 |" in page
    assert "| pair0/base-x | 32 | 1 | 4.7 | 4.7 | 1.8 | 18.31 | 37.59 | 91.31 |" in page


def test_cli_writes_json_and_refuses_bad_input(tmp_path):
    (tmp_path / "server-a.log").write_text(prefill_line(2, 20))
    out = tmp_path / "a.json"
    res = subprocess.run([sys.executable, PROBE, str(tmp_path), "--min-running", "20",
                          "--out", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["servers"][0]["requests_per_forward"] == 2.0
    assert_refuses_bad_input(PROBE, tmp_path, "no server or bench log")
