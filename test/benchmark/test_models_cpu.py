"""CPU check of the synthetic model construction (benchmark/models).

Builds the tiny pair and replays it with the plain-torch reference
(benchmark/models/simulate.py): greedy output follows the constructed token
function, and the draft's accept length follows --accept-steps.  Skips where
torch / transformers / safetensors / tokenizers are missing.
"""

import importlib.util
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(REPO, "benchmark", "models")
NEEDS = ("torch", "transformers", "safetensors", "tokenizers")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(MODELS, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("accept_steps,lo,hi", [(0, 1.0, 1.0), (1, 1.9, 2.0), (3, 3.6, 4.0)])
def test_tiny_pair_greedy_and_accept_length(tmp_path, accept_steps, lo, hi):
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"model construction check needs {', '.join(missing)}")
    make_models, simulate = _load("make_models"), _load("simulate")
    meta = make_models.build("tiny", str(tmp_path), accept_steps=accept_steps)
    assert meta["expected_accept_length"] == accept_steps + 1
    r = simulate.simulate(str(tmp_path), prompts=2, new=20)
    assert r["greedy_matches_f"] == 2, r
    assert r["min_logit_margin"] > 5, r
    assert lo <= r["accept_length"] <= hi, r
