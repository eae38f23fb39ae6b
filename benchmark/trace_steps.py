"""Where a decode step's time goes, from a torch-profiler chrome trace.

    python benchmark/trace_steps.py TRACE.json[.gz] --steps N

The trace is what sglang's /start_profile writes (torch.profiler, exported
as a chrome trace) over N scheduler forwards of steady decode.  This module
answers one question: is the step bound by the GPU or by the host?

- **GPU**: the union of all kernel / memcpy / memset intervals over the
  window from the first to the last GPU event.  `gpu_idle_us_per_step` is
  the time no GPU work ran; idle gaps are listed by size.
- **Host calls**: CUDA runtime calls per step by name (graph launches,
  kernel launches, synchronizes and how long the host sat in them), and the
  device-to-host copies the GPU performed per step.
- **What ended each idle gap**: the GPU work that started at the end of
  a gap of >= 20 us, by the runtime call that issued it (its correlation
  id), and whether that call began after the GPU went idle (the GPU waited
  for the host to issue it) or before (it waited on something else: a
  stream wait, a copy).  `idle_waiting_on_host_us_per_step` sums the
  former.  Needs no stack; works on a GPU-only trace.
- **Kernels by name**: each GPU kernel name's launches and GPU time per
  step (names cut at their argument list; those of fewer than one launch
  in KERNEL_MIN_STEPS steps left out), so that two builds' traces say which
  kernels one of them runs more of.
- **Collectives** (tensor parallelism): the time the GPU spent in
  all-reduce / all-gather kernels.  Such a kernel waits on the GPU for the
  other ranks' matching one, and the trace counts that wait as busy; so at
  TP>1 a rank whose host is ahead shows a busy GPU that is only waiting for
  the others, and the rank with the most idle time is the one whose host
  sets the pace.
- **Python** (only in a trace taken with `with_stack`): the scheduler
  thread's Python frames.  Each GPU idle gap of >= 20 us is charged to the
  innermost sglang frame the scheduler was in at the middle of the gap, and
  to the scheduler-loop phase (the frame directly under `event_loop_*`)
  around it, and to the speculative worker's phase (the frame directly
  under its `forward_batch_generation`: draft, verify, draft extend):
  what the host was busy with while the GPU starved.  Python
  tracing slows the host several-fold, so read these as shares, and take
  per-step times from a trace without it.
- **What the host did** (with `with_stack` too): the launching thread's
  time by the kind of work its innermost event was doing (self time: a
  frame's time less that of the calls inside it): CUDA graph launches,
  other CUDA runtime calls (kernel launches, copies), host syncs, PyTorch
  operators (their C++ dispatch), the Triton launcher's Python, sglang's
  own Python, PyTorch's Python (with its bindings: tensor methods, torch
  functions) and the rest; other built-in functions (len, isinstance)
  count with the frame that called them.  Also the operator, Triton and graph
  launches per forward, and the sglang frames with the most self time.

Standard library only, so a trace can be read anywhere.
"""

import argparse
import bisect
import collections
import gzip
import json

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
GAP_CHARGED_US = 20.0  # smaller gaps are launch latency, not host work
GAP_BUCKETS_US = (5, 20, 50, 200, 1000)
# gpu_kernels_by_name keeps a name launched at least once in this many steps
KERNEL_MIN_STEPS = 4
KERNEL_NAME_CHARS = 120
# kernel-name marks of collectives: NCCL's kernels, sglang's custom
# all-reduce (cross_device_reduce_*) and the other all_reduce_* kernels
COLLECTIVE_MARKS = ("nccl", "all_reduce", "allreduce", "cross_device_reduce",
                    "all_gather", "allgather", "reduce_scatter", "reducescatter")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    return data["traceEvents"] if isinstance(data, dict) else data


def complete(events, cats):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in cats
            and "dur" in e]


def busy_intervals(gpu):
    """Sorted, merged [start, end) intervals during which any GPU work ran."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu)
    merged = []
    for s, t in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], t)
        else:
            merged.append([s, t])
    return merged


def idle_gaps(merged):
    return [(a[1], b[0]) for a, b in zip(merged, merged[1:]) if b[0] > a[1]]


def per_step(x, steps):
    return round(x / steps, 3)


def runtime_table(runtime, steps):
    by = collections.defaultdict(lambda: [0, 0.0])
    for e in runtime:
        by[e["name"]][0] += 1
        by[e["name"]][1] += float(e["dur"])
    rows = sorted(by.items(), key=lambda kv: -kv[1][1])
    return {name: {"calls_per_step": per_step(n, steps), "us_per_step": per_step(us, steps)}
            for name, (n, us) in rows}


def is_device_to_host(e):
    n = e.get("name", "")
    return e.get("cat") == "gpu_memcpy" and ("DtoH" in n or "Device -> Pinned" in n
                                            or "Device -> Pageable" in n)


def is_collective(e):
    name = e.get("name", "").lower()
    return e.get("cat") == "kernel" and any(m in name for m in COLLECTIVE_MARKS)


class PythonStacks:
    """The Python frames of one thread, queryable by time (or any of its
    nested events: host_self_time gives it the CPU ops and runtime calls
    too)."""

    def __init__(self, frames):
        # outer frames first at equal start: a parent sorts before its child
        self.frames = sorted(frames, key=lambda e: (float(e["ts"]), -float(e["dur"])))
        self.starts = [float(e["ts"]) for e in self.frames]
        self.parent = self._parents()

    def _parents(self):
        parent, open_ = {}, []
        for i, e in enumerate(self.frames):
            t = float(e["ts"])
            while open_ and self._end(open_[-1]) <= t:
                open_.pop()
            parent[i] = open_[-1] if open_ else None
            open_.append(i)
        return parent

    def _end(self, i):
        e = self.frames[i]
        return float(e["ts"]) + float(e["dur"])

    def innermost_at(self, t):
        """Index of the deepest frame running at time t, or None."""
        i = bisect.bisect_right(self.starts, t) - 1
        while i is not None and i >= 0:
            if self._end(i) > t:
                return i
            i = self.parent[i]
        return None

    def chain(self, i):
        out = []
        while i is not None:
            out.append(i)
            i = self.parent[i]
        return out  # innermost first

    def name(self, i):
        return self.frames[i]["name"]


def short_frame(name):
    """'/tmp/sp/sglang/srt/managers/scheduler.py(1234): run_batch' ->
    'srt/managers/scheduler.py: run_batch' (no site, no line: comparable
    between builds whose line numbers differ)."""
    where, _, func = name.partition(": ")
    if "(" in where:
        where = where[:where.rindex("(")]
    if "sglang/" in where:
        where = where[where.rindex("sglang/") + len("sglang/"):]
    return f"{where}: {func}" if func else where


def is_sglang(name):
    return "sglang/" in name.partition(": ")[0]


def frame_under(stacks, chain, is_parent):
    """The short name of the frame in `chain` (innermost first) directly
    under the innermost frame whose full name satisfies `is_parent`, if any."""
    for child, parent in zip(chain, chain[1:]):
        if is_parent(stacks.name(parent)):
            return short_frame(stacks.name(child))
    return None


def is_event_loop(name):
    return ": event_loop_" in name


def is_spec_forward(name):
    """A speculative worker's `forward_batch_generation`, the frame above its
    draft, verify and draft extend."""
    where, _, func = name.partition(": ")
    return func == "forward_batch_generation" and "/speculative/" in where


def charge_gaps(gaps, stacks, steps):
    """Idle-gap time (>= GAP_CHARGED_US) by innermost sglang frame, by
    scheduler-loop phase and by speculative-worker phase of the host thread
    at the middle of each gap."""
    by_frame = collections.Counter()
    by_phase = collections.Counter()
    by_spec = collections.Counter()
    for s, t in gaps:
        if t - s < GAP_CHARGED_US:
            continue
        i = stacks.innermost_at((s + t) / 2)
        chain = stacks.chain(i) if i is not None else []
        frame = next((short_frame(stacks.name(j)) for j in chain
                      if is_sglang(stacks.name(j))), "(no sglang frame)")
        by_frame[frame] += t - s
        by_phase[frame_under(stacks, chain, is_event_loop) or "(outside the loop)"] += t - s
        by_spec[frame_under(stacks, chain, is_spec_forward)
                or "(outside a speculative forward)"] += t - s
    top = lambda c: {k: per_step(v, steps) for k, v in c.most_common(15)}  # noqa: E731
    return {"idle_us_per_step_by_frame": top(by_frame),
            "idle_us_per_step_by_loop_phase": top(by_phase),
            "idle_us_per_step_by_spec_phase": top(by_spec)}


def closing_calls(gaps, gpu, runtime, steps):
    """Idle-gap time (>= GAP_CHARGED_US) by the runtime call that issued the
    GPU work ending the gap, split by whether the call began after the gap
    did (the GPU waited on the host) or before it."""
    issued_by = {e["args"]["correlation"]: e for e in runtime
                 if "correlation" in (e.get("args") or {})}
    first_at = {}  # start time -> the GPU event starting there
    for e in sorted(gpu, key=lambda e: float(e["ts"])):
        first_at.setdefault(float(e["ts"]), e)
    by_call = collections.Counter()
    on_host = 0.0
    for s, t in gaps:
        if t - s < GAP_CHARGED_US:
            continue
        work = first_at.get(t)
        call = issued_by.get(((work or {}).get("args") or {}).get("correlation"))
        if call is None:
            by_call["(no issuing call in the trace)"] += t - s
        elif float(call["ts"]) >= s:
            by_call[f"{call['name']}, issued after the GPU went idle"] += t - s
            on_host += t - s
        else:
            by_call[f"{call['name']}, issued before the GPU went idle"] += t - s
    return {"idle_waiting_on_host_us_per_step": per_step(on_host, steps),
            "idle_us_per_step_by_closing_call": {k: per_step(v, steps)
                                                 for k, v in by_call.most_common(15)}}


def phase_times(stacks, steps):
    """Inclusive host time per step of each scheduler-loop phase."""
    spent = collections.Counter()
    for i, e in enumerate(stacks.frames):
        p = stacks.parent[i]
        if p is not None and is_event_loop(stacks.name(p)):
            spent[short_frame(e["name"])] += float(e["dur"])
    return {k: per_step(v, steps) for k, v in spent.most_common(15)}


def host_thread(runtime):
    """The thread that launches the GPU work: the scheduler's."""
    launches = collections.Counter((e.get("pid"), e.get("tid")) for e in runtime
                                   if "Launch" in e.get("name", ""))
    return launches.most_common(1)[0][0] if launches else None


def python_frames_of_host(python, thread):
    """The Python frames of the launching thread; if the trace files them
    under other thread ids than the runtime calls, those of the thread with
    the most frames (the scheduler loop)."""
    key = lambda e: (e.get("pid"), e.get("tid"))  # noqa: E731
    mine = [e for e in python if key(e) == thread]
    if mine or not python:
        return mine
    busiest = collections.Counter(key(e) for e in python).most_common(1)[0][0]
    return [e for e in python if key(e) == busiest]


# kinds of host work, by the innermost event's own name and category
HOST_KINDS = ("CUDA graph launches", "other CUDA runtime calls", "host syncs",
              "PyTorch operators (C++)", "Triton launcher (Python)",
              "sglang Python", "PyTorch Python", "other Python")


# built-ins that are PyTorch's bindings (a tensor method, a torch function,
# the CUDA runtime's Python API, a pybind11 call such as a graph replay)
TORCH_BUILTIN_MARKS = ("of Tensor object", "of Event object", "of Stream object",
                       "_cuda_", "pybind11", "_has_torch_function")


def python_kind(name):
    if name.startswith("<built-in"):
        if any(m in name for m in TORCH_BUILTIN_MARKS) or (
                "of type object" in name and "__new__" not in name):
            return "PyTorch Python"
        return None  # len, isinstance, dict.get, ...: its caller's kind
    where = name.partition(": ")[0] if "): " in name else ""
    if "triton/" in where:
        return "Triton launcher (Python)"
    if "sglang/" in where:
        return "sglang Python"
    if "torch/" in where:
        return "PyTorch Python"
    return None  # a built-in or stdlib frame: its caller's kind, if any


def host_event_kind(e, caller_kind):
    name, cat = e["name"], e.get("cat")
    if cat in RUNTIME_CATS:
        if "Synchronize" in name:
            return "host syncs"
        return "CUDA graph launches" if "GraphLaunch" in name else "other CUDA runtime calls"
    if cat == "cpu_op":
        return "PyTorch operators (C++)"
    return python_kind(name) or caller_kind or "other Python"


def is_triton_launch(e):
    """The Triton JIT's launch of one kernel (`JITFunction.run`)."""
    where, _, func = e["name"].partition(": ")
    return e.get("cat") == "python_function" and "triton/runtime/jit.py" in where and func == "run"


def host_self_time(events, thread, frames, steps):
    """The launching thread's self time per step by kind of work
    (HOST_KINDS), its launches per step, and the sglang frames with the
    most self time. `frames` are that thread's Python frames as
    python_frames_of_host found them, which may be filed under another
    thread id than its operators and runtime calls."""
    calls = [e for e in complete(events, ("cpu_op",) + RUNTIME_CATS)
             if (e.get("pid"), e.get("tid")) == thread]
    nested = PythonStacks(list(frames) + calls)
    own = [float(e["dur"]) for e in nested.frames]  # less the events inside, below
    kinds, charged = [], []  # per event: its kind, the sglang frame its time goes to
    ops = triton = graphs = 0
    for i, e in enumerate(nested.frames):  # a parent comes before its children
        p = nested.parent[i]
        if p is not None:
            own[p] -= float(e["dur"])
        kind = host_event_kind(e, kinds[p] if p is not None else None)
        frame = None
        if e.get("cat") == "python_function":
            if is_sglang(e["name"]):
                frame = short_frame(e["name"])
            elif kind == "sglang Python" and p is not None:
                frame = charged[p]  # a built-in sglang called: its caller's
        kinds.append(kind)
        charged.append(frame)
        # an operator called from Python, not one inside another operator
        ops += kind == "PyTorch operators (C++)" and (p is None or kinds[p] != kind)
        triton += is_triton_launch(e)
        graphs += kind == "CUDA graph launches"
    by_kind, by_frame = collections.Counter(), collections.Counter()
    for kind, frame, us in zip(kinds, charged, own):
        by_kind[kind] += us
        if frame is not None:
            by_frame[frame] += us
    return {"host_self_us_per_step_by_kind": {k: per_step(by_kind[k], steps)
                                              for k in HOST_KINDS if by_kind[k]},
            "host_self_us_per_step": per_step(sum(by_kind.values()), steps),
            "operator_calls_per_step": per_step(ops, steps),
            "triton_launches_per_step": per_step(triton, steps),
            "graph_launches_per_step": per_step(graphs, steps),
            "host_self_us_per_step_by_sglang_frame": {k: per_step(v, steps)
                                                      for k, v in by_frame.most_common(15)}}


def kernel_name(name):
    """A kernel's name without its argument list and return type, cut to
    KERNEL_NAME_CHARS: `void at::native::f<float>(int, float*)` ->
    `at::native::f<float>`. The argument list is the parenthesized group
    that ends the name, so `(anonymous namespace)` and parentheses inside
    template arguments stay."""
    name = name.removeprefix("void ")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name[:KERNEL_NAME_CHARS]


def kernels_by_name(gpu, steps):
    """{kernel name: [launches per step, GPU µs per step]}, the most GPU
    time first, leaving out names launched fewer than steps /
    KERNEL_MIN_STEPS times."""
    count, us = collections.Counter(), collections.Counter()
    for e in gpu:
        if e["cat"] == "kernel":
            name = kernel_name(e["name"])
            count[name] += 1
            us[name] += float(e["dur"])
    return {name: [per_step(count[name], steps), per_step(us[name], steps)]
            for name, _ in us.most_common()
            if count[name] * KERNEL_MIN_STEPS >= steps}


def summarize(events, steps):
    gpu = complete(events, GPU_CATS)
    if not gpu:
        raise ValueError("no GPU events in the trace (was GPU activity profiled?)")
    runtime = complete(events, RUNTIME_CATS)
    merged = busy_intervals(gpu)
    window = merged[-1][1] - merged[0][0]
    busy = sum(t - s for s, t in merged)
    gaps = idle_gaps(merged)
    sizes = [t - s for s, t in gaps]
    buckets = {f">={b}us": {"gaps_per_step": per_step(sum(1 for g in sizes if g >= b), steps),
                            "idle_us_per_step": per_step(sum(g for g in sizes if g >= b), steps)}
               for b in GAP_BUCKETS_US}
    syncs = [e for e in runtime if "Synchronize" in e["name"]]
    out = {
        "steps": steps,
        "window_us_per_step": per_step(window, steps),
        "gpu_busy_us_per_step": per_step(busy, steps),
        "gpu_idle_us_per_step": per_step(window - busy, steps),
        "gpu_busy_fraction": round(busy / window, 4) if window else None,
        "gpu_kernels_per_step": per_step(sum(1 for e in gpu if e["cat"] == "kernel"), steps),
        "gpu_kernels_by_name": kernels_by_name(gpu, steps),
        "device_to_host_copies_per_step": per_step(sum(1 for e in gpu if is_device_to_host(e)), steps),
        "gpu_collective_us_per_step": per_step(sum(float(e["dur"]) for e in gpu
                                                   if is_collective(e)), steps),
        "idle_gaps": buckets,
        "host_sync_calls_per_step": per_step(len(syncs), steps),
        "host_sync_us_per_step": per_step(sum(float(e["dur"]) for e in syncs), steps),
        "runtime_calls": runtime_table(runtime, steps),
        **closing_calls(gaps, gpu, runtime, steps),
    }
    python = complete(events, ("python_function",))
    thread = host_thread(runtime)
    frames = python_frames_of_host(python, thread)
    if frames:
        stacks = PythonStacks(frames)
        out["python"] = {"host_us_per_step_by_loop_phase": phase_times(stacks, steps),
                         **charge_gaps(gaps, stacks, steps),
                         **host_self_time(events, thread, frames, steps)}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, required=True,
                    help="scheduler forwards the trace covers (/start_profile num_steps)")
    a = ap.parse_args(argv)
    print(json.dumps(summarize(load(a.trace), a.steps), indent=1))


if __name__ == "__main__":
    main()
