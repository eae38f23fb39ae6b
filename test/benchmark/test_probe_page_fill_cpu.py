"""CPU tests of benchmark/probes/page_fill_micro.py: its page is rendered from
the measured points (by batch and width), and the committed page is what
the committed JSON renders to."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(REPO, "benchmark", "probes", "page_fill_micro.py")
COMMITTED = os.path.join(REPO, "benchmark", "results", "2026-11-26-h100-probes",
                         "fa3-page-fill-micro")
sys.path.insert(0, os.path.dirname(PROBE))
import page_fill_micro  # noqa: E402


def result(points):
    return {"card": "Test GPU", "torch": "0", "plans_per_step": 5, "trials": 7,
            "points": [{"batch_size": bs, "width": w, "fill_us": us / 5, "step_us": us,
                        "bytes_moved": 8 * bs * w} for bs, w, us in points]}


def test_table_has_a_row_per_batch_and_a_column_per_width_in_order():
    # points out of order: the page sorts them
    page = page_fill_micro.table(result([(8, 4096, 400.4), (1, 4096, 300.6),
                                         (8, 512, 350.0), (1, 512, 290.2)]))
    lines = page.splitlines()
    assert "5 plans" in lines[0] and "Test GPU" in lines[0] and "7 trials" in lines[0]
    assert lines[2] == "| batch | width 512 | width 4096 |"
    assert lines[4] == "| 1 | 290 | 301 |"
    assert lines[5] == "| 8 | 350 | 400 |"
    assert len(lines) == 6


def test_render_writes_the_page_beside_the_json(tmp_path):
    path = tmp_path / "fill.json"
    path.write_text(json.dumps(result([(1, 1024, 100.0)])))
    run = subprocess.run([sys.executable, PROBE, "--render", str(path)],
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == str(tmp_path / "fill.md")
    assert (tmp_path / "fill.md").read_text().splitlines()[-1] == "| 1 | 100 |"


def test_committed_page_is_what_its_json_renders_to():
    with open(COMMITTED + ".json") as f:
        data = json.load(f)
    with open(COMMITTED + ".md") as f:
        assert f.read() == page_fill_micro.table(data)
    # the claim docs make of it: whole 128k rows at batch 256 cost ~10x the
    # tight fill per step, and the growth is in the width, not the batch alone
    step = {(p["batch_size"], p["width"]): p["step_us"] for p in data["points"]}
    assert step[(256, 131072)] > 5 * step[(256, 1024)]
    assert step[(256, 1024)] < 2 * step[(1, 1024)]
