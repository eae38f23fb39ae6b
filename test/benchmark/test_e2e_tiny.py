"""Tiny end-to-end GPU check of the evidence harness (benchmark/e2e.py).

Runs only where CUDA and sglang are present: builds the tiny synthetic
target/EAGLE3 pair, serves it with and without EAGLE3 (triton, CUDA graphs,
overlap on), and asserts greedy equivalence on 64 prompts x 64 tokens plus one
short bench point.  Elsewhere (CI: CPU-only torch) it skips with a reason.
Nothing GPU-related is imported at module import time.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
E2E = os.path.join(REPO, "benchmark", "e2e.py")


def _skip_reason():
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    if importlib.util.find_spec("sglang") is None:
        return "sglang is not installed"
    # torch.cuda in a child process: keeps CUDA out of the pytest process
    probe = subprocess.run([sys.executable, "-c",
                            "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "True":
        return "no CUDA device"
    return None


def test_e2e_tiny(tmp_path):
    reason = _skip_reason()
    if reason:
        pytest.skip(f"GPU end-to-end check needs CUDA and sglang: {reason}")
    out = tmp_path / "results"
    cmd = [sys.executable, E2E, "run", "--preset", "tiny", "--piecewise", "default",
           "--concurrency", "1", "--repeats", "1", "--min-seconds", "2",
           "--out-dir", str(out), "--work-dir", str(tmp_path / "work"),
           "--card", "test"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    (path,) = list(out.glob("*-test.json"))
    data = json.loads(path.read_text())
    (g,) = data["greedy_equivalence"]
    assert g["prompts"] >= 64 and g["mismatched_prompts"] == 0, g
    # the served greedy output is the constructed token chain
    assert g.get("prompts_off_constructed_f", 0) == 0, g
    specs = {r["speculative"] for r in data["runs"]}
    assert specs == {"EAGLE3", "none"}, data["runs"]
    eagle = next(r for r in data["runs"] if r["speculative"] == "EAGLE3")
    assert eagle["tpot_ms_median"] > 0 and eagle["accept_length"] > 1.5, eagle
