"""CPU tests of `benchmark/e2e.py run --one-client`, against the stand-in
sglang: each build's bench points normally run its own site's
bench_serving; with --one-client the first build's times every server, and
the results file names that build."""

import os

import pytest

from standin_sglang import run_e2e


def _bench_sites(events):
    return {os.path.basename(e["site"]) for e in events if e["event"] == "bench"}


@pytest.mark.slow
def test_each_build_is_timed_by_its_own_client_by_default(tmp_path):
    events, data = run_e2e(tmp_path, "--side-by-side", "--max-total-tokens", "12345",
                           own_sites=("upstream-0.5.13",))
    assert _bench_sites(events) == {"site", "site-upstream-0.5.13"}
    assert "client" not in data["bench"]


@pytest.mark.slow
def test_one_client_times_every_server_with_the_first_builds_client(tmp_path):
    events, data = run_e2e(tmp_path, "--side-by-side", "--max-total-tokens", "12345",
                           "--one-client", own_sites=("upstream-0.5.13",))
    benches = [e for e in events if e["event"] == "bench"]
    # both servers measured, every point by base's site's bench_serving
    assert len({e["port"] for e in benches}) == 2
    assert _bench_sites(events) == {"site"}
    assert data["bench"]["client"] == "base"
    assert {r["variant"] for r in data["runs"]} == {"base", "upstream-0.5.13"}
