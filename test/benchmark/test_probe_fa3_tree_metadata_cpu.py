"""CPU tests of benchmark/probes/fa3_tree_metadata_gpu.py's page: a row per
timed path, the differing replays listed, and the committed page is what
the committed JSON renders to. (Its run needs a GPU site with the series
through 0021; on the CPU it runs under
TRITON_INTERPRET=1 PROBE_DEVICE=cpu, minutes, so no test runs it.)"""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(REPO, "benchmark", "probes", "fa3_tree_metadata_gpu.py")
COMMITTED = os.path.join(REPO, "benchmark", "results", "2026-11-29-h200-probes",
                         "fa3-tree-metadata-gpu")
sys.path.insert(0, os.path.dirname(PROBE))
import fa3_tree_metadata_gpu as probe  # noqa: E402


def result(failed=()):
    timing = [{"case": [1, 8, 1, 1, True], "mode": "TARGET_VERIFY", "path": path,
               "host_us_per_replay": host, "synced_us_per_replay": synced}
              for path, host, synced in (("torch", 549.5, 590.9), ("fused", 149.7, 170.0))]
    return {"card": "Test GPU", "torch": "0", "checks": 4, "failed": list(failed),
            "timing": timing}


def test_a_row_per_timed_path_with_its_numbers():
    lines = probe.render(result()).splitlines()
    assert "Test GPU" in lines[0]
    rows = [line for line in lines if line.startswith("| TARGET_VERIFY")]
    assert rows == ["| TARGET_VERIFY | 1, 8, 1, 1 | torch | 549.5 | 590.9 |",
                    "| TARGET_VERIFY | 1, 8, 1, 1 | fused | 149.7 | 170.0 |"]
    assert not [line for line in lines if line.startswith("- differs")]


def test_differing_replays_are_listed_with_their_buffers():
    bad = {"case": [4, 6, 4, 2, True], "mode": "DRAFT_EXTEND", "seed": 3,
           "buffers": 9, "differ": ["page_table", "4.cu_seqlens_q"]}
    lines = probe.render(result([bad])).splitlines()
    (listed,) = [line for line in lines if line.startswith("- differs")]
    assert "DRAFT_EXTEND" in listed and "[4, 6, 4, 2, True]" in listed
    assert "page_table" in listed and "4.cu_seqlens_q" in listed


def test_the_committed_page_is_the_committed_json_rendered():
    out = subprocess.run([sys.executable, PROBE, "render", COMMITTED + ".json"],
                         capture_output=True, text=True, check=True).stdout
    with open(COMMITTED + ".md") as f:
        assert out == f.read()
    with open(COMMITTED + ".json") as f:
        data = json.load(f)
    assert data["failed"] == [] and data["checks"] > 0
