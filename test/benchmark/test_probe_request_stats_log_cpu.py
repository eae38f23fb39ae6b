"""CPU tests of benchmark/probes/request_stats_log.py: sglang's per-request
time stats lines, per server and stage, from a call's logs at any depth."""

import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(REPO, "benchmark", "probes", "request_stats_log.py")
sys.path.insert(0, os.path.dirname(PROBE))
import request_stats_log  # noqa: E402
from log_probe_cli import assert_refuses_bad_input  # noqa: E402


def unified(queue_ms, output_len=256, rank=""):
    # as 0.5.12.post1's Req.log_time_stats writes it on an aggregated server
    return (f"[2026-11-29 01:02:03{rank}] ReqTimeStats(rid=9f1c, input_len=256, "
            f"cached_input_len=0, output_len={output_len}, type=unified): "
            f"queue_duration={queue_ms:.2f}ms, forward_duration=700.00ms, "
            f"entry_time=1796000000.123\n")


def decode(alloc_wait_ms, queue_ms, output_len=256):
    # as 0.5.12.post1's Req.log_time_stats writes it on a decode-only server
    # whose handshake time was recorded
    return ("[2026-11-29 01:02:03] ReqTimeStats(rid=77, bootstrap_room=12, input_len=256, "
            f"cached_input_len=0, output_len={output_len}, type=decode): "
            f"bootstrap_duration=0.25ms, alloc_wait_duration={alloc_wait_ms:.2f}ms, "
            f"transfer_duration=0.50ms, queue_duration={queue_ms:.2f}ms, "
            "forward_duration=650.00ms, entry_time=1796000000.456\n")


def test_stages_per_server_in_their_order(tmp_path):
    pair = tmp_path / "pair0"
    pair.mkdir()
    (pair / "server-base-x.log").write_text(
        unified(1.0) + "[2026-11-29 01:02:03] Decode batch, #running-req: 32\n"
        + unified(3.0, rank=" TP0") + unified(2.0)
        + unified(50.0, output_len=64))  # a greedy-check request
    (tmp_path / "server-patched-x.log").write_text(
        # a speculative server logs what its last verify accepted past the
        # limit: a bench request of 256 tokens can log 258
        decode(4.0, 2.0, output_len=258) + decode(6.0, 1.0) + decode(8.0, 3.0, output_len=257)
        + decode(90.0, 9.0, output_len=64))
    (tmp_path / "server-quiet.log").write_text("no time stats here\n")

    data = request_stats_log.collect(str(tmp_path), output_len=256)
    base, patched = data["servers"]
    assert base == {"server": "pair0/base-x", "types": ["unified"], "durations": {
        "queue_duration": {"requests": 3, "median_ms": 2.0, "p90_ms": 3.0, "mean_ms": 2.0},
        "forward_duration": {"requests": 3, "median_ms": 700.0, "p90_ms": 700.0,
                             "mean_ms": 700.0}}}
    assert patched["server"] == "patched-x" and patched["types"] == ["decode"]
    assert list(patched["durations"]) == ["bootstrap_duration", "alloc_wait_duration",
                                          "transfer_duration", "queue_duration",
                                          "forward_duration"]
    assert patched["durations"]["alloc_wait_duration"] == {
        "requests": 3, "median_ms": 6.0, "p90_ms": 8.0, "mean_ms": 6.0}
    # without the filter the greedy check's request counts too
    every = request_stats_log.collect(str(tmp_path))["servers"][0]
    assert every["durations"]["queue_duration"]["requests"] == 4


def test_a_later_release_with_more_fields_before_the_type(tmp_path):
    # upstream 0.5.17 writes attempts= between output_len= and type=
    (tmp_path / "server-upstream-0.5.17-x.log").write_text(
        "[2026-11-30 08:26:15] ReqTimeStats(rid=ef0c, input_len=256, cached_input_len=0, "
        "output_len=256, attempts=0, type=unified): queue_duration=0.30ms, "
        "forward_duration=970.28ms, entry_time=1796027174.056\n")
    (server,) = request_stats_log.collect(str(tmp_path), output_len=256)["servers"]
    assert server["types"] == ["unified"]
    assert server["durations"]["queue_duration"]["median_ms"] == 0.3
    assert server["durations"]["forward_duration"]["requests"] == 1


def test_command_prints_a_table_and_writes_json(tmp_path, capsys):
    (tmp_path / "server-base-x.log").write_text(unified(1.5))
    out = tmp_path / "stats.json"
    assert request_stats_log.main([str(tmp_path), "--out", str(out)]) == 0
    assert "| base-x | unified | queue_duration | 1 | 1.5 | 1.5 | 1.5 |" in capsys.readouterr().out
    assert json.loads(out.read_text())["servers"][0]["server"] == "base-x"


def test_bad_input(tmp_path):
    assert_refuses_bad_input(PROBE, tmp_path, "no ReqTimeStats line")
