"""Every prefix of the series leaves sglang importable (a bisectable series).

For k = 1..N: patches 1..k applied to a full pristine sglang from the wheel
with `sglpatch apply --through`, then the scheduler's and workers' modules
and every module the series touches (manifest.json) are imported in a fresh
interpreter (with sglang's own sgl_kernel stub, as the unit tests do): one
forked from an interpreter that holds torch and sglang's other third-party
packages already (import_zygote.py), never sglang.
The wheel is unpacked once (per pytest-xdist worker): `apply --through k`
continues from the prefix the last test left, so each patch is applied
once and the bytecode of the modules no patch touched is compiled once.
"""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO
from import_zygote import Zygote

from sglpatch.series import PATCHES_DIR, load_series, read_series_names

# the scheduler, its workers and the backends the series changes most
ENTRY_MODULES = [
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.managers.overlap_utils",
    "sglang.srt.managers.tp_worker",
    "sglang.srt.model_executor.forward_batch_info",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.model_executor.cuda_graph_runner",
    "sglang.srt.layers.attention.base_attn_backend",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.trtllm_mha_backend",
    "sglang.srt.speculative.eagle_worker",
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2",
    "sglang.srt.speculative.frozen_kv_mtp_worker",
    "sglang.srt.speculative.dflash_worker",
    "sglang.srt.batch_overlap.two_batch_overlap",
]
# Modules the series touches that no CPU interpreter can import, patched or
# not; each with why. Every other touched module is imported at every
# prefix, so a patch to a module the entry modules never reach (fa3's
# backend, the standalone worker, the frozen-KV MTP graph runner) is
# imported too.
NOT_IMPORTABLE_ON_CPU = {
    "sglang.bench_one_batch": "imports uvloop, which the CPU venv lacks",
    "sglang.srt.hardware_backend.mlx.scheduler_mixin": "needs Apple's mlx",
    "sglang.srt.hardware_backend.mlx.tp_worker": "needs Apple's mlx",
    "sglang.srt.speculative.ngram_worker": "imports tvm_ffi, which the CPU venv lacks",
    # 0.5.12.post1's own module: a return annotation names ModelRunner, which
    # it imports only for type checking (NameError at import, patched or not)
    "sglang.srt.speculative.multi_layer_eagle_worker": "NameError in 0.5.12.post1 itself",
}


def touched_modules():
    """The dotted names of the sglang modules the series' patches change."""
    names = set()
    for path in load_series().touched_files():
        if path.endswith(".py"):
            parts = ["sglang", *path[: -len(".py")].split("/")]
            if parts[-1] == "__init__":
                parts.pop()
            names.add(".".join(parts))
    return names


MODULES = ENTRY_MODULES + sorted(
    touched_modules() - set(ENTRY_MODULES) - set(NOT_IMPORTABLE_ON_CPU))
_IMPORT_ALL = (
    "import importlib, sys\n"
    "from sglang.test.test_utils import maybe_stub_sgl_kernel\n"
    "maybe_stub_sgl_kernel()\n"
    "for name in sys.argv[1:]:\n"
    "    importlib.import_module(name)\n"
    "import sglang; print(sglang.__file__)\n"
)
SERIES = read_series_names(PATCHES_DIR)

pytestmark = pytest.mark.slow  # sglang imported once for every prefix


class SeriesSite:
    """The one full pristine sglang of this module's tests, and how many
    patches of the series it holds (None: not unpacked yet, or a step failed
    half way and the copy is unpacked again)."""

    def __init__(self, root: Path, wheel: Path):
        self.site, self.wheel, self.applied = root / "site", wheel, None

    def unpack(self):
        shutil.rmtree(self.site, ignore_errors=True)
        with zipfile.ZipFile(self.wheel) as zf:
            zf.extractall(self.site, [n for n in zf.namelist() if n.startswith("sglang/")])
        self.applied = 0


@pytest.fixture(scope="module")
def series_site(tmp_path_factory, wheel_path):
    return SeriesSite(tmp_path_factory.mktemp("bisect"), wheel_path)


@pytest.fixture(scope="module")
def importer():
    """A fresh interpreter's imports for each prefix, torch and the other
    third-party packages loaded once (import_zygote.py)."""
    zygote = Zygote(env={"PATH": "/usr/bin:/bin"})
    yield zygote
    zygote.close()


def test_every_module_left_out_is_one_the_series_touches():
    assert set(NOT_IMPORTABLE_ON_CPU) <= touched_modules()


@pytest.mark.parametrize("count", range(1, len(SERIES) + 1),
                         ids=[name.split("-", 1)[0] for name in SERIES])
def test_prefix_of_series_imports(tmp_path, series_site, importer, count):
    site = series_site.site
    number = SERIES[count - 1].split("-", 1)[0]

    def sglpatch(*args):
        result = subprocess.run(
            [sys.executable, "-m", "sglpatch", *args, "--sglang-dir", str(site / "sglang")],
            capture_output=True, text=True, cwd=REPO)
        assert result.returncode == 0, result.stderr
        return result.stdout

    if series_site.applied is None:
        series_site.unpack()
    applied, series_site.applied = series_site.applied, None  # known again once through
    if applied > count:  # a later prefix ran first here (tests spread over workers)
        sglpatch("revert")
    sglpatch("apply", "--through", number)
    report = json.loads(sglpatch("status", "--json"))
    assert [p["status"] for p in report["patches"]] == (
        ["applied"] * count + ["not applied"] * (len(SERIES) - count))
    assert report["applied_through"] == SERIES[count - 1]
    series_site.applied = count

    # a module a later patch adds is not there yet
    def present(name):
        base = site / name.replace(".", "/")
        return base.with_suffix(".py").exists() or (base / "__init__.py").exists()

    modules = [name for name in MODULES if present(name)]
    rc, stdout, stderr = importer.run(site, tmp_path, _IMPORT_ALL, modules, collect=False)
    assert rc == 0, stderr[-3000:]
    assert stdout.strip().endswith(str(site / "sglang" / "__init__.py"))
