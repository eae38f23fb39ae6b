"""benchmark/trace_steps.py on a hand-made chrome trace whose answer is known."""

import gzip
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmark"))

import trace_steps  # noqa: E402

SCHED = "/tmp/sp/sglang/srt/managers/scheduler.py"
OUTPUT = "/tmp/sp/sglang/srt/managers/scheduler_output_processor_mixin.py"
HOST = {"pid": 7, "tid": 11}


def x(cat, name, ts, dur, **where):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **(where or HOST)}


def gpu(name, ts, dur, stream=7, cat="kernel"):
    return x(cat, name, ts, dur, pid=0, tid=stream)


def py(name, ts, dur, **where):
    return x("python_function", name, ts, dur, **where)


def two_step_trace():
    """Two forwards over 0..800 us.  GPU: busy 0-200 (two streams overlap),
    idle 200-500, busy 500-610 (a kernel, then a device->host copy), idle
    610-700, busy 700-800.  The scheduler thread is in process_batch_result
    (inside a torch call) during the first gap, in get_next_batch_to_run
    during the second."""
    return [
        gpu("verify", 0, 100), gpu("draft", 100, 50), gpu("extend", 120, 80, stream=9),
        gpu("sample", 500, 100),
        gpu("Memcpy DtoH (Device -> Pinned)", 600, 10, cat="gpu_memcpy"),
        gpu("draft", 700, 100),
        x("cuda_runtime", "cudaGraphLaunch", 0, 10), x("cuda_runtime", "cudaGraphLaunch", 480, 10),
        x("cuda_runtime", "cudaLaunchKernel", 495, 4), x("cuda_runtime", "cudaLaunchKernel", 690, 4),
        x("cuda_runtime", "cudaStreamSynchronize", 150, 40),
        py(f"{SCHED}(900): event_loop_overlap", 0, 800),
        py(f"{SCHED}(1500): run_batch", 0, 250),
        py(f"{SCHED}(1600): process_batch_result", 250, 270),
        py(f"{OUTPUT}(10): process_batch_result_decode", 260, 250),
        py("torch/_tensor.py(30): tolist", 300, 100),
        py(f"{SCHED}(1200): get_next_batch_to_run", 520, 280),
        # another thread's frames never count
        py(f"{SCHED}(77): watchdog", 0, 800, pid=7, tid=99),
        {"ph": "s", "cat": "ac2g", "name": "flow", "ts": 0, "pid": 7, "tid": 11},
    ]


def test_gpu_busy_idle_gaps_and_host_calls():
    s = trace_steps.summarize(two_step_trace(), steps=2)
    assert s["window_us_per_step"] == 400
    assert s["gpu_busy_us_per_step"] == 205  # (200 + 110 + 100) / 2
    assert s["gpu_idle_us_per_step"] == 195
    assert s["gpu_busy_fraction"] == round(410 / 800, 4)
    assert s["gpu_kernels_per_step"] == 2.5  # 5 kernels, the copy is no kernel
    assert s["device_to_host_copies_per_step"] == 0.5
    assert s["idle_gaps"][">=50us"] == {"gaps_per_step": 1, "idle_us_per_step": 195}
    assert s["idle_gaps"][">=200us"] == {"gaps_per_step": 0.5, "idle_us_per_step": 150}
    assert s["idle_gaps"][">=1000us"] == {"gaps_per_step": 0, "idle_us_per_step": 0}
    assert s["host_sync_calls_per_step"] == 0.5 and s["host_sync_us_per_step"] == 20
    assert s["runtime_calls"]["cudaGraphLaunch"] == {"calls_per_step": 1, "us_per_step": 10}
    assert list(s["runtime_calls"])[0] == "cudaStreamSynchronize"  # most host time first


def test_kernels_are_counted_by_name_without_their_arguments():
    s = trace_steps.summarize(two_step_trace(), steps=2)
    # the device-to-host copy is no kernel; the most GPU time first
    assert s["gpu_kernels_by_name"] == {"draft": [1.0, 75.0], "verify": [0.5, 50.0],
                                        "sample": [0.5, 50.0], "extend": [0.5, 40.0]}
    assert trace_steps.kernel_name(
        "void at::native::f<at::native::g<long>(int)>(int, float*)") == \
        "at::native::f<at::native::g<long>(int)>"
    # PyTorch's kernels in anonymous namespaces keep their own names
    assert trace_steps.kernel_name(
        "void at::native::(anonymous namespace)::fill<int>(int*, int)") == \
        "at::native::(anonymous namespace)::fill<int>"
    assert trace_steps.kernel_name("_fused_metadata_kernel") == "_fused_metadata_kernel"
    # a kernel launched less than once in KERNEL_MIN_STEPS steps is left out
    once = [gpu("rare", 0, 5)] + [gpu("steady", 10 * i, 5) for i in range(8)]
    assert list(trace_steps.summarize(once, steps=8)["gpu_kernels_by_name"]) == ["steady"]


def test_idle_gaps_are_charged_to_the_scheduler_frame_and_loop_phase():
    p = trace_steps.summarize(two_step_trace(), steps=2)["python"]
    # gap 1 (300 us) is inside torch's tolist: charged to the innermost
    # sglang frame around it; gap 2 (90 us) to get_next_batch_to_run
    assert p["idle_us_per_step_by_frame"] == {
        "srt/managers/scheduler_output_processor_mixin.py: process_batch_result_decode": 150,
        "srt/managers/scheduler.py: get_next_batch_to_run": 45}
    assert p["idle_us_per_step_by_loop_phase"] == {
        "srt/managers/scheduler.py: process_batch_result": 150,
        "srt/managers/scheduler.py: get_next_batch_to_run": 45}
    assert p["host_us_per_step_by_loop_phase"] == {
        "srt/managers/scheduler.py: get_next_batch_to_run": 140,
        "srt/managers/scheduler.py: process_batch_result": 135,
        "srt/managers/scheduler.py: run_batch": 125}


def test_idle_gaps_are_charged_to_the_speculative_workers_phase():
    """A gap during the draft extend's eager forward goes to
    _draft_extend_for_decode (the frame under forward_batch_generation),
    whatever frame deeper down ran; one outside the worker to neither."""
    worker = "/tmp/sp/sglang/srt/speculative/eagle_worker_v2.py"
    ev = [gpu("verify", 0, 100), gpu("extend", 400, 100), gpu("draft", 700, 100),
          x("cuda_runtime", "cudaLaunchKernel", 0, 5),
          py(f"{SCHED}(1): event_loop_overlap", 0, 800),
          py(f"{SCHED}(2): run_batch", 0, 600),
          py(f"{worker}(10): forward_batch_generation", 0, 600),
          py(f"{worker}(20): verify", 0, 150),
          py(f"{worker}(30): _draft_extend_for_decode", 150, 450),
          py("/tmp/sp/sglang/srt/layers/layernorm.py(5): forward_cuda", 200, 100),
          py(f"{SCHED}(3): get_next_batch_to_run", 600, 200)]
    p = trace_steps.summarize(ev, steps=1)["python"]
    # gaps: 100-400 (middle 250: in layernorm under the draft extend),
    # 500-700 (middle 600: the worker has returned; get_next_batch_to_run)
    assert p["idle_us_per_step_by_spec_phase"] == {
        "srt/speculative/eagle_worker_v2.py: _draft_extend_for_decode": 300,
        "(outside a speculative forward)": 200}
    assert p["idle_us_per_step_by_frame"]["srt/layers/layernorm.py: forward_cuda"] == 300


def test_small_gaps_are_launch_latency_not_charged():
    ev = [gpu("a", 0, 100), gpu("b", 110, 100),  # a 10 us gap
          x("cuda_runtime", "cudaLaunchKernel", 0, 5),
          py(f"{SCHED}(1): event_loop_overlap", 0, 300),
          py(f"{SCHED}(2): run_batch", 0, 300)]
    s = trace_steps.summarize(ev, steps=1)
    assert s["gpu_idle_us_per_step"] == 10
    assert s["python"]["idle_us_per_step_by_frame"] == {}
    assert s["python"]["host_us_per_step_by_loop_phase"] == {
        "srt/managers/scheduler.py: run_batch": 300}


def test_python_frames_filed_under_another_thread_id_are_found():
    ev = [e for e in two_step_trace() if e.get("tid") != 99]
    for e in ev:
        if e["cat"] == "python_function":
            e["tid"] = 12  # the runtime calls are on tid 11
    p = trace_steps.summarize(ev, steps=2)["python"]
    assert sum(p["idle_us_per_step_by_frame"].values()) == 195


def test_host_self_time_finds_python_frames_filed_under_another_thread_id():
    """The trace may file the launching thread's Python frames under another
    thread id than its operators and runtime calls: the host-work split
    still charges the Python its own time, as with one id."""
    ev = host_work_trace()
    for e in ev:
        if e["cat"] == "python_function" and e.get("tid") != 99:
            e["tid"] = 12  # the operators and runtime calls stay on tid 11
    moved = trace_steps.summarize(ev, steps=1)["python"]
    same = trace_steps.summarize(host_work_trace(), steps=1)["python"]
    for k in ("host_self_us_per_step_by_kind", "host_self_us_per_step", "operator_calls_per_step",
              "triton_launches_per_step", "graph_launches_per_step",
              "host_self_us_per_step_by_sglang_frame"):
        assert moved[k] == same[k], k
    assert moved["host_self_us_per_step_by_sglang_frame"] == {
        "srt/managers/scheduler.py: run_batch": 400}


def test_no_python_section_without_stack_and_error_without_gpu():
    plain = [e for e in two_step_trace() if e["cat"] != "python_function"]
    assert "python" not in trace_steps.summarize(plain, steps=2)
    try:
        trace_steps.summarize([e for e in plain if e["pid"] == 7], steps=2)
    except ValueError as e:
        assert "no GPU events" in str(e)
    else:
        raise AssertionError("a trace without GPU events must be refused")


def test_short_frame_drops_site_and_line():
    assert trace_steps.short_frame(f"{SCHED}(1234): run_batch") == \
        "srt/managers/scheduler.py: run_batch"
    assert trace_steps.short_frame("torch/_tensor.py(30): tolist") == "torch/_tensor.py: tolist"
    assert trace_steps.short_frame("<built-in method item>") == "<built-in method item>"


def test_cli_reads_a_gzipped_trace(tmp_path):
    path = tmp_path / "x-TP-0.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": two_step_trace()}, fh)
    out = subprocess.run([sys.executable, os.path.join(REPO, "benchmark", "trace_steps.py"),
                          str(path), "--steps", "2"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["gpu_idle_us_per_step"] == 195


def issued(kernel, call, corr):
    """Link a GPU event to the runtime call that issued it, as the profiler does."""
    kernel["args"] = {"correlation": corr}
    call["args"] = {"correlation": corr}
    return [kernel, call]


def test_idle_gaps_are_split_by_the_call_that_ended_them():
    """Three gaps: 100-400 ends with a graph the host issued at 380 (the GPU
    waited on the host), 450-600 with a kernel issued at 300, before the gap
    (it waited on something else), 650-660 is launch latency (< 20 us)."""
    events = (
        [gpu("a", 0, 100)]
        + issued(gpu("verify", 400, 50), x("cuda_runtime", "cudaGraphLaunch", 380, 15), 1)
        + issued(gpu("wait", 600, 50, stream=9), x("cuda_runtime", "cudaLaunchKernel", 300, 5), 2)
        + issued(gpu("b", 660, 40), x("cuda_runtime", "cudaLaunchKernel", 640, 5), 3)
        + [gpu("c", 700, 10)]
    )
    s = trace_steps.summarize(events, steps=1)
    assert s["idle_us_per_step_by_closing_call"] == {
        "cudaGraphLaunch, issued after the GPU went idle": 300,
        "cudaLaunchKernel, issued before the GPU went idle": 150,
    }
    assert s["idle_waiting_on_host_us_per_step"] == 300
    # the hand-made trace of the other tests carries no correlation ids
    plain = trace_steps.summarize(two_step_trace(), steps=2)
    assert plain["idle_us_per_step_by_closing_call"] == {"(no issuing call in the trace)": 195}
    assert plain["idle_waiting_on_host_us_per_step"] == 0


def test_collective_kernels_time_is_measured_apart():
    """Tensor parallelism: NCCL's and the custom all-reduce kernels count as
    collectives (their wait for the other ranks included); a GEMM does not."""
    events = two_step_trace() + [
        gpu("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 820, 60),
        gpu("void cross_device_reduce_1stage<__nv_bfloat16, 2>(...)", 900, 30),
        gpu("void (anonymous namespace)::all_reduce_one_shot_push_kernel<...>", 940, 10),
        gpu("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", 950, 50),
    ]
    s = trace_steps.summarize(events, steps=2)
    assert s["gpu_collective_us_per_step"] == 50  # (60 + 30 + 10) / 2
    assert trace_steps.summarize(two_step_trace(), steps=2)["gpu_collective_us_per_step"] == 0


def _reprofile(results_path, trace_dir, *extra):
    return subprocess.run([sys.executable, os.path.join(REPO, "benchmark", "e2e.py"),
                           "reprofile", str(results_path), str(trace_dir), *extra],
                          capture_output=True, text=True)


def test_reprofile_reads_the_traces_again_and_keeps_each_points_identity(tmp_path):
    with gzip.open(tmp_path / "p-c1-gpu.trace.json.gz", "wt") as fh:
        json.dump({"traceEvents": two_step_trace()}, fh)
    profile = {"variant": "patched", "attention_backend": "default", "speculative": "EAGLE3",
               "overlap": True, "piecewise_cuda_graph": True, "concurrency": 1, "rank": 0,
               "with_stack": False, "trace": "p-c1-gpu.trace.json.gz", "steps": 2,
               "call": "run B", "gpu_idle_us_per_step": 1.0}  # a stale summary
    data = {"card": "GPU", "date": "2026-11-27", "model_preset": "small", "runs": [],
            "greedy_equivalence": [], "profiles": [profile]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    out = _reprofile(path, tmp_path)
    assert out.returncode == 0, out.stderr
    [again] = json.loads(path.read_text())["profiles"]
    assert again["gpu_idle_us_per_step"] == 195
    assert again["idle_us_per_step_by_closing_call"] == {"(no issuing call in the trace)": 195}
    assert {k: again[k] for k in profile if k != "gpu_idle_us_per_step"} == \
        {k: v for k, v in profile.items() if k != "gpu_idle_us_per_step"}
    # a trace that is not there is named, and the file is left as it was
    before = path.read_text()
    out = _reprofile(path, tmp_path / "elsewhere")
    assert out.returncode != 0 and "lacks p-c1-gpu.trace.json.gz" in out.stderr
    out = _reprofile(path, tmp_path, "--call", "run C")
    assert out.returncode != 0 and "has no profiles of call 'run C'" in out.stderr
    assert path.read_text() == before
    # two calls pooled into one file may name their traces alike: pick one
    data["profiles"].append(dict(profile, call="run C", gpu_idle_us_per_step=1.0))
    path.write_text(json.dumps(data))
    out = _reprofile(path, tmp_path)
    assert out.returncode != 0 and "name one with --call" in out.stderr
    assert _reprofile(path, tmp_path, "--call", "run C").returncode == 0
    first, third = json.loads(path.read_text())["profiles"]
    assert (first["gpu_idle_us_per_step"], third["gpu_idle_us_per_step"]) == (1.0, 195)


def test_reprofile_can_leave_the_traces_that_did_not_come_back(tmp_path):
    """A call whose profiles.tgz held only its GPU-only traces: --skip-missing
    reads those and leaves the stack profiles as they were."""
    with gzip.open(tmp_path / "p-c1-gpu.trace.json.gz", "wt") as fh:
        json.dump({"traceEvents": two_step_trace()}, fh)
    gpu_only = {"variant": "patched", "attention_backend": "default", "speculative": "EAGLE3",
                "overlap": True, "piecewise_cuda_graph": True, "concurrency": 1, "rank": 0,
                "with_stack": False, "trace": "p-c1-gpu.trace.json.gz", "steps": 2,
                "gpu_idle_us_per_step": 1.0}
    stack = dict(gpu_only, with_stack=True, trace="p-c1-stack.trace.json.gz")
    data = {"card": "GPU", "date": "2026-11-27", "model_preset": "small", "runs": [],
            "greedy_equivalence": [], "profiles": [gpu_only, stack]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    out = _reprofile(path, tmp_path)
    assert out.returncode != 0 and "lacks p-c1-stack.trace.json.gz" in out.stderr
    out = _reprofile(path, tmp_path, "--skip-missing")
    assert out.returncode == 0, out.stderr
    assert "p-c1-stack.trace.json.gz: not in" in out.stdout
    again, kept = json.loads(path.read_text())["profiles"]
    assert again["gpu_idle_us_per_step"] == 195 and "gpu_collective_us_per_step" in again
    assert kept == stack
    # a folder with none of the traces is an error even so, the file untouched
    before = path.read_text()
    out = _reprofile(path, tmp_path / "elsewhere", "--skip-missing")
    assert out.returncode != 0 and "holds none of the file's traces" in out.stderr
    assert path.read_text() == before


def host_work_trace():
    """One forward, 0..1000 us, on the launching thread: run_batch (sglang,
    0-1000) calls torch's cumsum binding (100-300), whose aten::cumsum
    (120-280) issues a cudaLaunchKernel (150-200); then len() (300-310,
    a built-in: counts as run_batch's); then Triton's JITFunction.run
    (400-600) with its driver launch (450-500, cuLaunchKernelEx); then a
    cudaGraphLaunch (700-760) and a cudaStreamSynchronize (800-900).  A
    nested aten op (aten::copy_ inside aten::to) is one operator call."""
    return [
        gpu("k", 0, 1000),
        py(f"{SCHED}(1500): run_batch", 0, 1000),
        py("<built-in method cumsum of type object at 0x7f>", 100, 200),
        x("cpu_op", "aten::cumsum", 120, 160),
        x("cuda_runtime", "cudaLaunchKernel", 150, 50),
        py("<built-in function len>", 300, 10),
        x("cpu_op", "aten::to", 320, 40),
        x("cpu_op", "aten::copy_", 330, 20),
        py("/usr/lib/python3/site-packages/triton/runtime/jit.py(695): run", 400, 200),
        x("cuda_driver", "cuLaunchKernelEx", 450, 50),
        x("cuda_runtime", "cudaGraphLaunch", 700, 60),
        x("cuda_runtime", "cudaStreamSynchronize", 800, 100),
        # another thread's work never counts
        py(f"{SCHED}(77): watchdog", 0, 1000, pid=7, tid=99),
    ]


def test_host_self_time_is_split_by_the_kind_of_work():
    p = trace_steps.summarize(host_work_trace(), steps=1)["python"]
    assert p["host_self_us_per_step_by_kind"] == {
        "CUDA graph launches": 60,
        "other CUDA runtime calls": 100,       # cudaLaunchKernel 50 + cuLaunchKernelEx 50
        "host syncs": 100,
        "PyTorch operators (C++)": 150,        # cumsum 160-50, to 40-20, copy_ 20
        "Triton launcher (Python)": 150,       # run 200 less its driver call
        "sglang Python": 400,                  # run_batch 1000 - 610 below it, + len 10
        "PyTorch Python": 40}                  # the cumsum binding 200 - 160
    assert p["host_self_us_per_step"] == 1000  # every microsecond once
    assert p["operator_calls_per_step"] == 2      # cumsum, to (copy_ is inside to)
    assert p["triton_launches_per_step"] == 1
    assert p["graph_launches_per_step"] == 1
    assert p["host_self_us_per_step_by_sglang_frame"] == {
        "srt/managers/scheduler.py: run_batch": 400}
