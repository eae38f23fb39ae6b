"""Trial patches (benchmark/candidates/): each still applies on top of the
whole series, with the device scripts' own `candidate_apply`, and its unit
tests pass on the sglang it makes; the harness takes `candidate-NAME` as a
build of its own, after the whole series."""

import glob
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmark"))
import builds  # noqa: E402
import results  # noqa: E402

PATCHES = sorted(glob.glob(os.path.join(REPO, "benchmark", "candidates", "*.patch")))


def installed_sglang():
    """The sglang package of the running Python (the venv's, with the series
    applied by `make venv`)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("no sglang installed")
    return list(spec.submodule_search_locations)[0]


def test_a_trial_patch_name_is_a_variant():
    for path in PATCHES + ["benchmark/candidates/some-change.patch"]:
        name = "candidate-" + os.path.basename(path)[:-len(".patch")]
        assert results.is_variant(name)
        assert builds.parse_variant(f"{name}=/tmp/x") == (name, "/tmp/x")
        with pytest.raises(SystemExit, match="needs =SITE"):
            builds.parse_variant(name)
    assert not results.is_variant("candidate-")
    # ordered after the whole series, before upstream
    order = sorted(["upstream-0.5.13", "candidate-b", "patched", "candidate-a", "base",
                    "patched-through-0004"], key=results.variant_order)
    assert order == ["base", "patched-through-0004", "patched", "candidate-a", "candidate-b",
                     "upstream-0.5.13"]


TRIAL_PATCH = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sglpatch maintainers <sglpatch@users.noreply.github.com>
Subject: [PATCH] version: say so

---
 python/sglang/version.py              | 1 +
 test/registered/unit/test_version.py  | 1 +
 2 files changed, 2 insertions(+)
 create mode 100644 test/registered/unit/test_version.py

diff --git a/python/sglang/version.py b/python/sglang/version.py
--- a/python/sglang/version.py
+++ b/python/sglang/version.py
@@ -1 +1,2 @@
 __version__ = "0.5.12.post1"
+TRIAL = True
diff --git a/test/registered/unit/test_version.py b/test/registered/unit/test_version.py
new file mode 100644
--- /dev/null
+++ b/test/registered/unit/test_version.py
@@ -0,0 +1 @@
+assert True
"""


def test_candidate_apply_changes_the_sites_sglang_and_leaves_the_tests_out(tmp_path):
    """benchmark/lib.sh candidate_apply, as device_compare.sh uses it for a
    variant candidate-NAME: the patch's python/sglang/ part lands in
    SITE/sglang, its tests (upstream's test/ tree) nowhere; a patch that
    does not apply leaves the site as it was."""
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "version.py").write_text('__version__ = "0.5.12.post1"\n')
    patch = tmp_path / "trial.patch"
    patch.write_text(TRIAL_PATCH)

    def apply():
        return subprocess.run(
            ["bash", "-c", f'. benchmark/lib.sh; candidate_apply "{site}" "{patch}"'],
            cwd=REPO, env=dict(os.environ, OUT=str(tmp_path)), capture_output=True, text=True)

    res = apply()
    assert res.returncode == 0, res.stdout + res.stderr
    assert (site / "sglang" / "version.py").read_text() == (
        '__version__ = "0.5.12.post1"\nTRIAL = True\n')
    assert sorted(p.name for p in site.iterdir()) == ["sglang"]
    # applied already: a second time it does not apply, and changes nothing
    assert apply().returncode != 0
    assert (site / "sglang" / "version.py").read_text().count("TRIAL") == 1


@pytest.mark.parametrize("patch", PATCHES, ids=os.path.basename)
def test_trial_patch_applies_on_the_series_and_its_tests_pass(patch, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    shutil.copytree(installed_sglang(), site / "sglang",
                    ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run(
        ["bash", "-c", f'. benchmark/lib.sh; budget_start 100; candidate_apply "{site}" "{patch}"'],
        cwd=REPO, env=dict(os.environ, OUT=str(tmp_path)), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    # its tests, in upstream's layout, over this repository's copies of the series' tests
    tests = tmp_path / "tests"
    shutil.copytree(os.path.join(REPO, "test", "registered"), tests / "test" / "registered")
    res = subprocess.run(["git", "apply", "-p1", "--include=test/*", patch], cwd=tests,
                         env=dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path)),
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    touched = subprocess.run(["git", "apply", "--numstat", "-p1", "--include=test/*", patch],
                             cwd=tests, capture_output=True, text=True).stdout.split("\n")
    files = [str(tests / line.split("\t")[2]) for line in touched if line.strip()]
    assert files
    env = dict(os.environ, PYTHONPATH=str(site))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
                         cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
