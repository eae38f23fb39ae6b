"""Import sglang from many sites without paying for its dependencies each time.

Importing the modules the series touches takes a fresh interpreter ~6 s,
two thirds of it in torch, transformers and the other third-party packages
sglang pulls in, which are the same for every site. A `Zygote` is one
interpreter that imports those packages (never sglang) once, then forks a
child per request: the child puts the request's site first on sys.path,
runs the request's code there and exits; its exit code and output come
back as a fresh interpreter's would. A child changes nothing in the
zygote, so each request sees only its own site's sglang.
"""

import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

# third-party packages sglang's scheduler and workers import; those missing
# here are skipped. The second line: what sglang's import pulls in besides
# (its module-level torch.compile calls load inductor and functorch, its
# quantization configs compressed_tensors and networkx), about half of a
# child's import (2-3 s of CPU a child) when left to each child. The last
# lines: what sglang.test.test_utils and the server's modules pull in (pandas,
# datasets and IPython alone are about 1 s of CPU a child), and the
# submodules of the packages above that its import reaches; a child's
# import of the series' modules then takes about 1 s of CPU, not 2.3.
PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "torchvision", "triton",
           "torch._inductor.compile_fx", "functorch.compile", "torch._dynamo.testing",
           "networkx", "compressed_tensors", "gguf", "partial_json_parser", "loguru",
           "transformers", "transformers.models.auto", "numpy", "safetensors",
           "huggingface_hub", "fastapi", "uvicorn", "aiohttp", "requests", "zmq",
           "pydantic", "openai", "msgspec", "orjson", "psutil", "PIL", "einops", "tqdm",
           "xgrammar", "outlines", "flashinfer",
           "pandas", "datasets", "IPython", "pyarrow", "fsspec", "traitlets", "dateutil",
           "multiprocess", "pybase64", "xxhash", "setproctitle", "pytest",
           "transformers.processing_utils", "transformers.modeling_outputs",
           "transformers.models.llama.modeling_llama", "transformers.video_processing_utils",
           "transformers.models.auto.processing_auto",
           "transformers.models.auto.tokenization_auto", "torchvision.transforms.v2",
           "aiohttp.web", "starlette.routing", "starlette.responses", "starlette.middleware",
           "zmq.asyncio", "triton.tools.tensor_descriptor")

_SERVE = r"""
import gc, importlib, json, os, sys, traceback
# no collections while preloading: they walked the growing heap of module
# objects again and again (gc.freeze() below keeps them out for good)
gc.disable()
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
# a child must find sglang on its request's site, not in this process
assert not [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]
# inspect's map of module files, filled for what is loaded now: the first
# inspect.getmodule of a child (triton.jit and torch.library read their
# functions' source at import) otherwise resolves every loaded module's
# path, preloaded ones included, again in every child
import inspect
inspect.getmodule(None, "<zygote>")
# what is loaded now lives as long as the zygote: the children's collections
# leave it alone instead of walking it (and copying its pages) every time
gc.freeze()
gc.enable()
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if not req["collect"]:
                gc.disable()
            for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            os.chdir(req["cwd"])
            sys.path.insert(0, req["site"])
            sys.argv = ["-c", *req["argv"]]
            exec(compile(req["code"], "<string>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class Zygote:
    """One preloaded interpreter; `run` is a fresh `python -c CODE ARGV...`
    with `site` on PYTHONPATH, run in `cwd`, environment `env` (fixed for the
    zygote's life: the first request's)."""

    def __init__(self, env, python=sys.executable, preload=PRELOAD):
        # where the children read and write bytecode (None: beside the sources)
        self.pycache_prefix = env.get("PYTHONPYCACHEPREFIX") or None
        # a session of its own: a stuck child is killed with the zygote
        self.proc = subprocess.Popen(
            [python, "-W", "ignore", "-c", _SERVE, *preload], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            start_new_session=True)

    def run(self, site, cwd, code, argv=(), timeout=300, collect=True):
        """(exit code, stdout, stderr) of CODE run with `site` first on sys.path;
        a request not answered within `timeout` seconds ends the zygote and
        raises TimeoutError. collect=False: the child runs with Python's
        cyclic garbage collector off, for code that only imports (its
        collections were about a fifth of an import of sglang's modules)."""
        cwd = Path(cwd)
        out, err = cwd / "zygote.stdout", cwd / "zygote.stderr"
        req = dict(site=str(site), cwd=str(cwd), code=code, argv=list(argv),
                   stdout=str(out), stderr=str(err), collect=collect)
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        # one line a request, read whole: nothing waits in the pipe's buffer
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            self.kill()
            raise TimeoutError(f"no answer from the import zygote in {timeout} s; "
                               f"the child's stderr: {err.read_text()[-2000:]}")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the import zygote died (exit {self.proc.wait()})")
        rc = json.loads(line)["rc"]
        return rc, out.read_text(), err.read_text()

    def link_bytecode(self, src, dst):
        """For each .py file under `dst` (a copy of `src` made with its files'
        mtimes, as shutil.copytree does) that has the size and mtime of its
        namesake under `src`, a hard link where the children look for its
        bytecode to the .pyc this process reads for the `src` file. Without
        it each child compiled its new site's modules again; Python itself
        judges a .pyc by the source's size and mtime (in seconds), so a file
        changed since the copy is compiled as before, and a link it finds
        stale is replaced (Python writes a new file), never written through.
        """
        tag = sys.implementation.cache_tag
        src, dst = os.path.abspath(src), os.path.abspath(dst)  # as imported: no realpath
        for root, _, files in os.walk(dst):
            rel = os.path.relpath(root, dst)
            for name in files:
                if not name.endswith(".py"):
                    continue
                mine, theirs = os.path.join(root, name), os.path.join(src, rel, name)
                try:
                    a, b = os.stat(mine), os.stat(theirs)
                    if a.st_size != b.st_size or int(a.st_mtime) != int(b.st_mtime):
                        continue
                    pyc = f"{name[:-3]}.{tag}.pyc"
                    cached = (os.path.join(root, "__pycache__", pyc) if self.pycache_prefix is None
                              else os.path.join(self.pycache_prefix, root.lstrip(os.sep), pyc))
                    os.makedirs(os.path.dirname(cached), exist_ok=True)
                    os.link(importlib.util.cache_from_source(theirs), cached)
                except OSError:
                    continue

    def kill(self):
        """The zygote and any child it forked."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def close(self):
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        if self.proc.stdout:
            self.proc.stdout.close()
