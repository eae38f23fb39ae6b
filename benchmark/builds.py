"""The builds and the model pair a run serves.

A variant is NAME or NAME=SITE: SITE is a directory put first on PYTHONPATH
(an sglang installed with `pip install --target SITE`); without it the
current environment's sglang is used.  `patched` applies the series first
with the project's own tool.
"""

import json
import os
import subprocess
import sys
import time

import results

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def detect_card():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
        if out.strip():
            return out.strip().splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "unknown"


def parse_variant(spec):
    name, _, site = spec.partition("=")
    if not results.is_variant(name):
        raise SystemExit(f"unknown variant {name!r}: one of {results.VARIANTS}, "
                         f"{results.BASE_AGAIN}, {results.PATCHED_AGAIN}, "
                         "patched-through-NNNN or candidate-NAME")
    if (name == results.PATCHED_AGAIN or results.THROUGH.match(name)
            or results.CANDIDATE.match(name)) and not site:
        raise SystemExit(f"{name} needs =SITE (a site with those patches applied)")
    return name, (os.path.abspath(site) if site else None)


# Where a server's compiled kernels go, under the run's work dir: flashinfer
# compiles its kernels at a server's first start (minutes, without its cubins,
# as in the device kit), Triton its own, and sglang its JIT kernels
# (sglang.jit_kernel, built by tvm-ffi at their first use, during the first
# CUDA-graph capture); by default all write under $HOME. The work dir is in
# /tmp on the GPU machine, which a warm machine keeps between calls, so a
# later call's servers find them there. Every build of a call shares them,
# but tvm-ffi's cache key and flashinfer's build file hold the resolved paths
# of the sources a kernel was built from (results/2026-11-27-h100x2-probes/
# README.md): lib.sh's share_site links every derived site's kernel sources
# to the base site's, so the builds compile each kernel once.
JIT_CACHE_VARS = {"FLASHINFER_WORKSPACE_BASE": "flashinfer", "TRITON_CACHE_DIR": "triton",
                  "TVM_FFI_CACHE_DIR": "tvm-ffi"}


def variant_env(site, work_dir=None):
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if work_dir:
        for var, sub in JIT_CACHE_VARS.items():
            env.setdefault(var, os.path.join(os.path.abspath(work_dir), "jit-cache", sub))
    if site:
        env["PYTHONPATH"] = os.pathsep.join(
            [site] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def apply_series(site, env, log):
    """Apply the series to SITE/sglang with the project's own tool."""
    if not site:
        raise SystemExit("patched needs =SITE (a pip --target install to patch)")
    e = dict(env)
    e["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"), e.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "sglpatch", "apply", "--sglang-dir",
           os.path.join(site, "sglang")]
    log(" ".join(cmd))
    res = subprocess.run(cmd, env=e, capture_output=True, text=True)
    log(res.stdout + res.stderr)
    if res.returncode != 0:
        raise RuntimeError(f"sglpatch apply failed ({res.returncode})")
    st = subprocess.run(cmd[:3] + ["status", "--sglang-dir", cmd[-1]], env=e,
                        capture_output=True, text=True)
    return st.stdout.strip()


def wants_eagle_draft(a):
    """Whether a run serves EAGLE (v1): its models need DIR/draft-eagle.
    `speculative` is a list (e2e.py run) or one name (kill_rank.py)."""
    spec = getattr(a, "speculative", None) or ()
    return "EAGLE" in ([spec] if isinstance(spec, str) else spec)


def ensure_models(a, log):
    """Build the model pair in a.models_dir (default: the work dir's
    models-PRESET), or reuse the one there if it was built with the same
    settings; with EAGLE among a.speculative, also the EAGLE draft
    (make_models.py --eagle-draft: the pair's files stay the same bytes).
    Returns (the models dir, its metadata)."""
    d = a.models_dir or os.path.join(a.work_dir, f"models-{a.preset}")
    want = {"preset": a.preset, "accept_steps": a.accept_steps,
            "draft_accuracy": a.draft_accuracy, "spec_steps": a.spec_steps}
    # the EAGLE draft's metadata is the pair's and its own; a later build
    # without it leaves it stale: the pair's must match as well
    drafts = ["draft"] + (["draft-eagle"] if wants_eagle_draft(a) else [])
    metas = [os.path.join(d, name, "synthetic.json") for name in drafts]
    if all(os.path.exists(p) for p in metas):
        metas = [json.load(open(p)) for p in metas]
        if all(m.get(k) == v for m in metas for k, v in want.items()):
            log(f"models: reusing {d}")
            return d, metas[-1]
    # In a child process: weights generated on the GPU stay in this
    # process's CUDA cache otherwise (22 GB for llama-8b-shape), on GPU 0
    # only, and a tensor-parallel server then refuses to start ("The
    # memory capacity is unbalanced").
    argv = [sys.executable, os.path.join(HERE, "models", "make_models.py"),
            "--preset", a.preset, "--out", d, "--draft-accuracy", str(a.draft_accuracy),
            "--device", a.model_device, "--spec-steps", str(a.spec_steps)]
    if a.accept_steps is not None:
        argv += ["--accept-steps", str(a.accept_steps)]
    if len(drafts) > 1:
        argv.append("--eagle-draft")
    t0 = time.time()
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"models: building {d} failed: {done.stderr.strip()[-2000:]}")
    meta = json.loads(done.stdout.strip().splitlines()[-1])
    log(f"models: built {d} in {time.time() - t0:.1f}s: {json.dumps(meta)}")
    return d, meta


def load_fmap(models_dir):
    path = os.path.join(models_dir, "token_map.pt")
    if not os.path.exists(path):  # no map: no torch import (a second of start-up) either
        return None
    try:
        import torch

        return torch.load(path)["f"].tolist()
    except Exception:
        return None
