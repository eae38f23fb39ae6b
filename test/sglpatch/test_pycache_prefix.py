"""With PYTHONPYCACHEPREFIX, bytecode lives outside the package; unchecked-hash
bytecode there of a module apply changes must go too, or Python keeps
running the old code (checked here with a real import)."""

import os
import py_compile
import subprocess
import sys
from pathlib import Path

from sglpatch import engine
from seriesmaker import install_base, two_patch_series


def _alpha_in_a_fresh_python(site: Path, prefix: Path) -> str:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(prefix))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "from sglang.srt.alpha import alpha; print(alpha())", str(site)],
        capture_output=True, text=True, env=env, check=True)
    return result.stdout.strip()


def _bytecode_in(prefix: Path, source: Path) -> Path:
    mirror = prefix / str(source.parent).lstrip(os.sep)
    return mirror / f"{source.stem}.{sys.implementation.cache_tag}.pyc"


def test_bytecode_under_the_pycache_prefix_goes_with_the_change(tmp_path, monkeypatch):
    patches = two_patch_series(tmp_path)
    installed = install_base(tmp_path / "site")
    prefix = tmp_path / "pycache"
    source = installed / "srt" / "alpha.py"
    compiled = _bytecode_in(prefix, source)
    compiled.parent.mkdir(parents=True)
    py_compile.compile(str(source), cfile=str(compiled), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert _alpha_in_a_fresh_python(installed.parent, prefix) == "1"

    monkeypatch.setattr(sys, "pycache_prefix", str(prefix))
    outcome = engine.apply(str(installed), patches_dir=patches)
    assert not compiled.exists()
    assert "compiled bytecode" in outcome.message
    assert _alpha_in_a_fresh_python(installed.parent, prefix) == "10"
