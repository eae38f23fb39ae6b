"""CPU tests of `e2e.py run --side-by-side --keep-servers` (benchmark/keep.py)
against the stand-in sglang: a run leaves its servers running and lists
them; the next run with the same launch measures them without starting
any; a run with another launch, or without the switch, stops them first."""

import json
import os
import subprocess
import sys

import pytest

from standin_sglang import E2E, FAST_PACE, make_site, port_block

sys.path.insert(0, os.path.dirname(E2E))
import keep  # noqa: E402
from server import group_alive  # noqa: E402


def _run(tmp_path, *extra, kv="12345", check=True, env_extra=None):
    site = str(tmp_path / "site")
    if not os.path.isdir(site):
        site = make_site(tmp_path)  # once: a site made anew is another server
    env = dict(os.environ, FAKE_JOURNAL=str(tmp_path / "journal.jsonl"), PYTHONPATH=site,
               **FAST_PACE, **(env_extra or {}))
    out = tmp_path / "out"
    if out.exists():
        for p in out.iterdir():
            p.unlink()
    cmd = [sys.executable, E2E, "run", "--variant", f"base={site}",
           "--variant", f"upstream-0.5.13={site}", "--preset", "tiny",
           "--speculative", "EAGLE3", "--piecewise", "default", "--concurrency", "1",
           "--repeats", "1", "--min-seconds", "0.5", "--greedy-prompts", "2",
           "--greedy-new-tokens", "4", "--card", "FAKE", "--side-by-side",
           "--max-total-tokens", kv, "--work-dir", str(tmp_path / "work"),
           "--out-dir", str(out), "--port-base", (tmp_path / "port-base").read_text(), *extra]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def _events(tmp_path):
    journal = tmp_path / "journal.jsonl"
    if not journal.exists():  # no server has done anything yet
        return []
    return [json.loads(x) for x in journal.read_text().splitlines()]


def _results(tmp_path):
    (path,) = [p for p in (tmp_path / "out").iterdir() if p.suffix == ".json"]
    return json.loads(path.read_text())


@pytest.fixture
def work(tmp_path):
    # one block of ports for the test's runs: the kept servers hold theirs
    # from one run to the next
    with port_block() as port_base:
        (tmp_path / "port-base").write_text(str(port_base))
        yield tmp_path
        # never leave a stand-in server behind
        for r in keep.load(str(tmp_path / "work")):
            keep.stop(r["pgid"])


@pytest.mark.slow
def test_a_kept_server_is_measured_again_without_a_start(work):
    _run(work, "--keep-servers")
    kept = keep.load(str(work / "work"))
    assert len(kept) == 2 and all(group_alive(r["pgid"]) for r in kept)
    first = _events(work)
    assert [e["event"] for e in first].count("up") == 2
    assert "down" not in [e["event"] for e in first]

    _run(work, "--keep-servers")
    events = _events(work)[len(first):]
    # no server started: the benches ran on the kept servers' ports
    assert [e["event"] for e in events].count("up") == 0
    benched = {e["port"] for e in events if e["event"] == "bench"}
    assert benched == {r["port"] for r in kept}
    starts = _results(work)["server_starts"]
    assert all(s["reused"] for s in starts)
    assert sorted(s["start_s"] for s in starts) == sorted(r["start_s"] for r in kept)
    assert keep.load(str(work / "work")) == kept  # kept again for the next run


@pytest.mark.slow
def test_a_server_still_starting_at_the_deadline_is_kept_for_the_next_run(work):
    # the first run gives each server half a second to start; they take 3 s
    first = _run(work, "--keep-servers", check=False,
                 env_extra={"SGLPATCH_BENCH_START_TIMEOUT_S": "0.5", "FAKE_START_S": "3"})
    kept = keep.load(str(work / "work"))
    assert len(kept) == 2 and all(group_alive(r["pgid"]) for r in kept)
    assert all(r["start_s"] is None and r["launched_at"] for r in kept)
    assert first.returncode == 1
    assert sum("kept starting" in e for e in _results(work)["errors"]) == 2
    assert "bench" not in [e["event"] for e in _events(work)]
    n = len(_events(work))

    _run(work, "--keep-servers")
    events = _events(work)[n:]
    # no new launch: the two servers the first run kept came up and were measured
    assert sorted(e["port"] for e in _events(work) if e["event"] == "up") == \
        sorted(r["port"] for r in kept)
    assert {e["port"] for e in events if e["event"] == "bench"} == {r["port"] for r in kept}
    starts = _results(work)["server_starts"]
    assert all(s["reused"] and s["start_spans_calls"] for s in starts)
    # from the first run's launch to the second run's look: at least the 3 s start
    assert all(s["start_s"] >= 3 for s in starts)
    again = keep.load(str(work / "work"))
    assert [r["pgid"] for r in again] == [r["pgid"] for r in kept]
    assert all(r["start_s"] >= 3 for r in again)


@pytest.mark.slow
def test_a_run_with_another_launch_stops_the_kept_servers_first(work):
    _run(work, "--keep-servers")
    old = keep.load(str(work / "work"))
    n = len(_events(work))
    _run(work, "--keep-servers", kv="23456")
    events = _events(work)[n:]
    downs = [e for e in events if e["event"] == "down"]
    ups = [e for e in events if e["event"] == "up"]
    # the old ones went down before either new one came up
    assert sorted(e["port"] for e in downs) == sorted(r["port"] for r in old)
    assert len(ups) == 2 and max(e["t"] for e in downs) < min(e["t"] for e in ups)
    assert not any(group_alive(r["pgid"]) for r in old)
    assert all("reused" not in s for s in _results(work)["server_starts"])


@pytest.mark.slow
def test_a_run_without_the_switch_leaves_nothing_running(work):
    _run(work, "--keep-servers")
    old = keep.load(str(work / "work"))
    _run(work)
    assert not any(group_alive(r["pgid"]) for r in old)
    assert keep.load(str(work / "work")) == []
    assert not (work / "work" / keep.REGISTRY).exists()


def test_keep_servers_needs_side_by_side(tmp_path):
    res = subprocess.run([sys.executable, E2E, "run", "--keep-servers", "--card", "FAKE",
                          "--work-dir", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2 and "--keep-servers needs --side-by-side" in res.stderr


def test_fingerprint_ignores_the_port_and_sees_the_site(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    env = {"PYTHONPATH": str(site), "HOME": "/x", "SGLPATCH_HOST_TIME": "1"}
    cmd = ["python", "-m", "sglang.launch_server", "--port", "30000", "--tp", "2"]
    fp = keep.fingerprint("base-x", cmd, env)
    assert keep.fingerprint("base-x", cmd[:4] + ["30010"] + cmd[5:], env) == fp
    assert keep.fingerprint("base-x", cmd, dict(env, HOME="/y")) == fp  # not what it runs
    assert keep.fingerprint("patched-x", cmd, env) != fp  # another build of the run
    assert keep.fingerprint("base-x", cmd, dict(env, SGLPATCH_HOST_TIME="0")) != fp
    assert keep.fingerprint("base-x", cmd[:-1] + ["4"], env) != fp
    assert keep.fingerprint("base-x", cmd, env, cpus={1, 2}) != fp
    # the harness's own pacing is not what the server runs
    assert keep.fingerprint("base-x", cmd, dict(env, SGLPATCH_BENCH_START_TIMEOUT_S="1")) == fp
    # the site made anew (rm -rf, then a copy): another server
    site.rename(tmp_path / "old")
    site.mkdir()
    assert keep.fingerprint("base-x", cmd, env) != fp


def test_prune_logs_keeps_the_running_servers_logs(tmp_path):
    (tmp_path / "pair0").mkdir()
    for name in ("server-a.log", "bench-a-c1-r0.log", "pair0/server-b.log", "pair0/bench.log"):
        (tmp_path / name).write_text("x")
    keep.save(str(tmp_path / "pair0"), [{"tag": "b", "pgid": 1, "port": 1,
                                         "log_path": str(tmp_path / "pair0" / "server-b.log")}])
    res = subprocess.run([sys.executable, os.path.join(os.path.dirname(E2E), "keep.py"),
                          "prune-logs", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.log"))
    assert left == ["pair0/server-b.log"]
    res = subprocess.run([sys.executable, os.path.join(os.path.dirname(E2E), "keep.py"),
                          "prune-logs", str(tmp_path / "nope")], capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.strip().endswith("not a directory")


def test_a_broken_registry_is_one_line(tmp_path):
    (tmp_path / keep.REGISTRY).write_text("{not json")
    with pytest.raises(SystemExit) as e:
        keep.load(str(tmp_path))
    assert "not a kept-servers list" in str(e.value) and "\n" not in str(e.value)
