"""CPU tests of benchmark/probes/capture_log.py: from a call's server logs,
at any depth, the target model's CUDA-graph capture time and the share its
first batch size took."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(REPO, "benchmark", "probes", "capture_log.py")
sys.path.insert(0, os.path.dirname(PROBE))
import capture_log  # noqa: E402
from log_probe_cli import assert_refuses_bad_input  # noqa: E402


def server_log(first_step, total_s, draft_total_s=4.05):
    """A server's log as sglang writes it: the progress bar redrawn with
    carriage returns, the target's capture, then the draft's."""
    bar = "Capturing batches (bs={bs} avail_mem=122.90 GB): {pct:3d}%|#| {i}/20 [{clock}<00:10, 1.0s/it]"
    steps = [bar.format(bs=32, pct=0, i=0, clock="00:00"),
             bar.format(bs=32, pct=5, i=1, clock=first_step),
             bar.format(bs=30, pct=10, i=2, clock=first_step)]
    return ("[2026-11-26 21:19:34 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
            + "\r".join(steps) + "\n"
            + f"[2026-11-26 21:23:26 TP0] Capture cuda graph end. Time elapsed: {total_s} s. mem usage=0.13 GB.\n"
            + "[2026-11-26 21:23:54 TP0] Capture draft cuda graph begin.\n"
            + "\r".join(s.replace("bs=32", "bs=8") for s in steps[:2]) + "\n"
            + f"[2026-11-26 21:23:58 TP0] Capture draft cuda graph end. Time elapsed: {draft_total_s} s.\n")


def test_first_capture_and_its_first_batch_size(tmp_path):
    (tmp_path / "call1").mkdir()
    (tmp_path / "call1" / "server-base-triton.log").write_text(server_log("03:46", 231.55))
    (tmp_path / "pair0").mkdir()
    (tmp_path / "pair0" / "server-patched-triton.log").write_text(server_log("1:01:05", 3700.0))
    # a server that never finished its capture, and a bench log: no row
    (tmp_path / "server-dead.log").write_text("[2026-11-26 21:19:34 TP0] Capture cuda graph begin.\n")
    (tmp_path / "bench-base-c1-r0.log").write_text(server_log("00:01", 1.0))
    rows = capture_log.collect(str(tmp_path))
    assert rows == [
        {"server": "call1/base-triton", "capture_s": 231.55, "first_bs": 32, "sizes": 20,
         "first_bs_s": 226, "began": "2026-11-26 21:19:34", "ended": "2026-11-26 21:23:26"},
        {"server": "pair0/patched-triton", "capture_s": 3700.0, "first_bs": 32, "sizes": 20,
         "first_bs_s": 3665, "began": "2026-11-26 21:19:34", "ended": "2026-11-26 21:23:26"},
    ]


def test_cli_writes_json_and_refuses_bad_input(tmp_path):
    (tmp_path / "server-a.log").write_text(server_log("01:11", 83.08))
    out = tmp_path / "rows.json"
    res = subprocess.run([sys.executable, PROBE, str(tmp_path), "--out", str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "| a | 83.1 | 32 | 71 | 20 | 2026-11-26 21:19:34 | 2026-11-26 21:23:26 |" in res.stdout
    assert json.loads(out.read_text())[0]["first_bs_s"] == 71
    assert_refuses_bad_input(PROBE, tmp_path, "no server log with a finished capture")
