"""benchmark/options.py: `e2e.py run`'s command line becomes one RunOptions,
every option a field and every default written only there."""

import argparse
import dataclasses
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))

import e2e  # noqa: E402
from options import RunOptions  # noqa: E402


def _run_parser():
    ap = e2e.build_parser()
    sub = next(x for x in ap._actions if isinstance(x, argparse._SubParsersAction))
    return ap, sub.choices["run"]


def test_every_run_option_is_a_field_and_every_field_an_option():
    _, run = _run_parser()
    dests = {x.dest for x in run._actions if x.dest != "help"}
    assert dests == {f.name for f in dataclasses.fields(RunOptions)}


def test_an_option_not_given_takes_the_dataclass_default():
    ap, _ = _run_parser()
    assert vars(ap.parse_args(["run"])) == {"cmd": "run"}  # no default in the parser
    assert RunOptions.from_namespace(ap.parse_args(["run"])) == RunOptions()


def test_the_command_line_becomes_typed_values():
    ap, _ = _run_parser()
    ns = ap.parse_args(["run", "--variant", "base", "--variant", "patched=/site",
                        "--overlap", "on,off", "--piecewise", "disabled",
                        "--concurrency", "1,4", "--server-arg=--enable-metrics",
                        "--tp", "2", "--deadline-s", "300", "--side-by-side"])
    opts = RunOptions.from_namespace(ns)
    assert opts.variant == ("base", "patched=/site")
    assert (opts.overlap, opts.piecewise, opts.concurrency) == ((True, False), (False,), (1, 4))
    assert opts.server_arg == ("--enable-metrics",)
    assert (opts.tp, opts.deadline_s, opts.side_by_side) == (2, 300.0, True)
    assert opts.repeats == 3 and opts.max_total_tokens is None  # not given: defaults
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.tp = 1


def test_an_option_without_a_field_is_refused():
    with pytest.raises(TypeError):
        RunOptions.from_namespace(argparse.Namespace(cmd="run", no_such_option=1))
