"""Probe: host wall time of each scheduler iteration, by function, per rank.

Loaded by sitecustomize.py (same folder) when SGLPATCH_HOST_TIME=1 and
SGLPATCH_PROBE_DIR are set; copy both files into the site of every build
under test (base and patched alike: the targets that a build lacks are
skipped). It wraps the functions in TARGETS with a wall-clock timer and cuts
the scheduler's time into iterations, one per `Scheduler.run_batch` call (an
iteration runs from one call's start to the next's). Decode iterations after
the first SGLPATCH_HOST_SKIP (200) are kept, grouped by batch size, and
`<pid>-host.json` holds, per batch size:

    iterations                 how many were kept
    iteration_us               mean wall time of one iteration
    iteration_us_p50_p90_p99   its percentiles (a rank's pauses show here)
    functions                  {"Class.method": [calls, us] per iteration};
                               "(rest of the loop)": the iteration's time
                               outside the loop phases (LOOP_PHASES);
                               Event/Stream.synchronize: the host waiting
                               for the GPU; "(gc gen N)": Python's garbage
                               collections

The file also holds `gc`, the process's collections by generation (runs,
objects collected), and with SGLPATCH_GC_GARBAGE=N `gc_garbage`: the objects
the collector freed over N decode iterations, by kind (GarbageWindow): a
build whose steps make reference cycles shows here.

Times are inclusive (a caller's time contains its callees'). A TP server
has one scheduler per rank, each writes its own file with its `rank`. When
the host is the bottleneck (TP > 1 on the small model: the GPU idles most of
each step), the build whose iteration is longer is the slower build, and the
functions whose time differs say where.

`python3 host_time.py [--before-NNNN] [--pool-from N] DIR...` prints the
files under DIR side by side (with --pool-from, the batch sizes >= N pooled
into one table per rank, each per-iteration mean weighted by its
iterations), with a "(shared code)" row per batch size: how long the code
that every build runs alike (SHARED_CODE; with --before-0018 or
--before-0012, for builds without that patch, SHARED_CODE_BEFORE[NNNN]) took
per call, against the
first build, which is how much faster or slower that server's host ran.
SGLPATCH_HOST_TIME_EXTRA="module:Class.method,..." times more functions.

Each timer costs about a microsecond per call in every build alike; compare
builds with the probe in both, never with a run without it.
"""

import functools
import glob
import json
import math
import os
import sys
import time

TARGETS = {
    "sglang.srt.managers.scheduler": [
        "Scheduler.recv_requests", "Scheduler.process_input_requests",
        "Scheduler.get_next_batch_to_run", "Scheduler.update_running_batch",
        "Scheduler.run_batch", "Scheduler.process_batch_result",
        "Scheduler.record_batch_in_overlap", "Scheduler.send_output", "broadcast_pyobj",
        "broadcast_reqs_to_tp_ranks"],
    "sglang.srt.managers.scheduler_output_processor_mixin": [
        "SchedulerOutputProcessorMixin.process_batch_result_decode"],
    "sglang.srt.managers.schedule_batch": [
        "ScheduleBatch.prepare_for_decode", "ScheduleBatch.filter_batch",
        "ScheduleBatch.merge_batch", "ScheduleBatch.get_model_worker_batch",
        # 0.5.12.post1's host wait for the verify (the series replaces it
        # with FutureMap._pull_seq_lens_cpu where a backend reads host lengths)
        "ScheduleBatch.maybe_wait_verify_done"],
    "sglang.srt.managers.overlap_utils": [
        "FutureMap.alloc_future_indices", "FutureMap.resolve_future",
        "FutureMap.store_to_map", "FutureMap.stash_batch_result", "FutureMap.publish",
        "FutureMap.resolve_seq_lens_cpu", "FutureMap._pull_seq_lens_cpu",
        "FutureMap.set_input_ids_sentinel"],
    "sglang.srt.managers.tp_worker": ["TpModelWorker.forward_batch_generation"],
    "sglang.srt.speculative.eagle_worker_v2": [
        "EAGLEWorkerV2.forward_batch_generation", "EAGLEWorkerV2.verify",
        "EagleDraftWorker.draft", "EagleDraftWorker._draft_extend_for_decode"],
    "sglang.srt.speculative.eagle_info_v2": [
        "EagleDraftInputV2Mixin.prepare_for_decode",
        "EagleDraftInputV2Mixin.prepare_for_v2_draft",
        "EagleDraftInputV2Mixin.prepare_for_extend_to_fill_draft_kvcache",
        "EagleVerifyInputV2Mixin.prepare_for_v2_verify", "EagleVerifyInputV2Mixin.sample"],
    "sglang.srt.speculative.spec_utils": ["assign_req_to_token_pool_func"],
    "sglang.srt.model_executor.forward_batch_info": ["ForwardBatch.init_new"],
    "sglang.srt.model_executor.model_runner": ["ModelRunner.forward"],
    "sglang.srt.model_executor.cuda_graph_runner": [
        "CudaGraphRunner.replay", "CudaGraphRunner.replay_prepare"],
    "sglang.srt.speculative.eagle_draft_cuda_graph_runner": ["EAGLEDraftCudaGraphRunner.replay"],
    "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner": [
        "EAGLEDraftExtendCudaGraphRunner.replay"],
    "sglang.srt.layers.attention.triton_backend": [
        "TritonAttnBackend.init_forward_metadata_replay_cuda_graph",
        "TritonMultiStepDraftBackend.init_forward_metadata_replay_cuda_graph"],
    # flashinfer keeps the per-step host pull in the series; its planning is
    # the host work that differs from Triton's
    "sglang.srt.layers.attention.flashinfer_backend": [
        "FlashInferAttnBackend.init_forward_metadata",
        "FlashInferAttnBackend.init_forward_metadata_replay_cuda_graph",
        "FlashInferMultiStepDraftBackend.init_forward_metadata_replay_cuda_graph"],
    # The host waiting for the GPU: the scheduler's wait for the last result
    # (copy_done) and any other event or stream synchronize. Large in a build
    # whose step is bound by the GPU, near 0 where the host is the bottleneck.
    "torch.cuda.streams": ["Event.synchronize", "Stream.synchronize"],
}
# Targets whose source the series leaves as in 0.5.12.post1, whose callees
# are unchanged too (kernel and graph launches, the attention backends'
# metadata) and whose inputs it does not change. Two servers spend different
# time in them only because their hosts run at different speeds (the core the
# scheduler landed on, what shares it): the table's "(shared code)" row is
# that speed, build against the first build, so a difference in iteration
# time can be set against it. test_probe_host_time_cpu checks the source.
# Patch 0012 moves part of the Triton backends' replay metadata into the
# graphs, and patch 0018 plans flashinfer's graph replays from host lengths,
# so their host time differs by design and they left the list;
# SHARED_CODE_BEFORE["NNNN"] is the yardstick of probes of builds without
# patch NNNN (the probes committed before it: `--before-NNNN` renders them).
SHARED_CODE = (
    "assign_req_to_token_pool_func",
    "EAGLEDraftCudaGraphRunner.replay",
    "FlashInferAttnBackend.init_forward_metadata",
)
_FLASHINFER_REPLAY = (
    "FlashInferAttnBackend.init_forward_metadata_replay_cuda_graph",
    "FlashInferMultiStepDraftBackend.init_forward_metadata_replay_cuda_graph",
)
_TRITON_REPLAY = (
    "TritonAttnBackend.init_forward_metadata_replay_cuda_graph",
    "TritonMultiStepDraftBackend.init_forward_metadata_replay_cuda_graph",
)
SHARED_CODE_BEFORE = {
    "0018": SHARED_CODE + _FLASHINFER_REPLAY,
    "0012": SHARED_CODE + _FLASHINFER_REPLAY + _TRITON_REPLAY,
}
# SGLPATCH_HOST_TIME_EXTRA: more functions to time without editing this
# file, "module:Class.method" or "module:function", comma-separated.
EXTRA_ENV = "SGLPATCH_HOST_TIME_EXTRA"
ITERATION = "Scheduler.run_batch"  # its calls cut the time into iterations
MAX_KEPT = 50000  # iteration times kept per batch size, for the percentiles
# The phases of event_loop_overlap; the iteration's time outside them is
# reported as "(rest of the loop)".
LOOP_PHASES = ("Scheduler.recv_requests", "Scheduler.process_input_requests",
               "Scheduler.get_next_batch_to_run", "Scheduler.run_batch",
               "Scheduler.process_batch_result")


class HostTimes:
    """Per-iteration accumulation; one per process."""

    def __init__(self, out_dir, skip, dump_every=200, clock=time.perf_counter_ns):
        self.out_dir, self.skip, self.dump_every, self.clock = out_dir, skip, dump_every, clock
        self.rank = None
        self.current = {}  # name -> [calls, ns] of the open iteration
        self.open_bs = None  # batch size of the open iteration; None: not kept
        self.open_t = None
        self.decode_seen = 0
        self.buckets = {}  # bs -> {"iterations", "ns", "functions": name -> [calls, ns]}
        self.closed = 0
        # Process totals of Python's collections: gen -> [runs, objects collected]
        self.gc_totals = {}
        # SGLPATCH_GC_GARBAGE=N: what the collector frees over N kept decode
        # iterations (see GarbageWindow); None: off
        self.garbage = None

    def add(self, name, ns):
        entry = self.current.get(name)
        if entry is None:
            self.current[name] = [1, ns]
        else:
            entry[0] += 1
            entry[1] += ns

    def new_iteration(self, batch, rank=None):
        """At a run_batch call: close the open iteration, open this one."""
        now = self.clock()
        if rank is not None:
            self.rank = rank
        if self.open_bs is not None:
            b = self.buckets.setdefault(self.open_bs, {"iterations": 0, "ns": 0, "functions": {},
                                                       "each_ns": []})
            b["iterations"] += 1
            b["ns"] += now - self.open_t
            if len(b["each_ns"]) < MAX_KEPT:
                b["each_ns"].append(now - self.open_t)
            for name, (calls, ns) in self.current.items():
                f = b["functions"].setdefault(name, [0, 0])
                f[0] += calls
                f[1] += ns
            self.closed += 1
            if self.closed % self.dump_every == 0:
                self.dump()  # the server is killed, not exited: keep the file current
        self.current = {}
        mode = getattr(batch, "forward_mode", None)
        decode = bool(mode is not None and mode.is_decode())
        self.decode_seen += decode
        keep = decode and self.decode_seen > self.skip
        if self.garbage is not None and decode:
            self.garbage.at_decode(self.decode_seen - self.skip)
        self.open_bs = len(batch.reqs) if keep else None
        self.open_t = now

    def report(self):
        out = {"pid": os.getpid(), "rank": self.rank, "build": sglang_site(), "by_batch_size": {}}
        for bs, b in sorted(self.buckets.items()):
            n = b["iterations"]
            functions = {name: [round(c / n, 2), round(ns / n / 1e3, 1)]
                         for name, (c, ns) in sorted(b["functions"].items())}
            phases_ns = sum(b["functions"].get(p, (0, 0))[1] for p in LOOP_PHASES)
            functions["(rest of the loop)"] = [1, round((b["ns"] - phases_ns) / n / 1e3, 1)]
            each = sorted(b["each_ns"])
            out["by_batch_size"][str(bs)] = {
                "iterations": n,
                "iteration_us": round(b["ns"] / n / 1e3, 1),
                "iteration_us_p50_p90_p99": [round(each[min(int(q * len(each)), len(each) - 1)]
                                             / 1e3, 1) for q in (0.5, 0.9, 0.99)],
                "functions": functions,
            }
        out["gc"] = {str(gen): {"runs": runs, "collected": collected}
                     for gen, (runs, collected) in sorted(self.gc_totals.items())}
        if self.garbage is not None and self.garbage.summary is not None:
            out["gc_garbage"] = self.garbage.summary
        return out

    def dump(self):
        path = os.path.join(self.out_dir, f"{os.getpid()}-host.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.report(), f, indent=1)
        os.replace(path + ".tmp", path)


def sglang_site():
    """The site the sglang under test was imported from (tells builds apart)."""
    mod = sys.modules.get("sglang")
    path = getattr(mod, "__file__", None) or ""
    return os.path.dirname(os.path.dirname(path))


def _timed(fn, name, times, iteration=False):
    clock = times.clock

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if iteration:  # Scheduler.run_batch(self, batch, ...)
            times.new_iteration(args[1], getattr(args[0], "tp_rank", None))
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            times.add(name, clock() - t0)

    return wrapper


def instrument(module, names, times):
    """Wrap `names` ("Class.method" or "function") of a loaded module; the
    ones the module lacks are skipped. Returns the names wrapped."""
    done = []
    for name in names:
        owner_name, _, attr = name.rpartition(".")
        owner = getattr(module, owner_name, None) if owner_name else module
        if owner is None:
            continue
        raw = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
        if raw is None:
            continue
        if isinstance(raw, classmethod):
            wrapped = classmethod(_timed(raw.__func__, name, times))
        elif isinstance(raw, staticmethod):
            wrapped = staticmethod(_timed(raw.__func__, name, times))
        elif callable(raw):
            wrapped = _timed(raw, name, times, iteration=name == ITERATION)
        else:
            continue
        setattr(owner, attr, wrapped)
        done.append(name)
    return done


def time_gc(times):
    """Count Python's garbage collections as "(gc gen N)": a pause on one
    rank holds every rank at the next collective, so at TP > 1 it costs the
    whole step."""
    import gc

    started = {}

    def callback(phase, info):
        gen = info.get("generation")
        if phase == "start":
            started[gen] = times.clock()
        elif gen in started:
            times.add(f"(gc gen {gen})", times.clock() - started.pop(gen))
            total = times.gc_totals.setdefault(gen, [0, 0])
            total[0] += 1
            total[1] += info.get("collected", 0)

    gc.callbacks.append(callback)
    return callback


class GarbageWindow:
    """What Python's cycle collector frees in steady decode, by kind.

    Objects freed by reference counting never reach the collector; only
    reference cycles do. A build that makes cycles on every step runs
    generation-0 collections (and now and then a generation-1 or 2 one of
    milliseconds) that a build without them does not, and at TP > 1 each
    rank's pause holds the others at the next collective. From the first kept
    decode iteration the collector keeps what it would free (DEBUG_SAVEALL);
    after `iterations` more it collects once and `summary` counts the kept
    objects by kind: the type, a function's or frame's qualified name, an
    instance dict's first keys (which say whose dict it is).
    """

    def __init__(self, iterations, top=40):
        self.iterations, self.top = iterations, top
        self.summary = None
        self._open = False

    def at_decode(self, kept):
        import gc

        if kept == 1 and not self._open and self.summary is None:
            gc.collect()  # start from nothing pending
            gc.garbage.clear()
            gc.set_debug(gc.DEBUG_SAVEALL)
            self._open = True
        elif self._open and kept > self.iterations:
            gc.collect()
            self.summary = self.summarize(gc.garbage, self.iterations)
            gc.garbage.clear()
            gc.set_debug(0)
            self._open = False

    def summarize(self, objects, iterations):
        from collections import Counter

        kinds = Counter(_kind(o) for o in objects)
        return {"iterations": iterations, "objects": len(objects),
                "per_iteration": round(len(objects) / max(iterations, 1), 1),
                "kinds": [[k, n] for k, n in kinds.most_common(self.top)]}


def _kind(obj):
    """A short name that says where a collected object comes from."""
    t = type(obj)
    if t is dict:
        keys = [k for k in list(obj)[:4] if isinstance(k, str)]
        return "dict{" + ",".join(keys) + ("" if len(obj) <= 4 else ",...") + "}"
    code = getattr(obj, "f_code", None) or getattr(obj, "__code__", None)
    if code is not None:
        return f"{t.__name__} {getattr(code, 'co_qualname', code.co_name)}"
    if t.__name__ in ("method", "builtin_function_or_method"):
        return f"{t.__name__} {getattr(obj, '__qualname__', '?')}"
    return f"{t.__module__}.{t.__qualname__}"


def targets_with_extra(spec):
    """TARGETS plus the "module:name" entries of `spec` (SGLPATCH_HOST_TIME_EXTRA).
    An entry without a module and a name is reported on stderr in one line
    and skipped: the probe runs inside a server, which must still start."""
    merged = {mod: list(names) for mod, names in TARGETS.items()}
    for entry in filter(None, (x.strip() for x in (spec or "").split(","))):
        mod, _, name = entry.partition(":")
        if not mod or not name:
            print(f"host_time: {EXTRA_ENV} entry {entry!r} is not module:name, skipped",
                  file=sys.stderr, flush=True)
            continue
        names = merged.setdefault(mod, [])
        if name not in names:
            names.append(name)
    return merged


def hooks(out_dir):
    """{module name: hook(module)} for sitecustomize's import hook."""
    times = HostTimes(out_dir, int(os.environ.get("SGLPATCH_HOST_SKIP", "200")))
    window = int(os.environ.get("SGLPATCH_GC_GARBAGE", "0"))
    if window > 0:
        times.garbage = GarbageWindow(window)
    time_gc(times)
    import atexit

    atexit.register(lambda: times.buckets and times.dump())
    targets = targets_with_extra(os.environ.get(EXTRA_ENV))
    return {mod: functools.partial(lambda m, names: instrument(m, names, times), names=names)
            for mod, names in targets.items()}


# ---------------------------------------------------------------------------
def load(dirs):
    reports = []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "**", "*-host.json"), recursive=True)):
            with open(path) as f:
                r = json.load(f)
            if r.get("by_batch_size"):
                reports.append(r)
    return reports


def _iteration_cell(row):
    pct = row.get("iteration_us_p50_p90_p99")
    cell = f"{row['iterations']} it, {row['iteration_us']} us"
    return cell + (f" (p50/p90/p99 {' / '.join(map(str, pct))})" if pct else "")


def p50(row):
    """A row's median iteration time, or None in files that predate it."""
    pct = row.get("iteration_us_p50_p90_p99")
    return pct[0] if pct else None


def shared_code_ratio(row, ref, shared_code=SHARED_CODE):
    """(n, geometric mean over the `shared_code` functions both rows ran of
    row's time per call over ref's), or None when they share none."""
    ratios = []
    for name in shared_code:
        a, b = row["functions"].get(name), ref["functions"].get(name)
        if a and b and a[0] and b[0] and a[1] > 0 and b[1] > 0:
            ratios.append((a[1] / a[0]) / (b[1] / b[0]))
    if not ratios:
        return None
    return len(ratios), math.exp(sum(map(math.log, ratios)) / len(ratios))


def pool_batch_sizes(reports, lo):
    """The reports with their batch sizes >= lo pooled into one row, keyed
    f"{lo}+", and the smaller ones dropped. At high concurrency the batch
    size moves every few steps, so each size alone holds few iterations; the
    pool weights every per-iteration mean by its iterations. Percentiles do
    not pool, so the pooled row has none (its shared-code row stands alone)."""
    pooled = []
    for r in reports:
        rows = [row for bs, row in r["by_batch_size"].items() if int(bs) >= lo]
        n = sum(row["iterations"] for row in rows)
        if not n:
            continue
        functions = {}
        for row in rows:
            w = row["iterations"] / n
            for name, (calls, us) in row["functions"].items():
                acc = functions.setdefault(name, [0.0, 0.0])
                acc[0] += w * calls
                acc[1] += w * us
        iteration_us = sum(row["iterations"] * row["iteration_us"] for row in rows) / n
        pooled.append({**r, "by_batch_size": {f"{lo}+": {
            "iterations": n, "iteration_us": round(iteration_us, 1),
            "functions": {k: [round(c, 2), round(us, 1)] for k, (c, us) in functions.items()}}}})
    return pooled


def _batch_key(bs):
    """Sort key and heading of a by_batch_size key ("8", or "16+" pooled)."""
    if bs.endswith("+"):
        return int(bs[:-1]), f"batch sizes {bs[:-1]} and up, pooled by iterations"
    return int(bs), f"batch size {bs}"


def table(reports, min_us=5.0, shared_code=SHARED_CODE):
    """Markdown: per batch size and rank, each build's iteration time and the
    functions that take >= min_us in any build; the shared-code row over
    `shared_code`."""
    lines = []
    builds = sorted({r["build"] for r in reports})
    keys = sorted({(bs, r["rank"]) for r in reports for bs in r["by_batch_size"]},
                  key=lambda k: (_batch_key(k[0])[0], k[1] if k[1] is not None else -1))
    for bs, rank in keys:
        rows = {r["build"]: r["by_batch_size"].get(bs) for r in reports
                if r["rank"] == rank and bs in r["by_batch_size"]}
        if not rows:
            continue
        lines.append(f"\n### {_batch_key(bs)[1]}, rank {rank}\n")
        lines.append("| function | " + " | ".join(f"{os.path.basename(b)} calls / us"
                                                  for b in builds) + " |")
        lines.append("|---|" + "---|" * len(builds))
        cells = [_iteration_cell(rows[b]) if rows.get(b) else "—" for b in builds]
        lines.append("| (iteration) | " + " | ".join(cells) + " |")
        names = sorted({n for row in rows.values() if row for n, (c, us) in
                        row["functions"].items() if us >= min_us})
        for n in names:
            cells = []
            for b in builds:
                f = (rows.get(b) or {}).get("functions", {}).get(n)
                cells.append(f"{f[0]:g} / {f[1]:g}" if f else "—")
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        ref = rows.get(builds[0])
        shared = [shared_code_ratio(rows[b], ref, shared_code) if ref and rows.get(b) else None
                  for b in builds[1:]]
        if any(shared):
            cells = ["1"] + [f"{r[1]:.3f} ({r[0]} functions)" if r else "—"
                             for r in shared]
            lines.append("| (shared code: time per call / first build's) | "
                         + " | ".join(cells) + " |")
            # a step bound by the host scales with the host's speed: what is
            # left of the iteration ratio once that is divided out is the
            # build's own share
            # a pooled row has no percentiles: its mean stands in
            center, what = (p50, "p50") if not bs.endswith("+") else (
                lambda row: row["iteration_us"], "mean")
            cells = ["1"] + [
                f"{center(rows[b]) / center(ref) / r[1]:.3f}"
                if r and center(rows[b]) and center(ref) else "—"
                for b, r in zip(builds[1:], shared)]
            lines.append(f"| (iteration {what} / first build's, over the shared-code ratio) | "
                         + " | ".join(cells) + " |")
    lines += gc_table(reports)
    return "\n".join(lines)


def gc_table(reports, top=15):
    """Lines: each build's and rank's collections, and the kinds of objects
    its garbage window freed."""
    lines = []
    with_gc = [r for r in reports if r.get("gc") or r.get("gc_garbage")]
    if not with_gc:
        return lines
    lines.append("\n### Python garbage collection (whole run)\n")
    lines.append("| build | rank | gen: runs / objects collected | garbage per decode iteration |")
    lines.append("|---|---|---|---|")
    for r in sorted(with_gc, key=lambda r: (r["build"], r["rank"] if r["rank"] is not None else -1)):
        gens = ", ".join(f"{g}: {v['runs']} / {v['collected']}" for g, v in r.get("gc", {}).items())
        g = r.get("gc_garbage")
        lines.append(f"| {os.path.basename(r['build'])} | {r['rank']} | {gens or '—'} | "
                     f"{g['per_iteration'] if g else '—'} |")
    for r in with_gc:
        g = r.get("gc_garbage")
        if not g:
            continue
        lines.append(f"\nfreed by the collector, {os.path.basename(r['build'])} rank {r['rank']}, "
                     f"{g['objects']} objects over {g['iterations']} decode iterations:\n")
        lines += [f"    {n:6d}  {k}" for k, n in g["kinds"][:top]]
    return lines


def main(argv):
    """host_time.py [--before-NNNN] [--pool-from N] DIR...: the files under
    DIR side by side; with --pool-from, batch sizes >= N as one pooled table
    per rank; with --before-0018 (--before-0012), builds without that patch,
    whose shared code includes flashinfer's (and Triton's) replay metadata."""
    lo, shared_code = None, SHARED_CODE
    if argv[:1] and argv[0].startswith("--before-"):
        shared_code = SHARED_CODE_BEFORE.get(argv[0][len("--before-"):])
        if shared_code is None:
            print(f"host_time: {argv[0]}: one of "
                  f"{', '.join('--before-' + n for n in SHARED_CODE_BEFORE)}", file=sys.stderr)
            return 2
        argv = argv[1:]
    if argv[:1] == ["--pool-from"]:
        if len(argv) < 2 or not argv[1].isdigit() or int(argv[1]) < 1:
            print("host_time: --pool-from takes a batch size >= 1", file=sys.stderr)
            return 2
        lo, argv = int(argv[1]), argv[2:]
    reports = load(argv or ["."])
    if lo is not None:
        reports = pool_batch_sizes(reports, lo)
    if not reports:
        print(f"host_time: no *-host.json with decode iterations under {' '.join(argv or ['.'])}"
              + (f" at batch size {lo} or more" if lo else ""), file=sys.stderr)
        return 1
    print(table(reports, shared_code=shared_code))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
