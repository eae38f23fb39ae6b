"""Every attention backend class in sglang's source, importable on a CPU.

Shared by the attention-backend tests: a test walks these classes, so a
backend added to sglang is covered without touching the test.
"""

import ast
import importlib
import importlib.abc
import importlib.machinery
import pathlib
import sys

import sglang

SRT_DIR = pathlib.Path(sglang.__file__).parent / "srt"
# Vendor libraries some backend modules import at module level; none is on a
# CPU machine. They are stubbed (only for the import) so every backend class
# can be inspected, the way sglang's maybe_stub_sgl_kernel stubs sgl_kernel.
VENDOR_MODULES = ("torch_npu", "sgl_kernel_npu", "tvm_ffi", "flash_attn_interface")


class _VendorStubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in VENDOR_MODULES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from unittest.mock import MagicMock

        module.__path__ = []
        module.__getattr__ = lambda name: MagicMock()


def attention_backend_classes_in_source():
    """(module, class name) of every class deriving from srt's AttentionBackend.

    Read from the source, not from what happens to be imported, so a backend
    added to sglang is covered without touching this test. A class statement
    names its bases, so a file defining a subclass of a class already found
    holds that class's name: only such files are parsed, round by round
    until a round finds no new class (parsing every file of srt costs far
    more than reading it).
    """
    texts = {
        path: path.read_text(encoding="utf-8-sig") for path in SRT_DIR.rglob("*.py")
    }
    bases_of = {}
    module_of = {}
    found = {"AttentionBackend"}
    while True:
        todo = [path for path in texts if any(name in texts[path] for name in found)]
        if not todo:
            break
        for path in todo:
            tree = ast.parse(texts.pop(path))
            module = "sglang." + ".".join(
                path.relative_to(SRT_DIR.parent).with_suffix("").parts
            )
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    bases_of[node.name] = {
                        ast.unparse(b).split(".")[-1] for b in node.bases
                    }
                    module_of[node.name] = module
        grew = True
        while grew:
            grew = False
            for name, bases in bases_of.items():
                if name not in found and bases & found:
                    found.add(name)
                    grew = True
    found.discard("AttentionBackend")
    return sorted((module_of[name], name) for name in found)


def import_backend_class(module_name, class_name):
    finder = _VendorStubFinder()
    sys.meta_path.insert(0, finder)
    try:
        return getattr(importlib.import_module(module_name), class_name)
    finally:
        sys.meta_path.remove(finder)
