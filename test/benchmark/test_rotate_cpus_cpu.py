"""--rotate-cpus: before each repeat every server of a side-by-side
comparison moves, all its processes and threads, to the next server's CPU
set, so no build keeps one place (its cores, its neighbours) for the whole
call."""

import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmark"))

import cpus  # noqa: E402
import run  # noqa: E402
import server  # noqa: E402

# A stand-in server's process tree: the launcher with a second thread, and a
# child process (sglang's scheduler) with one of its own; all idle. Each says
# it is up in one write: print() under PYTHONUNBUFFERED writes the text and
# its newline apart, and the two processes' lines could interleave.
TREE = r"""
import os, sys, threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
if os.fork() == 0:
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    os.write(1, b"child\n")
    time.sleep(600)
    os._exit(0)
os.write(1, b"parent\n")
time.sleep(600)
"""


@pytest.fixture
def two_trees():
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs to move a server between")
    procs = []
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
        assert sorted([p.stdout.readline().strip(), p.stdout.readline().strip()]) == [
            "child", "parent"]
        procs.append(p)
    yield procs, [[allowed[0]], [allowed[1]]]
    for p in procs:
        os.killpg(p.pid, 9)
        p.wait()


def _affinities(pgid):
    return [sorted(os.sched_getaffinity(t)) for t in server.group_threads(pgid)]


class _Member:
    def __init__(self, tag, proc, launch_set):
        self.tag = tag
        self.srv = type("Srv", (), {"proc": proc, "cpus": launch_set})()


def test_group_threads_finds_every_thread_of_the_tree(two_trees):
    procs, _ = two_trees
    for _ in range(50):  # the threads start right after the lines are printed
        tids = server.group_threads(procs[0].pid)
        if len(tids) >= 4:
            break
        time.sleep(0.1)
    assert len(tids) == 4  # two processes, two threads each
    assert not set(tids) & set(server.group_threads(procs[1].pid))


def test_each_repeat_moves_every_server_to_the_next_set(two_trees):
    procs, sets = two_trees
    st = object.__new__(run.Run)
    st.server_cpus = sets
    logged = []
    st.log = logged.append
    group = [_Member("base", procs[0], sets[0]), _Member("patched", procs[1], sets[1])]
    seen = []
    for rep in range(4):
        run.rotate_places(st, group, rep)
        seen.append([m.cpus_now for m in group])
        for m in group:
            assert _affinities(m.srv.proc.pid) == [m.cpus_now] * 4
    # never one set for both, and each build on each set as often
    assert seen == [[sets[0], sets[1]], [sets[1], sets[0]]] * 2
    assert len(logged) == 4
    # back to its launch set (what a kept server's fingerprint names)
    for m in group:
        run.place_group(st, m, m.srv.cpus)
        assert _affinities(m.srv.proc.pid) == [m.srv.cpus] * 4


def test_rotated_places_visit_every_set_once_in_k_repeats():
    for k in (1, 2, 3, 4):
        for rep in range(2 * k):
            places = [cpus.rotated_place(i, rep, k) for i in range(k)]
            assert sorted(places) == list(range(k))  # one server a set
        for i in range(k):
            assert sorted(cpus.rotated_place(i, rep, k) for rep in range(k)) == list(range(k))


def test_rotation_without_pinned_side_by_side_servers_is_refused(tmp_path):
    from standin_sglang import E2E

    for extra in ([], ["--side-by-side", "--max-total-tokens", "999"], ["--pin-cpus"]):
        res = subprocess.run([sys.executable, E2E, "run", "--work-dir", str(tmp_path),
                              "--preset", "tiny", "--rotate-cpus", *extra],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and "--rotate-cpus" in res.stderr, res.stderr
    assert not (tmp_path / "models-tiny").exists()


@pytest.mark.slow
def test_profiles_before_rotated_repeats_leave_the_run_whole(tmp_path):
    # the profiles are taken before the repeats; the rotation's way back to
    # the launch sets is registered after them, and must still be
    from standin_sglang import run_e2e
    from test_side_by_side_cpu import pinnable_topology

    allowed, sysfs = pinnable_topology(tmp_path)
    events, data = run_e2e(tmp_path, "--pin-cpus", "--side-by-side", "--max-total-tokens", "999",
                           "--rotate-cpus", "--profile-steps", "2", "--concurrency", "1",
                           "--repeats", "2", env={"SGLPATCH_CPU_SYSFS": sysfs},
                           variants=("base",))
    assert not data.get("errors")
    assert len(data["profiles"]) == 1
    (run_,) = data["runs"]
    assert [s["cpus"] for s in run_["samples"]] == [str(allowed[0])] * 2
