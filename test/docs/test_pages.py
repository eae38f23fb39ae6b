"""The pages as data, never as sentences: every generated block is what
`e2e.py report --summary` renders now, every link and results name
resolves, the results hold what README's bullets say of them, the pages keep
their shape, and no page outside the dated notes names a build by a
relative word, dates itself, or speaks of one GPU machine's procedure."""

import glob
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "benchmark")
RESULTS = os.path.join(BENCH, "results")
sys.path.insert(0, BENCH)

import report  # noqa: E402

PAGES = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True,
                       text=True).stdout.split()
JSONS = sorted(n[:-5] for n in os.listdir(RESULTS) if n.endswith(".json"))
HINT = "regenerate: python benchmark/e2e.py report --summary"


def read(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as fh:
        return fh.read()


def test_results_page_is_current():
    assert report.results_page(report.load_current(), RESULTS) == read("benchmark/RESULTS.md"), HINT


def test_readme_summary_is_current():
    text = read("README.md")
    assert report.refresh_summary(text, report.load_current(), RESULTS,
                                  "benchmark/results") == text, HINT


def test_current_json_names_side_by_side_files_and_notes():
    for setting in report.load_current()["settings"]:
        for path, _, _ in report.entries(setting, RESULTS):
            with open(path) as fh:
                data = json.load(fh)
            if setting.get("kind") != "correctness":  # speed: builds measured in turn
                assert data["bench"]["side_by_side"], path
        for note in setting.get("notes", []):
            assert os.path.exists(os.path.join(RESULTS, "notes", note)), note


def slugs(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    heads = re.findall(r"^#+ (.+)$", read(path), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


# Repository paths a page may name in backticks (python/sglang/... and
# test/run_suite.py are upstream's layout); PENDING: pages another change adds.
OURS = ("benchmark/", "docs/", "python/sglpatch/", "test/benchmark/", "test/docs/",
        "test/registered/", "test/sglpatch/", "test/harness/")
PENDING = set()


def resolves(target, page):
    """A link target or a backticked repository path: the file exists, and a
    `#anchor` into a Markdown file names one of its headings."""
    path, _, anchor = target.partition("#")
    base = os.path.dirname(page) if page and not path.startswith(("benchmark/", "docs/",
                                                                  "test/", "python/")) else ""
    full = os.path.normpath(os.path.join(base, path)) if path else page
    if not glob.glob(os.path.join(REPO, full)):
        return full in PENDING
    return not anchor or not full.endswith(".md") or anchor in slugs(full)


@pytest.mark.parametrize("page", PAGES)
def test_links_and_paths_resolve(page):
    text = read(page)
    links = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
    paths = [t.rstrip(".,:;") for t in re.findall(r"`((?:benchmark|docs|test|python)/[^`\s]+)`", text)
             if t.startswith(OURS) and not re.search(r"DATE|NAME|NNNN|<", t)]
    if page.startswith("benchmark/results/notes/"):
        paths = []  # their backticked paths are the day's, as written then
    broken = [t for t in links if not resolves(t, page)] + [t for t in paths if not resolves(t, "")]
    assert broken == [], f"{page}: {broken}"


RESULTS_NAME = re.compile(r"\b20\d\d-\d\d-\d\d-[A-Za-z0-9.-]*[A-Za-z0-9]")


@pytest.mark.parametrize("page", PAGES)
def test_results_names_resolve(page):
    """A dated name in a page is a results file, probe folder, log or note."""
    names = set(RESULTS_NAME.findall(read(page)))
    have = set(os.listdir(RESULTS)) | set(os.listdir(os.path.join(RESULTS, "notes")))
    stems = {n.rsplit(".", 1)[0] if n.endswith((".json", ".md", ".png", ".log")) else n for n in have}
    missing = sorted(n for n in names if n not in have and n not in stems)
    assert missing == [], f"{page}: {missing}"


# Words no page, script or patch outside the dated record may use: they date
# it, or name a build by its place in time, or belong to the procedure of one
# GPU machine.
REFUSED = {
    "a relative build name": r"\b(whole|full|shipped|current|latest) series\b|\bas shipped\b"
                             r"|\bseries then\b",
    "a dated word": r"\bnot yet\b|\bsince then\b|\bso far\b|\buntil now\b|\btoday\b"
                    r"|\byesterday\b|\brecently\b",
    "one machine's procedure": r"\$OUT\b|\bcalls? \d+\b|\bnvidia-h[12]00(-x\d)?\b",
}


# Every tracked text file outside the dated record (benchmark/results/: the
# results pages, probe folders and notes), this file's samples aside.
TRACKED = [p for p in subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True,
                                     text=True).stdout.split()
           if not p.startswith("benchmark/results/") and p != "test/docs/test_pages.py"]


def _text(path):
    try:
        return read(path)
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        return ""  # a binary file, or a submodule


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_tracked_files_refuse(what):
    found = [f"{p}: {m.group(0)!r}" for p in TRACKED
             for m in re.finditer(REFUSED[what], " ".join(_text(p).split()), re.I)]
    assert found == [], "say it by patch range, in a dated note, or in benchmark/device/README.md"


def test_the_refused_patterns_find_what_they_refuse():
    samples = {"a relative build name": "the whole\nseries as shipped",
               "a dated word": "a pinned call (not yet run)",
               "one machine's procedure": "OUT=$OUT ... (call 33, kind nvidia-h200-x2)"}
    for what, text in samples.items():
        assert re.search(REFUSED[what], " ".join(text.split()), re.I), what
    assert not re.search(REFUSED["one machine's procedure"], "OUT=out --tp 2, 2026-11-27-h200x2")


# Results files named before builds were named by patch range; a new name
# gives the range instead (0001-0012), never a word relative to its day.
RELATIVE_IN_NAMES = re.compile(r"whole-series|full-series|shipped-series|as-shipped|current")
NAMED_BEFORE = (
    "2026-11-27-h100x2-tp2-triton-shipped-series-nospec", "2026-11-27-h100x4-tp4-eagle3-full-series",
    "2026-11-27-h100x4-tp4-full-series-capture-lines", "2026-11-27-h100x4-faults-full-series",
    "2026-11-27-h200-flashinfer-shipped-series", "2026-11-27-h200-default-backend-shipped-series",
    "2026-11-27-h200-default-backend-whole-series", "2026-11-27-h200-triton-shipped-series",
    "2026-11-27-h200-triton-whole-series")


def test_new_results_files_name_builds_by_patch_range():
    assert [n for n in os.listdir(RESULTS)
            if RELATIVE_IN_NAMES.search(n) and not n.startswith(NAMED_BEFORE)] == []


def test_every_greedy_check_found_one_output():
    """README: greedy EAGLE3 output equals non-speculative and unpatched
    output on every server of every results file, but unpatched servers
    launched without EAGLE's parameters, which run them on the wrong worker
    (0015)."""
    for stem in JSONS:
        with open(os.path.join(RESULTS, stem + ".json")) as fh:
            data = json.load(fh)
        digests = {}
        for g in data.get("greedy_runs", []):
            if g["variant"] == "base" and g.get("spec_params") == "auto":
                continue
            digests.setdefault((g["prompts"], g.get("disaggregation")), set()).add(g["sha256"])
            off = "prompts_off_own_chain" if g.get("disaggregation") else "prompts_off_constructed_f"
            assert not g.get(off), stem
        assert all(len(d) == 1 for d in digests.values()), stem
        assert all(e["mismatched_prompts"] == 0 for e in data.get("greedy_equivalence", [])), stem


def section(path, heading):
    text = read(path).split(f"\n{heading}\n", 1)[1]
    return text.split("\n#", 1)[0]


LIMITS = {"README.md": 150, "benchmark/README.md": 250, "benchmark/kit/README.md": 70,
          "docs/architecture.md": 130}


@pytest.mark.parametrize("page", sorted(LIMITS) + sorted(glob.glob("docs/patches/*.md",
                                                                   root_dir=REPO)))
def test_reference_pages_keep_their_size(page):
    assert len(read(page).splitlines()) <= LIMITS.get(page, 100)
    if page.startswith("docs/patches/"):
        heads = re.findall(r"^## (\w+)", read(page), re.M)
        assert {"What", "Why", "Risk", "Tests", "Evidence"} <= set(heads), page
        assert len(section(page, "## Evidence").strip().splitlines()) <= 10, page


def test_summary_bullets_and_known_limits_are_short():
    bullets = [b for b in section("README.md", "## What the GPU has shown").splitlines()
               if b.startswith("- ")]
    assert 0 < len(bullets) <= 6
    assert not [b for b in bullets if re.search(r"\d\.\d|%|\bms\b", b)], "numbers: the summary table"
    limits = re.split(r"\n(?=- )", section("docs/architecture.md", "## Known limits").strip())
    assert len(limits) <= 6
    assert all(len(item.splitlines()) <= 3 and "`" in item for item in limits)
