"""A clone is the whole project: nothing points at files outside the
repository or at the records of how it was made (issue numbers, the reports
the series was built from).  The patch files are excluded: their messages
are the series maintainers' to word."""

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTSIDE_PATCHES = ":!python/sglpatch/patches"
THIS_TEST = ":!test/docs/test_self_contained.py"

# `seed` alone is also a random-number seed (bench_serving --seed, the model
# builder's seed, the "seed" key of committed results), so what is refused
# is the other meaning: numbered or lettered reports the series came from.
PATTERNS = {
    "a path outside the repository": r"\.\./(shared|seeds)\b",
    "an issue number": r"\bissue [0-9]",
    "a source report": r"\b[Ss]eeds? (0[0-9]{2}|[A-E])\b|\bthe seed'?s\b",
}


def git_grep(pattern):
    res = subprocess.run(["git", "grep", "-nE", pattern, "--", ".", OUTSIDE_PATCHES, THIS_TEST],
                         cwd=REPO, capture_output=True, text=True)
    if res.returncode not in (0, 1):
        pytest.skip(f"git grep unavailable: {res.stderr.strip()}")
    return res.stdout.splitlines()


@pytest.mark.parametrize("what", sorted(PATTERNS))
def test_no_reference_to(what):
    assert git_grep(PATTERNS[what]) == []


def test_the_patterns_find_what_they_refuse():
    # each pattern matches the kind of text it is meant to keep out
    import re

    samples = {"a path outside the repository": "see ../shared/series/SERIES.md",
               "an issue number": "the goal of issue 6",
               "a source report": "Upstream #26020 (seed 002); Seeds C and D assume it"}
    for what, text in samples.items():
        assert re.search(PATTERNS[what], text), what
    assert not re.search(PATTERNS["a source report"], "--seed 1, manual_seed(seed)")
