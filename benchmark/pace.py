"""How long the harness waits between two looks at a server (is it ready,
what did its log gain, are its traces written, has its process group gone)
and how far apart side-by-side servers start.

The defaults are the ones a GPU run wants: a look a second costs nothing
beside start-ups of minutes, and starts 3 s apart keep two start-ups from
picking ports in the same instant.  The CPU tests' stand-in server starts in
a fraction of a second; they shorten the waits through the environment:

  SGLPATCH_BENCH_POLL_S           at most this many seconds between two looks
  SGLPATCH_BENCH_START_SPACING_S  seconds between two side-by-side starts
  SGLPATCH_BENCH_START_TIMEOUT_S  at most this many seconds for a server to start

Unset (as on the GPU machine), every wait is the default.  Standard library
only.
"""

import os


def _seconds(name):
    value = os.environ.get(name)
    return float(value) if value else None


def poll_s(default):
    """The wait between two looks: `default`, or less under SGLPATCH_BENCH_POLL_S."""
    cap = _seconds("SGLPATCH_BENCH_POLL_S")
    return default if cap is None else min(default, cap)


def start_spacing_s(default=3.0):
    """Seconds between two side-by-side starts (SGLPATCH_BENCH_START_SPACING_S)."""
    value = _seconds("SGLPATCH_BENCH_START_SPACING_S")
    return default if value is None else value


def start_timeout_s(default):
    """Seconds a server may take to start: `default`, or less under
    SGLPATCH_BENCH_START_TIMEOUT_S."""
    cap = _seconds("SGLPATCH_BENCH_START_TIMEOUT_S")
    return default if cap is None else min(default, cap)
