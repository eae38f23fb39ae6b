"""CPU test of `benchmark/e2e.py run` end to end, against the stand-in
sglang of standin_sglang.py, whose journal gives the order of events: with
--side-by-side all servers serve at once and their repeats interleave;
without it each server is gone before the next starts.  The results file
must hold every point.
"""

import os
import subprocess
import sys

import pytest

from standin_sglang import E2E, FAST_PACE, START_SPACING_S, run_e2e as _run

sys.path.insert(0, os.path.join(os.path.dirname(E2E)))
import report  # noqa: E402
import results  # noqa: E402


@pytest.mark.slow
def test_side_by_side_servers_overlap_and_repeats_interleave(tmp_path):
    events, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "12345")
    ups = [e for e in events if e["event"] == "up"]
    downs = [e for e in events if e["event"] == "down"]
    assert len(ups) == 2 and len(downs) == 2
    # both served at once: the second came up before the first went down
    assert max(e["t"] for e in ups) < min(e["t"] for e in downs)
    for e in ups:
        argv = e["argv"]
        assert argv[argv.index("--max-total-tokens") + 1] == "12345"
        # an idle server must not busy-poll beside the one being measured
        assert "--sleep-on-idle" in argv
    # each has a torch.distributed store port of its own, apart from every
    # server's HTTP port (server.server_ports)
    stores = [int(e["argv"][e["argv"].index("--nccl-port") + 1]) for e in ups]
    assert len(set(stores)) == 2 and not set(stores) & {e["port"] for e in ups}
    # the bench points alternate between the two servers at every (rep, c),
    # the call's order on the first repeat and reversed on the second, so
    # neither build is always measured first
    ports = [e["port"] for e in events if e["event"] == "bench"]
    assert len(ports) == 2 * 2 * 2
    first, second = ports[0], ports[1]
    assert first != second
    assert ports == [first, second] * 2 + [second, first] * 2
    concs = [e["concurrency"] for e in events if e["event"] == "bench"]
    assert concs == [1, 1, 4, 4, 1, 1, 4, 4]
    runs = {(r["variant"], r["concurrency"]): r for r in data["runs"]}
    assert sorted(runs) == [("base", 1), ("base", 4), ("upstream-0.5.13", 1),
                            ("upstream-0.5.13", 4)]
    assert all(r["repeats"] == 2 for r in runs.values())
    # each variant's numbers came from its own server (TPOT encodes the port)
    assert runs[("base", 1)]["tpot_ms_median"] != runs[("upstream-0.5.13", 1)]["tpot_ms_median"]
    assert data["bench"]["side_by_side"] is True and data["bench"]["max_total_tokens"] == 12345
    assert data["bench"]["turn"] == "alternating"
    # each repeat says which it was, so a build's repeat pairs with base's same one
    assert all([x["rep"] for x in r["samples"]] == [0, 1] for r in runs.values())
    pairs = {e["concurrency"]: e for e in results.paired_ratios(data)}
    assert sorted(pairs) == [1, 4] and all(e["paired_by"] == "repeat" for e in pairs.values())
    up, base = runs[("upstream-0.5.13", 1)]["samples"], runs[("base", 1)]["samples"]
    assert pairs[1]["ratios"] == [round(u["tpot_ms"] / b["tpot_ms"], 4) for u, b in zip(up, base)]
    starts = data["server_starts"]
    assert [s["side_by_side"] for s in starts] == [2, 2]


def _captures(events):
    """{port: (capture begin, capture end)} from the stand-in's journal."""
    out = {}
    for e in events:
        if e["event"] in ("capture_begin", "capture_end"):
            out.setdefault(e["port"], {})[e["event"]] = e["t"]
    return {p: (x["capture_begin"], x["capture_end"]) for p, x in out.items()}


# a capture several times longer than the spacing of two side-by-side starts
CAPTURE_S = 4 * START_SPACING_S


@pytest.mark.slow
def test_side_by_side_servers_capture_one_after_another(tmp_path):
    # each capture takes CAPTURE_S: started START_SPACING_S apart they would overlap
    events, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "12345",
                        env={"FAKE_CAPTURE_S": str(CAPTURE_S)})
    (a_begin, a_end), (b_begin, b_end) = sorted(_captures(events).values())
    assert a_end <= b_begin
    assert data["bench"]["start"] == "after capture"


@pytest.mark.slow
def test_side_by_side_start_together_overlaps_the_captures(tmp_path):
    events, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "12345",
                        "--start-together", env={"FAKE_CAPTURE_S": str(CAPTURE_S)})
    (a_begin, a_end), (b_begin, b_end) = sorted(_captures(events).values())
    assert b_begin < a_end
    assert data["bench"]["start"] == "together"


@pytest.mark.slow
def test_a_server_without_cuda_graphs_gates_the_next_once_it_serves(tmp_path):
    start_s = 4 * START_SPACING_S  # a start-up longer than the spacing of two starts
    events, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "12345",
                        env={"FAKE_NO_CAPTURE": "1", "FAKE_START_S": str(start_s)})
    assert not _captures(events)
    # no capture line: the gate is the server serving, so the second launched
    # after the first came up (its own start then takes start_s more)
    ups = sorted(e["t"] for e in events if e["event"] == "up")
    assert ups[1] - ups[0] >= start_s


@pytest.mark.slow
def test_default_runs_one_server_at_a_time(tmp_path):
    events, data = _run(tmp_path)
    life = [e for e in events if e["event"] in ("up", "down")]
    assert [e["event"] for e in life] == ["up", "down", "up", "down"]
    assert "--max-total-tokens" not in life[0]["argv"]
    ports = [e["port"] for e in events if e["event"] == "bench"]
    first = life[0]["port"]
    # all of the first server's points, then all of the second's
    assert ports[:4] == [first] * 4 and first not in ports[4:]
    assert len(data["runs"]) == 4 and data["bench"]["side_by_side"] is False
    assert [g["sha256"] for g in data["greedy_runs"]][0] == data["greedy_runs"][1]["sha256"]


def test_side_by_side_needs_a_fixed_kv_pool(tmp_path):
    res = subprocess.run([sys.executable, E2E, "run", "--side-by-side"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--max-total-tokens" in res.stderr


@pytest.mark.slow
def test_profiles_of_each_server_plain_then_with_stack(tmp_path):
    events, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "1", "--no-bench",
                        "--profile-steps", "6", "--profile-stack-steps", "2")
    asked = [(e["port"], e["event"]["start_profile"]) for e in events
             if isinstance(e["event"], dict) and "start_profile" in e["event"]]
    # both servers plain first, then both with Python stacks
    assert [(r["activities"], r["with_stack"], r["num_steps"]) for _, r in asked] == [
        (["GPU"], False, 6), (["GPU"], False, 6),
        (["CPU", "GPU"], True, 2), (["CPU", "GPU"], True, 2)]
    assert asked[0][0] != asked[1][0]
    profiles = {(p["variant"], p["with_stack"]): p for p in data["profiles"]}
    assert len(profiles) == 4 and not data.get("errors")
    for (var, stack), p in profiles.items():
        assert p["steps"] == (2 if stack else 6) and p["concurrency"] == 1
        # the trace's own numbers: one kernel and one 50 us gap a forward
        # (the last forward's gap is outside the window)
        assert p["gpu_kernels_per_step"] == 1
        idle = 50 * (p["steps"] - 1) / p["steps"]
        assert p["gpu_idle_us_per_step"] == round(idle, 3)
        assert p["trace"].endswith(("-gpu.trace.json.gz", "-stack.trace.json.gz"))
        assert os.path.exists(tmp_path / "work" / "profiles" / p["trace"])
    # each variant's profile came from its own server (kernel length = port)
    assert profiles[("base", False)]["gpu_busy_us_per_step"] != \
        profiles[("upstream-0.5.13", False)]["gpu_busy_us_per_step"]


@pytest.mark.slow
def test_profiles_of_every_tensor_parallel_rank(tmp_path):
    _, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "1", "--no-bench",
                   "--profile-steps", "4", "--tp", "2")
    assert not data.get("errors")
    by = {(p["variant"], p["rank"]): p for p in data["profiles"]}
    assert sorted(by) == [("base", 0), ("base", 1), ("upstream-0.5.13", 0), ("upstream-0.5.13", 1)]
    for (var, rank), p in by.items():
        assert p["tp"] == 2 and p["trace"].endswith(f"-gpu-rank{rank}.trace.json.gz")
        assert os.path.exists(tmp_path / "work" / "profiles" / p["trace"])
    # each rank's numbers come from its own trace
    assert by[("base", 1)]["gpu_busy_us_per_step"] == by[("base", 0)]["gpu_busy_us_per_step"] + 1
    assert all(g["tp"] == 2 for g in data["greedy_runs"])


@pytest.mark.slow
def test_profiles_with_requests_arriving_are_marked_and_kept_apart(tmp_path):
    events, data = _run(tmp_path, "--profile-steps", "4", "--profile-arrivals",
                        "--profile-concurrency", "1", "--concurrency", "1", "--repeats", "1",
                        variants=("base",))
    assert not data.get("errors") and data["runs"]
    (p,) = data["profiles"]
    assert p["arrivals"] is True and p["concurrency"] == 1 and "window_start_tokens" not in p
    assert p["trace"].endswith("-c1-arrivals-gpu.trace.json.gz")
    assert len([e for e in events if isinstance(e["event"], dict)
                and "start_profile" in e["event"]]) == 1
    # the page names the trace's kind, and gives it no bench-timed forward
    # (that is steady decode's), though the file has a point at c=1
    page = report.render(data, "x.json")
    table = page.split("## Profiles")[1].split("###")[0]
    assert len([line for line in table.splitlines() if "| gpu, arrivals |" in line]) == 1
    assert "bench forward" not in table


@pytest.mark.slow
def test_greedy_logprobs_give_each_server_its_difference_from_base(tmp_path):
    _, data = _run(tmp_path, "--no-bench", "--greedy-logprobs", "3")
    assert not data.get("errors")
    diffs = {(g["variant"], g["speculative"]): g.get("logprob_max_diff_vs_base")
             for g in data["greedy_runs"]}
    # the stand-in gives every server the same logprobs
    assert diffs == {("base", "EAGLE3"): 0.0, ("upstream-0.5.13", "EAGLE3"): 0.0}
    _, data = _run(tmp_path / "off", "--no-bench")
    assert all("logprob_max_diff_vs_base" not in g for g in data["greedy_runs"])


def test_profile_arrivals_without_a_profile_is_refused(tmp_path):
    res = subprocess.run([sys.executable, E2E, "run", "--profile-arrivals",
                          "--work-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "--profile-arrivals needs --profile-steps" in res.stderr
    assert not (tmp_path / "models-small").exists()


@pytest.mark.slow
def test_disaggregated_decode_servers_use_the_fake_transfer(tmp_path):
    events, data = _run(tmp_path, "--no-bench", "--disaggregation-decode")
    for e in [e for e in events if e["event"] == "up"]:
        argv = e["argv"]
        assert argv[argv.index("--disaggregation-mode") + 1] == "decode"
        assert argv[argv.index("--disaggregation-transfer-backend") + 1] == "fake"
        assert "--sleep-on-idle" not in argv  # one server at a time
    assert {g["disaggregation"] for g in data["greedy_runs"]} == {"decode"}
    hosts = [e["event"]["generate_bootstrap_host"] for e in events
             if isinstance(e["event"], dict) and "generate_bootstrap_host" in e["event"]]
    assert hosts and set(hosts) == {"2.2.2.2"}  # the fake transfer's marker


@pytest.mark.slow
def test_server_starts_record_the_series_start_line(tmp_path):
    # a patched scheduler says at start which patches are in and whether the
    # per-step seq_lens host pull is on: the results keep it per server
    _, data = _run(tmp_path, env={"FAKE_SGLPATCH_LINE": "1"})
    lines = [s.get("sglpatch_line") for s in data["server_starts"]]
    assert len(lines) == 2
    assert all(x.startswith("patches 0001-0008 applied by sglpatch") and
               x.endswith("per-step seq_lens host pull off: every attention backend of the "
                          "decode step reads device lengths") for x in lines)
    # an unpatched server prints none, and its record has no such key
    _, plain = _run(tmp_path / "plain")
    assert all("sglpatch_line" not in s for s in plain["server_starts"])


@pytest.mark.slow
def test_server_starts_count_the_prefills_run_in_a_graph(tmp_path):
    # sglang's log line per prefill batch says whether it ran in a CUDA
    # graph: each server's record counts both kinds once its group is done
    _, data = _run(tmp_path, env={"FAKE_PREFILL_GRAPH": "True"})
    starts = data["server_starts"]
    assert len(starts) == 2
    assert all(s["prefill_batches_with_graph"] > 0 for s in starts)
    assert all(s["prefill_batches_without_graph"] == 0 for s in starts)
    _, eager = _run(tmp_path / "eager", env={"FAKE_PREFILL_GRAPH": "False"})
    assert all(s["prefill_batches_with_graph"] == 0 and s["prefill_batches_without_graph"] > 0
               for s in eager["server_starts"])
    # a log without the line: the record has neither key
    _, plain = _run(tmp_path / "plain")
    assert all("prefill_batches_with_graph" not in s for s in plain["server_starts"])


@pytest.mark.slow
def test_default_backend_launches_without_the_flag(tmp_path):
    # what users run: no --attention-backend, sglang picks; the records keep
    # "default" as the backend's name
    events, data = _run(tmp_path, "--attention-backend", "default,triton")
    argvs = [e["argv"] for e in events if e["event"] == "up"]
    with_flag = [a[a.index("--attention-backend") + 1] for a in argvs if "--attention-backend" in a]
    assert len(argvs) == 4 and with_flag == ["triton", "triton"]
    assert sorted({r["attention_backend"] for r in data["runs"]}) == ["default", "triton"]


@pytest.mark.slow
def test_a_partial_series_is_one_more_server_of_the_comparison(tmp_path):
    """Bisecting the series: base, patched-through-0004 and upstream side by
    side, each under its own name in the results and ordered by build."""
    sys.path.insert(0, os.path.dirname(E2E))  # the harness modules
    import report
    import results

    events, data = _run(tmp_path, "--side-by-side", "--max-total-tokens", "12345",
                        "--concurrency", "1", variants=("base", "patched-through-0004",
                                                        "upstream-0.5.13"))
    ups = [e for e in events if e["event"] == "up"]
    assert len(ups) == 3
    assert max(e["t"] for e in ups) < min(e["t"] for e in events if e["event"] == "down")
    names = {r["variant"] for r in data["runs"]}
    assert names == {"base", "patched-through-0004", "upstream-0.5.13"}
    # the bench's TTFT and ITL tail are kept with each point
    assert {r["ttft_ms_median"] for r in data["runs"]} == {10.0}
    assert all(r["p99_itl_ms_median"] == 4 * r["tpot_ms_median"] for r in data["runs"])
    results.validate(data)
    text = "\n".join(report.runs_section(data))
    at = [text.index(f"| {v} ") for v in ("base", "patched-through-0004", "upstream-0.5.13")]
    assert at == sorted(at)


def test_a_partial_series_needs_its_site_and_a_four_digit_count(tmp_path):
    for spec, msg in (("patched-through-0004", "needs =SITE"),
                      ("patched-through-4=/x", "unknown variant")):
        res = subprocess.run([sys.executable, E2E, "run", "--variant", spec],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode != 0 and msg in res.stderr + res.stdout, res.stderr


def test_a_start_up_may_take_the_time_left_less_the_margin(monkeypatch):
    """run.start_timeout, on a made-up clock: a start-up may take at most
    what is left of --deadline-s less 20 s (never under 10 s, never over
    900 s), so a server that never becomes ready is given up with time left
    for the results and the logs."""
    import run

    class Left:  # a run with `left` seconds to its --deadline-s
        def __init__(self, left):
            self.left = left

        def time_left(self):
            return self.left

    monkeypatch.delenv("SGLPATCH_BENCH_START_TIMEOUT_S", raising=False)
    assert run.start_timeout(Left(70)) == 50
    assert run.start_timeout(Left(25)) == 10
    assert run.start_timeout(Left(float("inf"))) == 900
    assert run.start_timeout(Left(600)) == 580
    # the tests' cap (benchmark/pace.py) only ever shortens the wait
    monkeypatch.setenv("SGLPATCH_BENCH_START_TIMEOUT_S", "1")
    assert run.start_timeout(Left(70)) == 1
    assert run.start_timeout(Left(0)) == 1


@pytest.mark.slow
def test_a_start_up_that_outlives_the_deadline_is_given_up_in_time(tmp_path):
    """A device call is killed at its limit with nothing returned: servers
    that never become ready must fail before --deadline-s, leaving the
    results file and its errors. The start-up's limit under --deadline-s is
    checked on a made-up clock above; here the stand-in never starts and
    that limit is cut to 1 s (SGLPATCH_BENCH_START_TIMEOUT_S), so the run
    shows it gives the start-up up at its limit, not at the deadline."""
    import json

    from standin_sglang import make_site, port_block

    site = make_site(tmp_path)
    out = tmp_path / "out"
    env = dict(os.environ, FAKE_JOURNAL=str(tmp_path / "j.jsonl"), FAKE_START_S="300",
               PYTHONPATH=site, SGLPATCH_BENCH_START_TIMEOUT_S="1", **FAST_PACE)
    with port_block() as port_base:  # no other run's server answers on its port
        res = subprocess.run([sys.executable, E2E, "run", "--variant", f"base={site}",
                              "--preset", "tiny", "--speculative", "none",
                              "--piecewise", "default", "--concurrency", "1", "--card", "FAKE",
                              "--deadline-s", "70", "--port-base", str(port_base),
                              "--work-dir", str(tmp_path / "work"), "--out-dir", str(out)],
                             env=env, capture_output=True, text=True, timeout=110)
    (path,) = [p for p in out.iterdir() if p.suffix == ".json"]
    errors = json.loads(path.read_text())["errors"]
    assert any("server not ready in 1.0s" in e for e in errors), (errors, res.stdout[-2000:])


def _three_side_by_side(tmp_path, base, up13, up17):
    """`e2e.py run` of three builds side by side on the stand-in (sites
    base, up13, up17; up17 serves), which must exit 1 for one build's error
    -> results."""
    import json

    from standin_sglang import port_block

    out = tmp_path / "out"
    env = dict(os.environ, FAKE_JOURNAL=str(tmp_path / "j.jsonl"), PYTHONPATH=up17, **FAST_PACE)
    with port_block() as port_base:
        res = subprocess.run([sys.executable, E2E, "run", "--variant", f"base={base}",
                              "--variant", f"upstream-0.5.13={up13}", "--variant",
                              f"upstream-0.5.17={up17}", "--preset", "tiny",
                              "--speculative", "EAGLE3", "--piecewise", "default",
                              "--concurrency", "1", "--repeats", "2", "--min-seconds", "0.5",
                              "--greedy-prompts", "3", "--greedy-new-tokens", "4",
                              "--card", "FAKE", "--side-by-side", "--max-total-tokens", "12345",
                              "--start-together", "--port-base", str(port_base),
                              "--work-dir", str(tmp_path / "work"), "--out-dir", str(out)],
                             env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    (path,) = [p for p in out.iterdir() if p.suffix == ".json"]
    return json.loads(path.read_text())


@pytest.mark.slow
def test_a_build_that_cannot_start_leaves_the_others_measured(tmp_path):
    """Side by side, one build whose server exits at start-up (upstream
    0.5.17 without deep_gemm in its kit did) is an error of its own; the
    servers beside it still give their greedy outputs and every repeat."""
    from standin_sglang import make_site

    site = make_site(tmp_path)
    bad = make_site(tmp_path / "bad")
    with open(os.path.join(bad, "sglang", "launch_server.py"), "w") as fh:
        fh.write("import sys\nprint(\"ModuleNotFoundError: No module named 'deep_gemm'\")\n"
                 "sys.exit(1)\n")
    data = _three_side_by_side(tmp_path, site, bad, site)
    (error,) = data["errors"]
    assert error.startswith("upstream-0.5.13-") and "server exited" in error
    runs = {r["variant"]: r for r in data["runs"]}
    assert sorted(runs) == ["base", "upstream-0.5.17"]
    assert all(r["repeats"] == 2 for r in runs.values())
    assert sorted(g["variant"] for g in data["greedy_runs"]) == ["base", "upstream-0.5.17"]
    assert [e["ratios"] for e in results.paired_ratios(data)]


@pytest.mark.slow
def test_a_build_that_dies_at_its_first_request_leaves_the_others_measured(tmp_path):
    """Side by side, one build whose server exits at its first generation
    (unpatched 0.5.12.post1 at sglang's own EAGLE parameters, a topk-4 tree
    on spec v2, did: a device-side assert) is an error of its own, and the
    servers beside it still give their greedy outputs and every repeat."""
    from standin_sglang import make_site

    site = make_site(tmp_path)
    bad = make_site(tmp_path / "bad")
    launcher = os.path.join(bad, "sglang", "launch_server.py")
    with open(launcher) as fh:
        text = fh.read()
    serve = '        if self.path != "/generate":\n            return self._send({"success": True})\n'
    assert serve in text
    with open(launcher, "w") as fh:  # a scheduler that aborts at its first decode
        fh.write(text.replace(serve, serve + "        os._exit(134)\n"))
    data = _three_side_by_side(tmp_path, bad, site, site)
    (error,) = data["errors"]
    assert error.startswith("base-") and ": greedy: " in error
    assert error.endswith("(its process exited)")
    assert len(data["server_starts"]) == 3  # it started
    runs = {r["variant"]: r for r in data["runs"]}
    assert sorted(runs) == ["upstream-0.5.13", "upstream-0.5.17"]
    assert all(r["repeats"] == 2 for r in runs.values())
    assert sorted(g["variant"] for g in data["greedy_runs"]) == ["upstream-0.5.13",
                                                                 "upstream-0.5.17"]


@pytest.mark.slow
def test_servers_keep_compiled_kernels_under_the_work_dir(tmp_path):
    """flashinfer's, Triton's and sglang's JIT (tvm-ffi) kernel caches go
    under the run's work dir (in /tmp on the GPU machine, which a warm
    machine keeps), shared by the builds; a cache the caller chose is kept."""
    events, _ = _run(tmp_path, "--side-by-side", "--max-total-tokens", "12345")
    work = str(tmp_path / "work")
    caches = [e["jit_cache"] for e in events if e["event"] == "up"]
    assert len(caches) == 2 and caches[0] == caches[1]
    assert caches[0] == {"FLASHINFER_WORKSPACE_BASE": os.path.join(work, "jit-cache", "flashinfer"),
                         "TRITON_CACHE_DIR": os.path.join(work, "jit-cache", "triton"),
                         "TVM_FFI_CACHE_DIR": os.path.join(work, "jit-cache", "tvm-ffi")}
    mine = str(tmp_path / "my-flashinfer")
    events, _ = _run(tmp_path / "mine", env={"FLASHINFER_WORKSPACE_BASE": mine})
    (first, *_) = [e["jit_cache"] for e in events if e["event"] == "up"]
    assert first["FLASHINFER_WORKSPACE_BASE"] == mine
    assert first["TRITON_CACHE_DIR"] == os.path.join(str(tmp_path / "mine" / "work"), "jit-cache", "triton")


def fake_topology(root, cpus, per_core=1):
    """A sysfs CPU tree where `cpus` form cores of `per_core` siblings."""
    for i, cpu in enumerate(cpus):
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text("0\n")
        (topo / "core_id").write_text(f"{i // per_core}\n")
    return str(root)


def pinnable_topology(tmp_path):
    """(the CPUs this process may use, a sysfs tree under tmp_path where the
    first two are cores of their own: a server's and the bench client's);
    skips the test where there are fewer than two."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs to pin a server and the client apart")
    return allowed, fake_topology(tmp_path / "sys", allowed[:2])


def test_pin_sets_give_whole_cores_and_the_client_one():
    import cpus

    cores = [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]]
    servers, harness = cpus.pin_sets(cores, 2)
    # 8 cores: 3 each for two servers, the client one plus the one left over
    assert servers == [[0, 1, 2, 8, 9, 10], [3, 4, 5, 11, 12, 13]]
    assert harness == [6, 7, 14, 15]
    assert cpus.cpu_list(servers[0]) == "0-2,8-10" and cpus.cpu_list([5]) == "5"
    assert cpus.pin_sets(cores[:2], 2) is None  # no core for the client
    assert cpus.pin_sets(None, 1) is None  # topology unreadable


@pytest.mark.slow
def test_pinned_server_and_client_run_on_their_own_cpus(tmp_path):
    allowed, sysfs = pinnable_topology(tmp_path)
    events, data = _run(tmp_path, "--pin-cpus", env={"SGLPATCH_CPU_SYSFS": sysfs})
    ups = [e for e in events if e["event"] == "up"]
    assert ups and all(e["cpus"] == [allowed[0]] for e in ups)
    benches = [e for e in events if e["event"] == "bench"]
    assert benches and all(e["cpus"] == [allowed[1]] for e in benches)
    assert data["bench"]["pin_cpus"] is True
    assert [s["cpus"] for s in data["server_starts"]] == [str(allowed[0])] * len(ups)


@pytest.mark.slow
def test_too_few_cores_to_pin_runs_unpinned_and_says_so(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    # one core (two siblings) cannot hold two side-by-side servers and the client
    sysfs = fake_topology(tmp_path / "sys", allowed[:2], per_core=2)
    events, data = _run(tmp_path, "--pin-cpus", "--side-by-side", "--max-total-tokens", "999",
                        env={"SGLPATCH_CPU_SYSFS": sysfs})
    assert all(e["cpus"] == allowed for e in events if e["event"] in ("up", "bench"))
    assert data["bench"]["pin_cpus"] is False
    assert all("cpus" not in s for s in data["server_starts"])
    log = (tmp_path / "out" / "e2e-log.txt").read_text()
    assert "cannot give each of 2 server(s) and the bench client its own; not pinned" in log
