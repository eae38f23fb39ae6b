"""Whole physical cores for the harness's processes: the CPU topology,
slices of it, and pinning (`e2e.py run --pin-cpus`; benchmark/pairs.py,
whose copies of a run get 1/K of the cores each through taskset).

A set made of whole cores (a logical CPU with its hyperthread siblings)
never shares a core with another set, so one server's host work never runs
beside another's.
"""

import os


def cpu_cores(sysfs="/sys/devices/system/cpu"):
    """The logical CPUs this process may use, grouped by physical core
    (hyperthread siblings together), cores in (socket, core) order; None
    where the topology cannot be read."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
        cores = {}
        for cpu in allowed:
            topo = os.path.join(sysfs, f"cpu{cpu}", "topology")
            with open(os.path.join(topo, "physical_package_id")) as fh:
                pkg = int(fh.read())
            with open(os.path.join(topo, "core_id")) as fh:
                core = int(fh.read())
            cores.setdefault((pkg, core), []).append(cpu)
    except (OSError, ValueError, AttributeError):
        return None
    return [cores[k] for k in sorted(cores)]


def cpu_slices(cores, k):
    """k sets of logical CPUs made of whole cores (a copy never gets the
    hyperthread sibling of another copy's CPU); None where there are fewer
    cores than copies."""
    if not cores or len(cores) < k:
        return None
    w = len(cores) // k
    return [sorted(c for core in cores[i * w:(i + 1) * w] for c in core) for i in range(k)]


def pin_sets(cores, k):
    """CPU sets for k servers that run at once and for the harness (this
    process and the bench clients it starts), each made of whole physical
    cores (`cores`: logical CPUs grouped by core, cpu_cores), so no
    server shares a core, or its hyperthread sibling, with another server
    or the client. The harness, one asyncio client at a time, gets one core
    and whatever does not divide evenly; the servers equal shares of the
    rest. (server sets, harness set), or None with fewer than k + 1 cores."""
    if not cores or len(cores) < k + 1:
        return None
    taken = (len(cores) - 1) // k * k  # the cores that divide evenly, the client's core left out
    return cpu_slices(cores[:taken], k), sorted(cpu for core in cores[taken:] for cpu in core)


def cpu_list(cpus):
    """[0, 1, 2, 8, 9] -> "0-2,8-9" (taskset's notation)."""
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(f"{start}-{c}" if c != start else f"{c}")
            start = None
    return ",".join(out)


def pin_cpus(log, k, cores=None):
    """--pin-cpus: pin this process (the bench clients it starts inherit it)
    and return the CPU set of each of the k servers of a group; None, said
    to `log`, where the machine has too few cores or no readable topology
    (the run then goes on unpinned, and its results say so)."""
    if cores is None:
        # SGLPATCH_CPU_SYSFS: where the CPU topology is read (a container
        # without /sys topology can name a copy; the tests name a fake one)
        cores = cpu_cores(os.environ.get("SGLPATCH_CPU_SYSFS", "/sys/devices/system/cpu"))
    plan = pin_sets(cores, k)
    if plan is None:
        log(f"pin: {len(cores or [])} physical cores cannot give each of {k} "
            "server(s) and the bench client its own; not pinned")
        return None
    servers, harness = plan
    os.sched_setaffinity(0, harness)
    log("pin: servers on CPUs " + " | ".join(map(cpu_list, servers))
        + f", bench client on {cpu_list(harness)}")
    return servers


def pin_child(cpus):
    """A subprocess preexec_fn that pins the child to `cpus`, None for no set.
    It runs in the child before exec: every process sglang forks from it
    (schedulers, detokenizer) inherits the set."""
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def rotated_place(index, rep, k):
    """--rotate-cpus: which of the k server CPU sets the server launched on
    set `index` runs on in repeat `rep`. Each repeat moves every server one
    set on, so over k repeats each build runs on every place once. With two
    servers the place changes with the turn (run.bench_order reverses it
    on odd repeats), so a page's split of the ratios by turn is then a
    split by place as well."""
    return (index + rep) % k
