"""CPU tests of the host-time probe (benchmark/probes/host_time.py): the
scheduler's time is cut into iterations at each run_batch call, decode
iterations after the skip are kept per batch size with the wrapped
functions' calls and time, methods, classmethods and module functions are
wrapped, and a build that lacks a target is left alone."""

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import types

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBES = os.path.join(REPO, "benchmark", "probes")
sys.path.insert(0, PROBES)
import host_time  # noqa: E402


class Clock:
    """A clock the test advances: 1 us per tick() call."""

    def __init__(self):
        self.ns = 0

    def __call__(self):
        return self.ns

    def tick(self, us):
        self.ns += int(us * 1000)


def fake_sglang(clock):
    sched = types.ModuleType("fake_scheduler")

    class Scheduler:
        tp_rank = 1

        def run_batch(self, batch):
            clock.tick(30)
            return self.helper()

        def helper(self):
            clock.tick(5)
            return "result"

        def recv_requests(self):
            clock.tick(100)

    def broadcast_pyobj(x):
        clock.tick(7)
        return x

    sched.Scheduler, sched.broadcast_pyobj = Scheduler, broadcast_pyobj

    fbi = types.ModuleType("fake_forward_batch_info")

    class ForwardBatch:
        @classmethod
        def init_new(cls, batch):
            clock.tick(11)
            return cls()

    fbi.ForwardBatch = ForwardBatch
    return sched, fbi


def batch(bs, decode=True):
    return types.SimpleNamespace(reqs=[object()] * bs,
                                 forward_mode=types.SimpleNamespace(is_decode=lambda: decode))


def test_iterations_by_batch_size_with_inclusive_function_times(tmp_path):
    clock = Clock()
    times = host_time.HostTimes(str(tmp_path), skip=1, dump_every=1000, clock=clock)
    sched, fbi = fake_sglang(clock)
    wrapped = host_time.instrument(
        sched, ["Scheduler.run_batch", "Scheduler.recv_requests", "broadcast_pyobj",
                "Scheduler.not_in_this_build", "NoSuchClass.method"], times)
    assert wrapped == ["Scheduler.run_batch", "Scheduler.recv_requests", "broadcast_pyobj"]
    assert host_time.instrument(fbi, ["ForwardBatch.init_new"], times) == ["ForwardBatch.init_new"]
    s = sched.Scheduler()
    # iteration = run_batch start to the next run_batch start
    for b in (batch(4), batch(4), batch(2, decode=False), batch(4), batch(8), batch(8)):
        s.recv_requests()
        sched.broadcast_pyobj(1)
        assert s.run_batch(b) == "result"
        assert isinstance(fbi.ForwardBatch.init_new(b), fbi.ForwardBatch)  # still a classmethod
        clock.tick(1000 if b.reqs and len(b.reqs) == 8 else 0)
    s.recv_requests()
    sched.broadcast_pyobj(1)
    s.run_batch(batch(1))  # closes the last bs=8 iteration
    r = times.report()
    assert r["rank"] == 1
    by = r["by_batch_size"]
    # the first decode iteration is skipped, the extend one is not kept
    assert sorted(by) == ["4", "8"]
    assert by["4"]["iterations"] == 2 and by["8"]["iterations"] == 2
    f4 = by["4"]["functions"]
    # run_batch 35 us (helper inside it is not wrapped), init_new 11; the
    # iteration also holds the next recv_requests and broadcast (107 us)
    assert f4["Scheduler.run_batch"] == [1, 35.0]
    assert f4["ForwardBatch.init_new"] == [1, 11.0]
    assert f4["Scheduler.recv_requests"] == [1, 100.0]
    assert f4["broadcast_pyobj"] == [1, 7.0]
    assert by["4"]["iteration_us"] == 35 + 11 + 100 + 7
    # outside the loop phases (recv_requests, run_batch here): 11 + 7 us
    assert f4["(rest of the loop)"] == [1, 18.0]
    assert by["8"]["iteration_us"] == 35 + 11 + 1000 + 100 + 7
    assert by["4"]["iteration_us_p50_p90_p99"] == [153.0, 153.0, 153.0]
    times.dump()
    (path,) = tmp_path.glob("*-host.json")
    assert json.loads(path.read_text())["by_batch_size"]["8"]["iterations"] == 2


def _write_host(tmp_path, build, rank, by_batch_size):
    d = tmp_path / f"{os.path.basename(build)}-{rank}"
    d.mkdir()
    (d / "1-host.json").write_text(json.dumps({
        "pid": 1, "rank": rank, "build": build, "by_batch_size": by_batch_size}))


def test_table_puts_builds_side_by_side(tmp_path):
    for build, us in (("/tmp/sb", 100.0), ("/tmp/sp", 120.0)):
        row = {"iterations": 10, "iteration_us": us,
               "functions": {"Scheduler.run_batch": [1, us / 2], "tiny": [1, 1.0]}}
        if build == "/tmp/sp":
            row["iteration_us_p50_p90_p99"] = [1, 2, 3]
        _write_host(tmp_path, build, 0, {"1": row})
    out = subprocess.run([sys.executable, os.path.join(PROBES, "host_time.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert "### batch size 1, rank 0" in out
    assert "| (iteration) | 10 it, 100.0 us | 10 it, 120.0 us (p50/p90/p99 1 / 2 / 3) |" in out
    assert "| Scheduler.run_batch | 1 / 50 | 1 / 60 |" in out
    assert "tiny" not in out  # under 5 us in every build


def test_sitecustomize_loads_host_time_beside_the_relay_counter(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLPATCH_PROBE_DIR", str(tmp_path))
    monkeypatch.setenv("SGLPATCH_HOST_TIME", "1")
    spec = importlib.util.spec_from_file_location("probe_site", os.path.join(PROBES, "sitecustomize.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, mod._AfterImport)]
    hooks = mod._HOOKS
    assert "Event.synchronize" in host_time.TARGETS["torch.cuda.streams"]
    # overlap_utils gets both the relay counter and the timers
    assert len(hooks["sglang.srt.managers.overlap_utils"]) == 2
    assert set(host_time.TARGETS) <= set(hooks)


def test_extra_targets_come_from_the_environment(tmp_path, monkeypatch, capsys):
    spec = ("sglang.srt.managers.scheduler:Scheduler.send_output, pkg.mod:helper,"
            "pkg.mod:Cls.meth,pkg.mod:helper,no-colon")
    merged = host_time.targets_with_extra(spec)
    # a name already timed is not added twice; new modules and names are
    assert merged["sglang.srt.managers.scheduler"].count("Scheduler.send_output") == 1
    assert merged["pkg.mod"] == ["helper", "Cls.meth"]
    assert "no-colon" in capsys.readouterr().err
    assert host_time.targets_with_extra("") == host_time.TARGETS
    # the hooks the server installs cover them, and wrap what a module has
    monkeypatch.setenv(host_time.EXTRA_ENV, "pkg.mod:helper,pkg.mod:Cls.meth,pkg.mod:absent")
    import gc

    before = list(gc.callbacks)
    hooks = host_time.hooks(str(tmp_path))
    for callback in [c for c in gc.callbacks if c not in before]:
        gc.callbacks.remove(callback)  # hooks() times collections for the server's life
    module = types.ModuleType("pkg.mod")
    module.helper = lambda x: x + 1

    class Cls:
        def meth(self):
            return 7
    module.Cls = Cls
    assert hooks["pkg.mod"](module) == ["helper", "Cls.meth"]
    assert module.helper(1) == 2 and Cls().meth() == 7


@contextlib.contextmanager
def timed_collections(tmp_path):
    """(clock, times, gc callback) with the callback installed; removed after."""
    import gc

    clock = Clock()
    times = host_time.HostTimes(str(tmp_path), skip=0, clock=clock)
    callback = host_time.time_gc(times)
    try:
        yield clock, times, callback
    finally:
        gc.callbacks.remove(callback)


def test_garbage_collections_are_counted_in_the_open_iteration(tmp_path):
    import gc

    with timed_collections(tmp_path) as (clock, times, callback):
        times.new_iteration(batch(2))
        callback("start", {"generation": 2})
        clock.tick(40)
        callback("stop", {"generation": 2})
        gc.collect(0)  # a real collection is counted too, as gen 0
        clock.tick(10)
        times.new_iteration(batch(2))
    f = times.report()["by_batch_size"]["2"]["functions"]
    assert f["(gc gen 2)"] == [1, 40.0]
    assert f["(gc gen 0)"][0] >= 1


def test_collections_are_totalled_with_what_they_freed(tmp_path):
    with timed_collections(tmp_path) as (_, times, callback):
        times.new_iteration(batch(1))
        for collected in (3, 4):
            callback("start", {"generation": 0})
            callback("stop", {"generation": 0, "collected": collected})
        times.new_iteration(batch(1))
    assert times.report()["gc"]["0"] == {"runs": 2, "collected": 7}


class Cyclic:
    """Each instance refers to itself: only the cycle collector frees it."""

    def __init__(self):
        self.me = self


def test_garbage_window_names_what_a_step_leaves_to_the_collector(tmp_path):
    import gc

    times = host_time.HostTimes(str(tmp_path), skip=2, clock=Clock())
    times.garbage = host_time.GarbageWindow(iterations=5)
    try:
        for i in range(12):
            times.new_iteration(batch(3))
            Cyclic()  # one cycle per step, freed only by the collector
            [0] * 3  # freed by reference counting: never reaches the window
    finally:
        gc.set_debug(0)
    summary = times.report()["gc_garbage"]
    kinds = dict((k, n) for k, n in summary["kinds"])
    # the window covers decode iterations 3..7 of the loop: 5 cycles
    assert kinds[f"{__name__}.Cyclic"] == 5
    assert summary["iterations"] == 5 and summary["objects"] >= 5
    assert not any("list" in k for k in kinds)
    assert gc.get_debug() == 0 and gc.garbage == []
    table = host_time.table([dict(times.report(), build="/tmp/sp", rank=0)])
    assert "Cyclic" in table and "garbage per decode iteration" in table


def test_stream_wait_micro_says_it_needs_a_gpu():
    micro = os.path.join(os.path.dirname(host_time.__file__), "stream_wait_micro.py")
    res = subprocess.run([sys.executable, micro], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        "stream_wait_micro.py: needs a CUDA device (run it on the GPU machine)"]


def test_shared_code_row_is_the_geometric_mean_of_per_call_ratios(tmp_path):
    # two shared functions: 1.2x and 1.1x slower per call in the second build
    # (calls differ, so per-call time matters); an unshared one is left out
    fns = {
        "/tmp/sb": {"assign_req_to_token_pool_func": [1, 10.0],
                    "EAGLEDraftCudaGraphRunner.replay": [2, 40.0],
                    "Scheduler.run_batch": [1, 100.0]},
        "/tmp/sp": {"assign_req_to_token_pool_func": [1, 12.0],
                    "EAGLEDraftCudaGraphRunner.replay": [1, 22.0],
                    "Scheduler.run_batch": [1, 300.0]},
    }
    for build, functions in fns.items():
        _write_host(tmp_path, build, 0, {
            "1": {"iterations": 5, "iteration_us": 100.0, "functions": functions,
                  "iteration_us_p50_p90_p99": [100.0 if build == "/tmp/sb" else 126.4, 0, 0]}})
    n, ratio = host_time.shared_code_ratio(
        {"functions": fns["/tmp/sp"]}, {"functions": fns["/tmp/sb"]})
    assert n == 2 and abs(ratio - (1.2 * 1.1) ** 0.5) < 1e-9
    out = host_time.table(host_time.load([str(tmp_path)]))
    assert "| (shared code: time per call / first build's) | 1 | 1.149 (2 functions) |" in out
    # 1.264 / 1.149: the second build's step is 10% longer at the same host speed
    assert "| (iteration p50 / first build's, over the shared-code ratio) | 1 | 1.100 |" in out
    # no shared function run by both builds: no row
    assert host_time.shared_code_ratio({"functions": {}}, {"functions": fns["/tmp/sb"]}) is None


# Patch 0012 moves part of Triton's replay metadata into the graphs and 0018
# plans flashinfer's graph replays from host lengths, so each backend's
# replay metadata is shared code only between builds without that patch.
@pytest.mark.parametrize("function, shared_before", [
    ("TritonAttnBackend.init_forward_metadata_replay_cuda_graph", ("--before-0012",)),
    ("FlashInferAttnBackend.init_forward_metadata_replay_cuda_graph",
     ("--before-0018", "--before-0012")),
])
def test_replay_metadata_is_shared_code_only_before_its_patch(tmp_path, capsys, function,
                                                              shared_before):
    for build, us in (("/tmp/sb", 10.0), ("/tmp/sp", 40.0)):
        _write_host(tmp_path, build, 0, {"1": {
            "iterations": 5, "iteration_us": 100.0,
            "functions": {"assign_req_to_token_pool_func": [1, 10.0], function: [1, us]}}})
    assert host_time.main([str(tmp_path)]) == 0
    assert "| 1 | 1.000 (1 functions) |" in capsys.readouterr().out
    for before in shared_before:
        assert host_time.main([before, str(tmp_path)]) == 0
        assert "| 1 | 2.000 (2 functions) |" in capsys.readouterr().out
    if "--before-0018" not in shared_before:
        assert host_time.main(["--before-0018", str(tmp_path)]) == 0
        assert "| 1 | 1.000 (1 functions) |" in capsys.readouterr().out
    assert function not in host_time.SHARED_CODE
    assert host_time.main(["--before-0013", str(tmp_path)]) == 2


def _function_source(path, qualname):
    import ast

    with open(path) as f:
        nodes = ast.parse(f.read()).body
    node = None
    for part in qualname.split("."):
        node = next((n for n in nodes if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                     and n.name == part), None)
        assert node is not None, f"{qualname} not in {path}"
        nodes = node.body
    return ast.dump(node)


def test_shared_code_is_left_alone_by_the_series():
    # The installed sglang has the series applied; sglpatch keeps the pristine
    # bytes of every file it touched, by hash, beside its state file.
    spec = importlib.util.find_spec("sglang")
    pkg = spec.submodule_search_locations[0]
    with open(os.path.join(pkg, ".sglpatch-state.json")) as f:
        state = json.load(f)
    assert state["applied"], "the series must be applied for this check"
    modules = {name: mod for mod, names in host_time.TARGETS.items() for name in names}
    for name in host_time.SHARED_CODE:
        assert name in modules, f"{name} is not a probe target"
        rel = os.path.join(*modules[name].split(".")[1:]) + ".py"
        entry = state["files"].get(rel)
        pristine = (os.path.join(pkg, ".sglpatch-pristine", entry["before"])
                    if entry else os.path.join(pkg, rel))
        assert _function_source(pristine, name) == _function_source(
            os.path.join(pkg, rel), name), f"the series changes {name}"


def test_pool_from_weights_each_batch_size_by_its_iterations(tmp_path):
    # sizes 16 (3 iterations) and 32 (1) pool; size 8 is below the cut
    _write_host(tmp_path, "/tmp/sb", 0, {
        "8": {"iterations": 100, "iteration_us": 1.0, "functions": {"f": [1, 1.0]}},
        "16": {"iterations": 3, "iteration_us": 100.0,
               "functions": {"f": [1, 40.0], "g": [2, 20.0]}},
        "32": {"iterations": 1, "iteration_us": 200.0, "functions": {"f": [1, 80.0]}}})
    (r,) = host_time.pool_batch_sizes(host_time.load([str(tmp_path)]), 16)
    row = r["by_batch_size"]["16+"]
    assert list(r["by_batch_size"]) == ["16+"]
    assert row["iterations"] == 4 and row["iteration_us"] == 125.0
    # f: (3*40 + 80) / 4; g ran only at size 16: 3/4 of its calls and time
    assert row["functions"]["f"] == [1.0, 50.0]
    assert row["functions"]["g"] == [1.5, 15.0]


def test_pooled_table_compares_means_over_the_shared_code_ratio(tmp_path):
    shared = "assign_req_to_token_pool_func"
    for build, it_us, shared_us in (("/tmp/sb", 100.0, 10.0), ("/tmp/sp", 110.0, 11.0)):
        _write_host(tmp_path, build, 0, {
            "20": {"iterations": 2, "iteration_us": it_us,
                   "iteration_us_p50_p90_p99": [it_us, it_us, it_us],
                   "functions": {shared: [1, shared_us], "Scheduler.run_batch": [1, 50.0]}}})
    res = subprocess.run([sys.executable, os.path.join(PROBES, "host_time.py"),
                          "--pool-from", "16", str(tmp_path)],
                         capture_output=True, text=True, check=True)
    out = res.stdout
    assert "### batch sizes 16 and up, pooled by iterations, rank 0" in out
    assert "| (iteration) | 2 it, 100.0 us | 2 it, 110.0 us |" in out
    assert "| (shared code: time per call / first build's) | 1 | 1.100 (1 functions) |" in out
    # 10% longer iterations on a 10% slower host: the build's own share is 1.00
    assert "| (iteration mean / first build's, over the shared-code ratio) | 1 | 1.000 |" in out


def test_pool_from_refuses_bad_input_in_one_line(tmp_path):
    probe = os.path.join(PROBES, "host_time.py")
    for args, rc in ((["--pool-from", "x"], 2), (["--pool-from"], 2), (["--pool-from", "0"], 2),
                     (["--pool-from", "64", str(tmp_path)], 1)):
        res = subprocess.run([sys.executable, probe, *args], capture_output=True, text=True)
        assert res.returncode == rc and res.stdout == ""
        assert res.stderr.strip().count("\n") == 0 and res.stderr.startswith("host_time: ")
