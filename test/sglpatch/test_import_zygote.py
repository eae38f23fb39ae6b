"""import_zygote.Zygote: each request imports from its own site, as a fresh
interpreter would, and reports failures as one would."""

import pytest

from import_zygote import Zygote


def site(root, name, body):
    pkg = root / name / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    return root / name


@pytest.fixture
def zygote():
    z = Zygote(env={"PATH": "/usr/bin:/bin"}, preload=("json",))
    yield z
    z.close()


def test_each_request_imports_its_own_site(tmp_path, zygote):
    code = "import sys, sglang; print(sglang.WHO, sys.argv[1:])"
    a = site(tmp_path, "a", "WHO = 'a'\n")
    b = site(tmp_path, "b", "WHO = 'b'\n")
    assert zygote.run(a, tmp_path, code, ["x"])[:2] == (0, "a ['x']\n")
    assert zygote.run(b, tmp_path, code)[:2] == (0, "b []\n")
    assert zygote.run(a, tmp_path, code)[:2] == (0, "a []\n")  # b left nothing behind


def test_a_failing_import_or_exit_comes_back_as_its_exit_code(tmp_path, zygote):
    broken = site(tmp_path, "broken", "import no_such_module_anywhere\n")
    rc, _, stderr = zygote.run(broken, tmp_path, "import sglang")
    assert rc == 1 and "ModuleNotFoundError: No module named 'no_such_module_anywhere'" in stderr
    ok = site(tmp_path, "ok", "")
    assert zygote.run(ok, tmp_path, "import sys; sys.exit(3)")[0] == 3
    assert zygote.run(ok, tmp_path, "import sglang")[0] == 0  # the zygote lives on


def test_a_child_that_never_ends_is_killed_with_the_zygote(tmp_path, zygote):
    ok = site(tmp_path, "ok", "")
    with pytest.raises(TimeoutError, match="no answer from the import zygote in 1 s"):
        zygote.run(ok, tmp_path, "import time; time.sleep(60)", timeout=1)
    assert zygote.proc.poll() is not None


def test_children_collect_unless_asked_not_to_and_skip_the_preloaded(tmp_path, zygote):
    ok = site(tmp_path, "ok", "")
    code = "import gc; print(gc.isenabled(), gc.get_freeze_count() > 0)"
    assert zygote.run(ok, tmp_path, code)[:2] == (0, "True True\n")
    assert zygote.run(ok, tmp_path, code, collect=False)[:2] == (0, "False True\n")
    assert zygote.run(ok, tmp_path, code)[:2] == (0, "True True\n")  # per request
