"""Several side-by-side comparisons at once on one machine, pooled.

    python3 benchmark/pairs.py --pairs K [--gpus N] [--no-pin] [--vary OPTS ...] -- \
        E2E-RUN-OPTIONS --work-dir W --out-dir O

A machine with more GPUs than one comparison needs (four H100s, TP=2) can
run K copies of the same `e2e.py run` at the same time, each on its own
slice of the machine: copy i gets GPUs [i*N/K, (i+1)*N/K) through
CUDA_VISIBLE_DEVICES, 1/K of the physical cores (with their hyperthread
siblings) through `taskset`, so one copy's host work never runs on the
cores of another's schedulers, ports from 30000 + 1000*i, and W/pair<i> as
its work dir. Within a copy the
builds still serve side by side and are measured in turn, so each copy is a
complete comparison; the copies are then pooled into O with
`results.pool`, each labelled pair<i>, so a point's repeats from all copies
count together and every record says which copy made it.

Pool only copies of one run: same builds, options and machine. The copies
share the machine's memory bus and host, so their numbers are comparable
with each other and with nothing measured elsewhere.

--vary OPTS (given V times, V dividing K): the copies run V different
comparisons at once instead of one, e.g. `--vary "--attention-backend triton"
--vary "--attention-backend default"` on four GPUs at TP=2 measures both
backends in one call. Copies [j*K/V, (j+1)*K/V) append the j-th OPTS to the
run's options (so they win over the same option there) and are pooled
apart, into O/SLUG (SLUG: OPTS in letters, digits and dashes,
e.g. attention-backend-triton). Each comparison is still whole within each
of its copies; two comparisons' numbers are not to be compared.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading

import results
from cpus import cpu_cores, cpu_slices

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(HERE, "e2e.py")
PORT_STRIDE = 1000


def slices(n, k):
    """k equal, disjoint, consecutive slices of range(n)."""
    if k < 1 or n < k or n % k:
        raise ValueError(f"{n} cannot be split into {k} equal slices")
    w = n // k
    return [list(range(i * w, (i + 1) * w)) for i in range(k)]


def option(argv, name):
    """The value of `name VALUE` in argv (last one wins, as in argparse)."""
    value = None
    for i, x in enumerate(argv[:-1]):
        if x == name:
            value = argv[i + 1]
    return value


def without(argv, *names):
    """argv without any `NAME VALUE` pair of these names."""
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
        elif x in names:
            skip = True
        else:
            out.append(x)
    return out


def slug(opts):
    """A folder name for one --vary's options: "--attention-backend triton"
    -> "attention-backend-triton"."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", opts).strip("-.") or "default"


def groups(k, vary):
    """[(slug or None, copy indices)]: one group of every copy without
    --vary, else len(vary) groups of consecutive copies."""
    if not vary:
        return [(None, list(range(k)))]
    if k % len(vary):
        raise ValueError(f"{k} copies cannot be shared out among {len(vary)} --vary option sets")
    slugs = [slug(v) for v in vary]
    if len(set(slugs)) < len(slugs):
        raise ValueError(f"two --vary option sets share the folder name: {', '.join(slugs)}")
    w = k // len(vary)
    return [(s, list(range(j * w, (j + 1) * w))) for j, s in enumerate(slugs)]


def plan(k, gpus, cores, run_argv, have_taskset=True, vary=()):
    """[(label, env additions, argv prefix, e2e argv, out dir)] per copy;
    `cores`: logical CPUs grouped by physical core (cpus.cpu_cores), or None for
    no pinning; `vary`: the --vary option strings (groups())."""
    work = option(run_argv, "--work-dir") or "/tmp/sglpatch-bench"
    extra = [[]] * k
    for j, (_, members) in enumerate(groups(k, vary)):
        for i in members:
            extra[i] = shlex.split(vary[j]) if vary else []
    gpu_slices = slices(gpus, k)
    for i in range(k):
        tp = int(option(run_argv + extra[i], "--tp") or 1)
        if len(gpu_slices[i]) < tp:
            raise ValueError(f"{gpus} GPUs in {k} copies leave {len(gpu_slices[i])} "
                             f"per copy, fewer than --tp {tp}")
    pins = (cpu_slices(cores, k) if have_taskset else None) or [None] * k
    base = without(run_argv, "--work-dir", "--out-dir", "--port-base")
    copies = []
    for i in range(k):
        label = f"pair{i}"
        wdir = os.path.join(work, label)
        out = os.path.join(wdir, "out")
        env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpu_slices[i]))}
        prefix = []
        if pins[i] is not None:
            prefix = ["taskset", "-c", ",".join(map(str, pins[i]))]
        argv = base + extra[i] + ["--work-dir", wdir, "--out-dir", out,
                                  "--port-base", str(30000 + PORT_STRIDE * i)]
        copies.append((label, env, prefix, argv, out))
    return copies


def _relay(label, stream):
    for line in iter(stream.readline, ""):
        sys.stdout.write(f"[{label}] {line}")
        sys.stdout.flush()


def run_copies(copies):
    """Start every copy, relay their output with a [pair<i>] prefix, wait;
    the exit codes in order."""
    procs, relays = [], []
    for label, env, prefix, argv, out in copies:
        if os.path.isdir(out):
            shutil.rmtree(out)  # this call's numbers only
        p = subprocess.Popen(prefix + [sys.executable, E2E, "run"] + argv,
                             env=dict(os.environ, **env), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        t = threading.Thread(target=_relay, args=(label, p.stdout), daemon=True)
        t.start()
        procs.append(p)
        relays.append(t)
    codes = [p.wait() for p in procs]
    for t in relays:
        t.join(timeout=10)
    return codes


def pool_into(out_dir, copies):
    """Pool each copy's results files into out_dir (one file per date and
    card, as e2e writes them); the paths written."""
    by_name = {}
    for label, _, _, _, out in copies:
        if not os.path.isdir(out):
            continue
        for name in sorted(os.listdir(out)):
            if name.endswith(".json"):
                by_name.setdefault(name, []).append((label, os.path.join(out, name)))
    written = []
    os.makedirs(out_dir, exist_ok=True)
    for name, sources in by_name.items():
        data = None
        for label, path in sources:
            with open(path) as fh:
                data = results.pool(data, json.load(fh), label)
        data.setdefault("bench", {})["pairs"] = [label for label, _ in sources]
        results.validate(data)
        dest = os.path.join(out_dir, name)
        results.write(dest, data)
        written.append(dest)
    return written


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print("pairs.py: the e2e run options follow `--`", file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser(prog="pairs.py", description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, required=True, help="copies of the run")
    ap.add_argument("--gpus", type=int, default=None, help="default: nvidia-smi's count")
    ap.add_argument("--no-pin", action="store_true",
                    help="no taskset: the copies share all CPUs")
    ap.add_argument("--vary", action="append", default=[], metavar="OPTS",
                    help="e2e options of one comparison of several at once (module docstring)")
    a = ap.parse_args(argv[:cut])
    run_argv = argv[cut + 1:]
    out_dir = option(run_argv, "--out-dir")
    if not out_dir:
        ap.error("the e2e run options need --out-dir (where the pooled results go)")
    gpus = a.gpus if a.gpus is not None else gpu_count()
    cores = None if a.no_pin else cpu_cores()
    try:
        copies = plan(a.pairs, gpus, cores, run_argv, have_taskset=bool(shutil.which("taskset")),
                      vary=a.vary)
        parts = groups(a.pairs, a.vary)
    except ValueError as e:
        print(f"pairs.py: {e}", file=sys.stderr)
        return 2
    for j, (name, members) in enumerate(parts):
        for i in members:
            label, env, prefix, _, _ = copies[i]
            print(f"{label}: GPUs {env['CUDA_VISIBLE_DEVICES']}"
                  f"{', ' + ' '.join(prefix) if prefix else ''}"
                  f"{', ' + a.vary[j] if name else ''}", flush=True)
    codes = run_copies(copies)
    for name, members in parts:
        dest = os.path.join(out_dir, name) if name else out_dir
        for path in pool_into(dest, [copies[i] for i in members]):
            print(f"pooled {len(members)} copies -> {path}", flush=True)
    bad = [f"{c[0]} exit {rc}" for c, rc in zip(copies, codes) if rc != 0]
    if bad:
        print("pairs.py: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0
    return len([x for x in out.splitlines() if x.strip()])


if __name__ == "__main__":
    sys.exit(main())
