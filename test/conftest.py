"""Test order for `make test`'s workers (pytest-xdist, --dist worksteal),
and Python's garbage collector while a process collects.

Worksteal hands each worker one contiguous share of the collected tests.
In file order, the tests marked slow (they mostly wait: on stand-in
servers, on a killed rank, on a start-up given up at its deadline) sat in
one or two shares, and the last of them ran alone after the quick tests
were done. Here each share begins with its part of the slow tests, so
their waits overlap the other workers' quick tests. The slow tests of a
module with a module-scoped fixture stay in one share (the fixture is
built once); the quick tests keep file order.

Collecting imports torch in every worker, and sglang's modules in the unit
tests' process: Python's cyclic garbage collector took about a third of
that CPU, walking the growing heap of module objects again and again. A
process that collects does so with the collector off; then it freezes
what collecting left (those objects live to the end anyway) and turns
the collector back on for the tests. The pytest-xdist controller, which
collects nothing, is left alone.
"""

import gc


def worker_order(items, workers, slow, unit):
    """`items` reordered for `workers` workers: share i of the sizes
    worksteal hands out first (what is left // workers left) begins with
    its slow items, whole units dealt largest first to the share with the
    fewest; then quick items in their order. `slow(item)` -> bool,
    `unit(item)` -> the key of the items that must share a worker."""
    units = {}
    for item in items:
        if slow(item):
            units.setdefault(unit(item), []).append(item)
    quick = [item for item in items if not slow(item)]
    shares = [[] for _ in range(workers)]
    for members in sorted(units.values(), key=len, reverse=True):
        min(shares, key=len).extend(members)
    ordered, left = [], len(items)
    for i, share in enumerate(shares):
        size = max(left // (workers - i), len(share))
        take = size - len(share)
        ordered += share + quick[:take]
        quick, left = quick[take:], left - size
    return ordered + quick


def _slow(item):
    return item.get_closest_marker("slow") is not None


def _unit(item):
    defs = item._fixtureinfo.name2fixturedefs.values()
    if any(d[-1].scope == "module" for d in defs if d):
        return item.nodeid.split("::")[0]
    return item.nodeid


def pytest_collection_modifyitems(session, config, items):
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers > 1:
        items[:] = worker_order(items, workers, _slow, _unit)


def _collects(config):
    """False for the pytest-xdist controller: its workers collect."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def pytest_configure(config):
    if _collects(config):
        gc.disable()


def pytest_collection_finish(session):
    gc.freeze()
    gc.enable()
