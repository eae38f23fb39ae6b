"""benchmark/call_summary.py: the lines a device call ends its log with."""

import os
import subprocess
import sys

from standin_sglang import E2E

sys.path.insert(0, os.path.dirname(E2E))
from call_summary import summary_lines  # noqa: E402

DATA = {
    "greedy_runs": [
        {"variant": "base", "speculative": "EAGLE3", "spec_params": "5/4/8", "sha256": "aa",
         "prompts_off_constructed_f": 0, "prompts": 16},
        {"variant": "patched", "speculative": "EAGLE3", "sha256": "aa",
         "prompts_off_constructed_f": 1, "prompts": 16},
    ],
    "mixed_load": [{"variant": "patched", "overlapped": 12, "prompts_per_rank": [16, 0],
                    "prompts_off_chain": 0, "long_off_chain": 0, "alive": True}],
    "runs": [
        {"variant": "patched", "concurrency": 8, "tpot_ms_median": 2.0, "accept_length": 3.1},
        {"variant": "base", "concurrency": 8, "tpot_ms_median": 2.2, "accept_length": 3.0},
        {"variant": "patched", "concurrency": 1, "tpot_ms_median": 1.4},
    ],
    "errors": ["x" * 400],
}


def test_a_line_per_record_each_with_the_label():
    lines = summary_lines("dp", DATA)
    assert lines[:2] == [
        "dp greedy base EAGLE3 5/4/8: sha256 aa, 0 of 16 prompts off the chain",
        "dp greedy patched EAGLE3 3/1/4: sha256 aa, 1 of 16 prompts off the chain"]
    assert lines[2].startswith("dp mixed load patched: 12 prompts while the other rank")
    # a point's builds stand together, lowest concurrency first
    assert lines[3:6] == ["dp bench patched c=1: TPOT 1.4 ms, accept None",
                          "dp bench base c=8: TPOT 2.2 ms, accept 3.0",
                          "dp bench patched c=8: TPOT 2.0 ms, accept 3.1"]
    assert lines[6] == "dp ERROR " + "x" * 300 and len(lines) == 7


def test_the_command_prints_them(tmp_path):
    import json
    path = tmp_path / "spec-triton.json"
    path.write_text(json.dumps(DATA))
    script = os.path.join(os.path.dirname(E2E), "call_summary.py")
    out = subprocess.run([sys.executable, script, "spec-triton.json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == summary_lines("spec-triton.json", DATA)
