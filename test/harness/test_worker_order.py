"""The order `make test` gives its workers (test/conftest.py)."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "sglpatch_test_order", Path(__file__).resolve().parents[1] / "conftest.py")
order = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(order)


def shares(items, workers):
    """The contiguous shares worksteal's first hand-out gives each worker."""
    out, left, at = [], len(items), 0
    for i in range(workers):
        size = left // (workers - i)
        out.append(items[at:at + size])
        at, left = at + size, left - size
    return out


def test_every_share_begins_with_its_slow_tests_and_nothing_is_lost():
    # ten slow tests in one file, among forty quick ones, as collected
    items = [f"q{i}" for i in range(20)] + [f"s{i}" for i in range(10)] + \
        [f"q{i}" for i in range(20, 40)]
    got = order.worker_order(items, 4, lambda t: t[0] == "s", lambda t: t)
    assert sorted(got) == sorted(items)
    per = [[t for t in share if t[0] == "s"] for share in shares(got, 4)]
    assert [len(s) for s in per] == [3, 3, 2, 2]
    for share in shares(got, 4):
        slow = [t[0] == "s" for t in share]
        assert slow == sorted(slow, reverse=True)  # slow ones first
    quick = [t for t in got if t[0] == "q"]
    assert quick == [t for t in items if t[0] == "q"]  # file order kept


def test_a_unit_stays_in_one_share():
    items = [f"b{i}" for i in range(6)] + ["s0", "s1", "s2"] + [f"q{i}" for i in range(30)]
    unit = lambda t: "bisect" if t[0] == "b" else t  # noqa: E731
    got = order.worker_order(items, 3, lambda t: t[0] in "bs", unit)
    first, second, third = shares(got, 3)
    assert first[:6] == [f"b{i}" for i in range(6)]
    assert {second[0], third[0]} <= {"s0", "s1", "s2"}
    assert not any(t[0] == "b" for t in second + third)


def test_a_share_larger_than_its_hand_out_keeps_its_slow_tests():
    items = [f"s{i}" for i in range(8)] + ["q0", "q1"]
    got = order.worker_order(items, 2, lambda t: t[0] == "s", lambda t: "one")
    assert got == items  # one unit: all slow tests first, together
