"""CPU check of the synthetic model construction (benchmark/models).

Builds the tiny pair and replays it with the plain-torch reference
(benchmark/models/simulate.py): greedy output follows the constructed token
function, and the draft's accept length follows --accept-steps.  Skips where
torch / transformers / safetensors / tokenizers are missing.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(REPO, "benchmark", "models")
NEEDS = ("torch", "transformers", "safetensors", "tokenizers")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(MODELS, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def needs_model_libs():
    """Skips the calling test where the model construction's libraries are missing."""
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"model construction check needs {', '.join(missing)}")


def ensure_models_in_child(tmp_path, body):
    """Runs BODY in a fresh interpreter that has benchmark/builds imported and
    ns(**fields): builds.ensure_models' arguments for the tiny preset in
    tmp_path (accept steps 1, draft accuracy 1.0, 3 steps, on the CPU) with
    FIELDS added. Returns the JSON that BODY printed last."""
    code = (
        "import argparse, json, sys\n"
        f"sys.path.insert(0, {os.path.join(REPO, 'benchmark')!r})\n"
        "import builds\n"
        "def ns(**fields):\n"
        "    return argparse.Namespace(preset='tiny', models_dir=sys.argv[1],\n"
        "        work_dir=sys.argv[1], accept_steps=1, draft_accuracy=1.0, spec_steps=3,\n"
        "        model_device='cpu', **fields)\n" + body)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("accept_steps,lo,hi", [(0, 1.0, 1.0), (1, 1.9, 2.0), (3, 3.6, 4.0)])
def test_tiny_pair_greedy_and_accept_length(tmp_path, accept_steps, lo, hi):
    needs_model_libs()
    make_models, simulate = _load("make_models"), _load("simulate")
    meta = make_models.build("tiny", str(tmp_path), accept_steps=accept_steps)
    assert meta["expected_accept_length"] == accept_steps + 1
    r = simulate.simulate(str(tmp_path), prompts=2, new=20)
    assert r["greedy_matches_f"] == 2, r
    assert r["min_logit_margin"] > 5, r
    assert lo <= r["accept_length"] <= hi, r


def test_the_harness_builds_the_models_in_a_child_process(tmp_path):
    """benchmark/builds.ensure_models: the weights are generated in another
    process, so the harness holds no GPU memory while tensor-parallel
    servers start (sglang refuses to start when one GPU has less free
    memory than the others); a second call reuses the build."""
    needs_model_libs()
    r = ensure_models_in_child(tmp_path, (
        "a = ns()\n"
        "lines = []\n"
        "d, meta = builds.ensure_models(a, lines.append)\n"
        "again = builds.ensure_models(a, lines.append)\n"
        "print(json.dumps({'meta': meta, 'again': again[1], 'lines': lines,\n"
        "                  'torch_loaded': 'torch' in sys.modules}))\n"))
    assert r["meta"]["preset"] == "tiny" and r["meta"]["accept_steps"] == 1
    assert r["meta"]["expected_accept_length"] == 2
    assert os.path.exists(tmp_path / "target" / "config.json")
    assert r["lines"][0].startswith("models: built") and r["lines"][1].startswith("models: reusing")
    assert r["again"]["accept_steps"] == 1
    assert not r["torch_loaded"]  # the harness never loaded torch, so no CUDA memory either
