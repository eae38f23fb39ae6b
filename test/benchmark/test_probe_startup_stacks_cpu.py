"""CPU tests of the start-up sampler (benchmark/probes/startup_stacks.py):
time per Python stack of a process's main thread until it serves, and the
page that reads the files back."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBES = os.path.join(REPO, "benchmark", "probes")
sys.path.insert(0, PROBES)

import startup_stacks  # noqa: E402

# A stand-in for a scheduler process: functions whose files lie under
# sglang/, a slow first capture, then the event loop.
_SERVER = textwrap.dedent('''
    import time
    def capture_one_batch_size(bs, slow_s):
        time.sleep(slow_s if bs == 32 else 0.05)
    def capture(slow_s):
        for bs in (32, 16, 8):
            capture_one_batch_size(bs, slow_s)
    def event_loop_overlap(serve_s):
        time.sleep(serve_s)
    def run_scheduler_process(tp_rank, slow_s, serve_s):
        capture(slow_s)
        event_loop_overlap(serve_s)
''')


def _server_code(site):
    return compile(_SERVER, os.path.join(site, "sglang", "srt", "model_executor",
                                         "cuda_graph_runner.py"), "exec")


def test_sampler_times_the_slow_capture_and_stops_at_the_event_loop(tmp_path):
    ns = {}
    exec(_server_code("/site"), ns)
    import threading

    # sample the main thread from a helper thread, as the probe does
    out = {}

    def sampler():
        out["s"] = startup_stacks.sample_main_thread(str(tmp_path), 0.02, 30)

    th = threading.Thread(target=sampler)
    th.start()
    ns["run_scheduler_process"](3, 0.6, 0.3)
    th.join(timeout=10)
    s = out["s"]
    assert s.stopped_by == "event loop" and s.rank == 3
    incl = startup_stacks.inclusive(s.stacks)
    slow = incl["sglang/srt/model_executor/cuda_graph_runner.py:capture_one_batch_size"]
    assert 0.45 <= slow <= s.covered_s
    # the sleep itself is C: the innermost Python frame is the capture step
    leaf = startup_stacks.innermost(s.stacks)
    assert max(leaf, key=leaf.get).endswith(":capture_one_batch_size")
    # the file it wrote is the report, and the page names the frame
    (path,) = [p for p in tmp_path.iterdir() if p.name.endswith("-startup.json")]
    data = json.loads(path.read_text())
    assert data["rank"] == 3 and data["stopped_by"] == "event loop"
    (longest, *_) = startup_stacks.spans(data["timeline"], data["covered_s"])
    assert longest[0] >= 0.45 and longest[2].endswith(":capture_one_batch_size")


def test_sampler_stops_at_its_limit_without_an_event_loop(tmp_path):
    import threading

    out = {}
    th = threading.Thread(target=lambda: out.setdefault(
        "s", startup_stacks.sample_main_thread(str(tmp_path), 0.02, 0.2)))
    th.start()
    th.join(timeout=10)
    assert out["s"].stopped_by == "limit" and out["s"].rank is None
    assert 0.15 <= out["s"].covered_s < 2


@pytest.fixture
def probe_site(tmp_path):
    """A site holding the stand-in sglang and the probes, as probe_site makes it."""
    site = tmp_path / "site"
    (site / "sglang" / "srt" / "model_executor").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "model_executor" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "model_executor" / "cuda_graph_runner.py").write_text(_SERVER)
    for name in ("sitecustomize.py", "host_time.py", "startup_stacks.py"):
        shutil.copy(os.path.join(PROBES, name), site / name)
    return site


def _run_server(site, out_dir, **env):
    code = ("import os, sglang.srt.model_executor.cuda_graph_runner as m\n"
            "if os.fork() == 0:\n"
            "    m.run_scheduler_process(1, 0.5, 0.3); os._exit(0)\n"
            "m.run_scheduler_process(0, 0.5, 0.3)\n"
            "os.wait()\n")
    e = {k: v for k, v in os.environ.items() if not k.startswith("SGLPATCH_")}
    e.update(PYTHONPATH=str(site), SGLPATCH_PROBE_DIR=str(out_dir),
             SGLPATCH_STARTUP_STACKS_INTERVAL="0.02", **env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True,
                          text=True, timeout=60)


def test_sitecustomize_samples_every_process_of_the_server(probe_site, tmp_path):
    out = tmp_path / "probe"
    res = _run_server(probe_site, out, SGLPATCH_STARTUP_STACKS="1")
    assert res.returncode == 0, res.stderr
    files = sorted(out.glob("*-startup.json"))
    reports = [json.loads(p.read_text()) for p in files]
    # the parent and its forked child: one file each, each with its rank
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert all(r["build"] == str(probe_site) and r["stopped_by"] == "event loop" for r in reports)
    page = subprocess.run([sys.executable, os.path.join(PROBES, "startup_stacks.py"), str(out),
                           "--rank", "1"], capture_output=True, text=True, timeout=60)
    assert page.returncode == 0, page.stderr
    assert "## site, rank 1" in page.stdout and "## site, rank 0" not in page.stdout
    assert "`sglang/srt/model_executor/cuda_graph_runner.py:capture_one_batch_size`" in page.stdout


def test_sitecustomize_leaves_the_sampler_off_without_its_switch(probe_site, tmp_path):
    out = tmp_path / "probe"
    res = _run_server(probe_site, out)
    assert res.returncode == 0, res.stderr
    assert not list(out.glob("*-startup.json"))


def test_page_refuses_bad_input_in_one_line(tmp_path):
    cmd = [sys.executable, os.path.join(PROBES, "startup_stacks.py")]
    res = subprocess.run(cmd + [str(tmp_path / "missing")], capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.strip().endswith("not a directory")
    assert res.stderr.strip().count("\n") == 0
    res = subprocess.run(cmd + [str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 1 and "no scheduler's *-startup.json" in res.stderr
    (tmp_path / "9-startup.json").write_text("[1, 2]")
    res = subprocess.run(cmd + [str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2 and "not a startup-stacks file" in res.stderr
    assert res.stderr.strip().count("\n") == 0
