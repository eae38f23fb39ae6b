"""CPU tests of benchmark/server.py's start time, against the stand-in sglang
(standin_sglang.py): side by side, a server's wait_ready() is called only
after the later servers were launched, so its start must be timed from its
launch to the moment it first served, not to that call."""

import json
import os
import sys
import time

import pytest

from standin_sglang import E2E, make_site, port_block

sys.path.insert(0, os.path.dirname(E2E))
from server import (Server, free_port, prefill_graph_counts,  # noqa: E402
                    prefill_graphs_captured)


@pytest.fixture
def port_base():
    with port_block() as base:
        yield base


def _server(tmp_path, port_base, start_timeout=60, **fake_env):
    site = make_site(tmp_path)
    env = dict(os.environ, FAKE_JOURNAL=str(tmp_path / "journal.jsonl"), PYTHONPATH=site,
               FAKE_NO_CAPTURE="1", **fake_env)
    cmd = [sys.executable, "-m", "sglang.launch_server", "--port", str(free_port(port_base))]
    return Server(cmd, env, str(tmp_path / "server.log"), start_timeout=start_timeout)


def _up_at(tmp_path):
    (up,) = [e["t"] for e in map(json.loads, (tmp_path / "journal.jsonl").read_text().splitlines())
             if e["event"] == "up"]
    return up


@pytest.mark.slow
def test_start_counts_until_the_server_served_not_until_wait_ready(tmp_path, port_base):
    srv = _server(tmp_path, port_base)
    launched = time.time()
    srv.launch()
    try:
        # the other servers of the group start meanwhile: wait_ready() comes
        # well after the stand-in serves, however slow the machine is
        while not (tmp_path / "journal.jsonl").exists() or not _has_up(tmp_path):
            time.sleep(0.05)
        time.sleep(4)
        called = time.time() - launched
        srv.wait_ready()
        served = _up_at(tmp_path) - launched  # the stand-in listens from "up" on
        # found serving by the readiness poll after it came up, not by the call
        assert served - 0.1 <= srv.start_s < called - 1
    finally:
        srv.__exit__()


def _has_up(tmp_path):
    return any(json.loads(line)["event"] == "up"
               for line in (tmp_path / "journal.jsonl").read_text().splitlines() if line)


@pytest.mark.slow
def test_the_start_timeout_counts_from_the_launch(tmp_path, port_base):
    # a start-up that hangs; the caller comes to wait_ready() after its timeout
    srv = _server(tmp_path, port_base, start_timeout=3, FAKE_START_S="60")
    srv.launch()
    try:
        time.sleep(4)
        t0 = time.time()
        with pytest.raises(TimeoutError, match="not ready in 3s"):
            srv.wait_ready()
        # the timeout had passed already: no further wait, so a server
        # launched early cannot hold the run past its deadline
        assert time.time() - t0 < 2.5  # not another 3 s timeout, on a loaded machine too
        assert srv.start_s is None
    finally:
        srv.__exit__()


def test_prefill_graph_counts_read_sglangs_prefill_lines(tmp_path):
    log = tmp_path / "server.log"
    prefill = ("[2026-11-30 05:10:56] Prefill batch, #new-seq: 1, #new-token: 256, "
               "#cached-token: 0, token usage: 0.04, #running-req: 8, #queue-req: 0, "
               "#pending-token: 0, cuda graph: {}, input throughput (token/s): 12029.95\n")
    log.write_text(prefill.format("True") * 3 + prefill.format("False")
                   + "[2026-11-30 05:10:56] Decode batch, #running-req: 8, cuda graph: True\n"
                   + "[2026-11-30 05:08:00] Capture cuda graph begin.\n")
    assert prefill_graph_counts(str(log)) == {"prefill_batches_with_graph": 3,
                                              "prefill_batches_without_graph": 1}
    log.write_text("[2026-11-30 05:08:00] Capture cuda graph begin.\n")
    assert prefill_graph_counts(str(log)) is None
    assert prefill_graph_counts(str(tmp_path / "missing.log")) is None


def test_prefill_graphs_captured_read_each_builds_start(tmp_path):
    log = tmp_path / "server.log"
    # the series with the trial patch: the piecewise runner's own lines
    log.write_text("[2026-11-30 08:25:36] Piecewise CUDA graph serves the EAGLE target's prefill\n"
                   "[2026-11-30 08:26:20] Piecewise CUDA graph serves the EAGLE3 draft's prefill\n")
    assert prefill_graphs_captured(str(log)) == ["target", "draft"]
    # upstream 0.5.17's capture lines
    log.write_text("[2026-11-30 08:24:45] Capture target prefill CUDA graph begin. backend=breakable\n"
                   "[2026-11-30 08:24:58] Capture draft prefill CUDA graph begin. backend=breakable\n")
    assert prefill_graphs_captured(str(log)) == ["target", "draft"]
    # the series (0023) alone
    log.write_text("[2026-11-30 08:25:36] Piecewise CUDA graph serves the EAGLE target's prefill\n")
    assert prefill_graphs_captured(str(log)) == ["target"]
    # base: the piecewise graphs are captured, for no EAGLE prefill
    log.write_text("[2026-11-30 08:25:36] Capture piecewise CUDA graph begin. avail mem=65 GB\n")
    assert prefill_graphs_captured(str(log)) is None
    assert prefill_graphs_captured(str(tmp_path / "missing.log")) is None
