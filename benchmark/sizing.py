"""How many prompts a bench_serving point gets, so that it lasts at least
--min-seconds.

The first count comes from a short throughput probe; the probe runs faster
or slower than the bench (machine noise of +-50% per repeat was seen on one
H200), so every measured duration corrects the count.  A correction only
ever grows the count: shrinking after a slow repeat made the next, normal
repeat end short (8-9 s for a 10 s target on 2026-11-26).  A repeat that
still ends short is measured again with the grown count (see e2e.py).
"""

import math

# the probe runs slower than the bench: aim this much above the target
PROBE_MARGIN = 1.3
# a repeat that ended short is re-sized this much above the target
SHORT_MARGIN = 1.1


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
