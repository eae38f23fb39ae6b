"""Micro-benchmark: which host calls block once the schedule stream waits on
an in-flight forward.

The series' relay makes the schedule stream wait (`wait_event`) on the last
forward's publish before the schedule gathers the relayed seq_lens
(`FutureMap.resolve_seq_lens_cpu`). A stream wait never blocks the host by
itself, but from then on any call that synchronizes the schedule stream
holds the host until the whole previous forward has run. At TP > 1 that
forward cannot finish before every rank has launched it, so such a block
ties each rank's scheduling to the slowest rank's launch.

This script runs a GPU spin of --busy-ms on a "forward" stream, records a
publish event after it, makes the schedule stream wait on it, and times each
candidate call on the host. A call whose median is near --busy-ms blocks; one
of a few microseconds does not. Needs a CUDA device:

    python3 stream_wait_micro.py [--busy-ms 2] [--trials 200] [--out FILE.json]
"""

import argparse
import json
import statistics
import sys
import time

import torch


def spin_cycles_per_ms():
    """Clock cycles of torch.cuda._sleep that take one millisecond."""
    torch.cuda.synchronize()
    cycles = 1_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return int(cycles / start.elapsed_time(end))


def candidates(buf, idx, bs):
    """name -> call, each run on the schedule stream after the wait."""
    host_list = list(range(bs))
    host_tensor = torch.arange(bs, dtype=torch.int64)
    return {
        "gather buf[idx]": lambda: buf[idx],
        "index_select": lambda: torch.index_select(buf, 0, idx),
        "tensor(list).to(non_blocking)": lambda: torch.tensor(host_list, dtype=torch.int32).to(
            "cuda", non_blocking=True),
        "tensor(list, device=cuda)": lambda: torch.tensor(host_list, device="cuda"),
        "cpu_tensor.to(cuda) blocking": lambda: host_tensor.to("cuda"),
        "empty + arithmetic": lambda: torch.empty(bs, dtype=torch.int64, device="cuda") + 1,
        "cat": lambda: torch.cat([idx, idx]),
        "Event() + record": lambda: torch.cuda.Event().record(),
    }


def run(busy_ms, trials, bs):
    fwd = torch.cuda.Stream()
    sched = torch.cuda.Stream()
    torch.cuda.set_stream(sched)
    cycles = spin_cycles_per_ms() * busy_ms
    buf = torch.zeros(4096, dtype=torch.int64, device="cuda")
    idx = torch.arange(1, bs + 1, dtype=torch.int64, device="cuda")
    vals = torch.full((bs,), 7, dtype=torch.int64, device="cuda")
    calls = candidates(buf, idx, bs)
    times = {name: [] for name in ["wait_event", *calls]}
    for _ in range(trials):
        for name, call in calls.items():
            torch.cuda.synchronize()
            with torch.cuda.stream(fwd):
                torch.cuda._sleep(cycles)
                buf[idx] = vals
                published = torch.cuda.Event()
                published.record()
            t0 = time.perf_counter_ns()
            torch.cuda.current_stream().wait_event(published)
            t1 = time.perf_counter_ns()
            call()
            t2 = time.perf_counter_ns()
            times["wait_event"].append(t1 - t0)
            times[name].append(t2 - t1)
    torch.cuda.synchronize()
    return {name: summarize(v, busy_ms) for name, v in times.items()}


def summarize(ns, busy_ms):
    """Median and p90 in us; a call blocks if its median is over half the spin."""
    median_us = statistics.median(ns) / 1e3
    return {"median_us": round(median_us, 1),
            "p90_us": round(sorted(ns)[int(0.9 * len(ns))] / 1e3, 1),
            "blocks": median_us > 0.5 * busy_ms * 1e3}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy-ms", type=int, default=2)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("stream_wait_micro.py: needs a CUDA device (run it on the GPU machine)")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "busy_ms": args.busy_ms, "trials": args.trials, "batch_size": args.batch_size,
              "calls": run(args.busy_ms, args.trials, args.batch_size)}
    for name, r in result["calls"].items():
        print(f"{name:34s} median {r['median_us']:8.1f} us  p90 {r['p90_us']:8.1f} us"
              f"  {'BLOCKS' if r['blocks'] else ''}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
