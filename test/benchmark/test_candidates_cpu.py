"""Trial patches (benchmark/candidates/): each still applies on top of the
series' patches, with the device scripts' own `candidate_apply`, code and
tests; the harness takes `candidate-NAME` as a build of its own, after the
series' patches. With no trial patch in the directory only the naming is
checked here; candidate_apply itself is tested on a made-up patch in
test_lib_sh_cpu.py.

Their unit tests pass on the sglang each makes: `make test-candidates`
(TRIAL_TESTS=1), not `make test`. They are not shipped, and running them
(three in Triton's interpreter) was about a tenth of `make test`'s CPU time
on CI's two cores. The trial patches' tests run in children of one import
zygote (test/sglpatch/import_zygote.py): torch and the other packages sglang
imports load once, not once per trial patch."""

import glob
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmark"))
sys.path.insert(0, os.path.join(REPO, "test", "sglpatch"))
import builds  # noqa: E402
import results  # noqa: E402
from import_zygote import Zygote  # noqa: E402

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
    # trial patches stacked on the series, in order
    assert results.is_variant("candidate-a+b-c")
    assert builds.parse_variant("candidate-a+b-c=/tmp/x") == ("candidate-a+b-c", "/tmp/x")
    for name in ("candidate-a+", "candidate-+b", "candidate-a++b"):
        assert not results.is_variant(name)
    # ordered after the patched build, before upstream
    order = sorted(["upstream-0.5.13", "candidate-b", "patched", "candidate-a", "base",
                    "patched-through-0004"], key=results.variant_order)
    assert order == ["base", "patched-through-0004", "patched", "candidate-a", "candidate-b",
                     "upstream-0.5.13"]


def test_an_upstream_release_is_a_variant():
    for name in ("upstream-0.5.13", "upstream-0.5.17", "upstream-0.5.12.post1"):
        assert results.is_variant(name)
        assert builds.parse_variant(f"{name}=/tmp/x") == (name, "/tmp/x")
    for name in ("upstream-", "upstream-latest", "upstream-0.5", "upstream-0.5.17rc1"):
        assert not results.is_variant(name)
        with pytest.raises(SystemExit, match="unknown variant"):
            builds.parse_variant(f"{name}=/tmp/x")
    # after the trial patches, by release (0.5.9 before 0.5.13, a post release after its own)
    order = sorted(["upstream-0.5.17", "upstream-0.5.13.post1", "candidate-a", "upstream-0.5.13",
                    "upstream-0.5.9", "base"], key=results.variant_order)
    assert order == ["base", "candidate-a", "upstream-0.5.9", "upstream-0.5.13",
                     "upstream-0.5.13.post1", "upstream-0.5.17"]


def _site_with(tmp_path, patches, importer=None):
    """A copy of the venv's (patched) sglang with these trial patches applied
    in order by the device scripts' own candidate_apply, and, for IMPORTER's
    children, the venv's bytecode for the files they leave as they were."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copytree(installed_sglang(), site / "sglang",
                    ignore=shutil.ignore_patterns("__pycache__"))
    applies = "; ".join(f'candidate_apply "{site}" "{p}" || exit 1' for p in patches)
    res = subprocess.run(["bash", "-c", f". benchmark/lib.sh; budget_start 100; {applies}"],
                         cwd=REPO, env=dict(os.environ, OUT_DIR=str(tmp_path)),
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    if importer is not None:
        importer.link_bytecode(installed_sglang(), site / "sglang")
    return site


@pytest.fixture(scope="module")
def importer():
    """Children that see sglang only on their trial patch's site."""
    zygote = Zygote(env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    yield zygote
    zygote.close()


# the child's site is sys.path[0]; a test's own subprocesses find it there too
RUN_PYTEST = ("import os, sys, pytest; os.environ['PYTHONPATH'] = sys.path[0]; "
              "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[1:]]))")


def _their_tests(tmp_path, patches):
    """The files of the patches' tests, in upstream's layout, over this
    repository's copies of the series' tests, under TMP_PATH/tests."""
    tests = tmp_path / "tests"
    shutil.copytree(os.path.join(REPO, "test", "registered"), tests / "test" / "registered")
    files = []
    for p in patches:
        res = subprocess.run(["git", "apply", "-p1", "--include=test/*", p], cwd=tests,
                             env=dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path)),
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        numstat = subprocess.run(["git", "apply", "--numstat", "-p1", "--include=test/*", p],
                                 cwd=tests, capture_output=True, text=True).stdout
        touched = [str(tests / line.split("\t")[2]) for line in numstat.splitlines() if line.strip()]
        assert touched, p
        files += touched
    return files


@pytest.mark.parametrize("patch", PATCHES, ids=os.path.basename)
def test_trial_patch_applies_on_the_series(patch, tmp_path):
    _site_with(tmp_path, [patch])
    assert all(os.path.isfile(f) for f in _their_tests(tmp_path, [patch]))


@pytest.mark.slow  # one worker, one zygote (test/conftest.py)
@pytest.mark.skipif(os.environ.get("TRIAL_TESTS") != "1",
                    reason="trial patches' tests: make test-candidates")
@pytest.mark.parametrize("patch", PATCHES, ids=os.path.basename)
def test_trial_patch_tests_pass_on_the_series(patch, tmp_path, importer):
    site = _site_with(tmp_path, [patch], importer)
    rc, out, err = importer.run(site, tmp_path, RUN_PYTEST, _their_tests(tmp_path, [patch]))
    assert rc == 0, out[-3000:] + err[-2000:]


def test_base_again_is_a_variant_beside_base():
    """The A/A control: a second unpatched server, named, with base's site."""
    assert results.is_variant("base-again")
    assert builds.parse_variant("base-again=/tmp/x") == ("base-again", "/tmp/x")
    assert not results.is_variant("base-again-2")
    order = sorted(["patched", "candidate-a", "base-again", "base"], key=results.variant_order)
    assert order == ["base", "base-again", "patched", "candidate-a"]
