"""How many prompts a bench_serving point gets, so that it lasts at least
--min-seconds.

The first count comes from a short throughput probe; the probe runs faster
or slower than the bench (machine noise of +-50% per repeat was seen on one
H200), so every measured duration corrects the count.  A correction only
ever grows the count: shrinking after a slow repeat made the next, normal
repeat end short (8-9 s for a 10 s target on 2026-11-26).  A repeat that
still ends short is measured again with the grown count (see e2e.py).

The one exception is the first repeat of a point, the first the probe's
count is checked against: at high concurrency the probe ran about twice as
fast as the bench (800 prompts for 27.6 s at concurrency 32 on an H200 ×2,
10 s wanted), which spent more of a call's time on each point than on a
further repeat. A first repeat at least LONG_FACTOR times the target
re-sizes the count from its own rate, with LONG_MARGIN to spare; a slow
outlier would have to be twice as slow as the rest to make a later repeat
short, and that one is then measured again as above.
"""

import math

# the probe runs slower than the bench: aim this much above the target
PROBE_MARGIN = 1.3
# a repeat that ended short is re-sized this much above the target
SHORT_MARGIN = 1.1
# a first repeat this many times the target is re-sized from its own rate,
# this much above the target
LONG_FACTOR = 2.0
LONG_MARGIN = 1.8


def round_up(n, concurrency):
    """At least two full waves, a whole number of waves."""
    return max(2 * concurrency, int(math.ceil(n / concurrency)) * concurrency)


def from_probe(tok_per_s, output_len, concurrency, min_seconds):
    """First count: the probe's output tok/s over min_seconds, with margin."""
    need = min_seconds * tok_per_s / output_len * PROBE_MARGIN
    return round_up(need, concurrency)


def is_short(duration_s, min_seconds):
    return bool(duration_s) and duration_s < min_seconds


def grown(num_prompts, concurrency, duration_s, min_seconds):
    """Count for the next repeat after one of `duration_s` seconds: larger
    when that repeat was short, else unchanged."""
    if not is_short(duration_s, min_seconds):
        return num_prompts
    n = num_prompts * min_seconds / duration_s * SHORT_MARGIN
    return max(num_prompts + concurrency, round_up(n, concurrency))


def after_first(num_prompts, concurrency, duration_s, min_seconds):
    """Count for the repeats after a point's first, which ran `num_prompts`
    (the probe's count) in `duration_s` seconds: re-sized from that rate
    when it ran LONG_FACTOR times the target or longer, else as `grown`."""
    if duration_s and duration_s >= LONG_FACTOR * min_seconds:
        n = num_prompts * min_seconds * LONG_MARGIN / duration_s
        return min(num_prompts, round_up(n, concurrency))
    return grown(num_prompts, concurrency, duration_s, min_seconds)
