"""CPU test-environment work-around for sglang 0.5.12.post1 (test harness only).

Every PyPI Linux torchvision wheel is a CUDA build. Beside the CPU torch its
ops library fails to load, and `import torchvision` then dies in
`torchvision/_meta_registrations.py` with
"operator torchvision::nms does not exist" -- which breaks `import sglang`
(`srt/utils/common.py` imports `torchvision.io`).

Defining the two op schemas before torchvision is first imported lets it
import (without its ops, which no CPU test uses). The setup script installs
this module into the test venv with a `.pth` line that calls `install()`; the
hook is lazy: torch is only imported when something imports torchvision, so
plain `python`/`pip` start-up in the venv stays fast. sglang itself is never
edited. The sgl_kernel work-around is sglang's own
`sglang.test.test_utils.maybe_stub_sgl_kernel()`, called by the tests.
"""

import sys

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library = None  # kept alive: dropping the Library object unregisters the ops


def define_torchvision_op_schemas() -> None:
    global _library
    if _library is not None:
        return
    import torch

    if torch.cuda.is_available():
        return  # a real CUDA torch loads torchvision's own ops
    _library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _library.define(schema)


class _TorchvisionFirstImport:
    """Runs the schema definition once, just before torchvision first loads.
    A meta path finder by protocol (find_spec), not by subclassing
    importlib.abc.MetaPathFinder: importing importlib.abc at every start-up
    of a Python in the venv (the .pth line) took about 30 ms, most of a
    bare start-up, in each of the thousand processes `make test` starts."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        define_torchvision_op_schemas()
        return None  # let the normal finders import the real package


def install() -> None:
    if "torchvision" in sys.modules:
        return
    if not any(isinstance(f, _TorchvisionFirstImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionFirstImport())
