"""e2e run --spec-auto: EAGLE3 servers launched with sglang's own speculative
parameters, recorded under their own key."""

import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))

import results  # noqa: E402
import run  # noqa: E402
from options import RunOptions  # noqa: E402
from server import server_command  # noqa: E402

SPEC_FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk",
              "--speculative-num-draft-tokens")


def _command(spec_steps):
    return server_command("python3", "T", "D", 30000, "triton", "EAGLE3", True, True,
                          spec_steps=spec_steps)


def test_auto_launch_passes_only_the_draft_model():
    auto = _command(None)
    assert auto[auto.index("--speculative-draft-model-path") + 1] == "D"
    assert not set(SPEC_FLAGS) & set(auto)
    fixed = _command(3)
    assert [fixed[fixed.index(f) + 1] for f in SPEC_FLAGS] == ["3", "1", "4"]


def test_auto_runs_are_kept_apart_from_fixed_ones():
    a = RunOptions(tp=1, spec_auto=True)
    fields = run.deployment_fields(a)
    assert fields == {"tp": 1, "spec_params": "auto"}
    point = {"variant": "base", "attention_backend": "triton", "speculative": "EAGLE3",
             "overlap": True, "piecewise_cuda_graph": True, "concurrency": 1}
    auto = dict(point, **fields)
    fixed = dict(point, tp=1)  # an older record: no spec_params field
    assert results._key(auto, results.RUN_KEY) != results._key(fixed, results.RUN_KEY)
    assert "spec_params" not in run.deployment_fields(dataclasses.replace(a, spec_auto=False))


def test_tables_name_auto_parameters_and_dp_attention():
    import report
    r = {"variant": "patched", "speculative": "EAGLE3", "attention_backend": "triton",
         "piecewise_cuda_graph": True, "tp": 2}
    assert report.setting(r) == "patched EAGLE3 triton pcg tp2"
    words = report.setting(dict(r, dp=2, dp_attention=True, spec_params="auto")).split()
    assert words[-2:] == ["dp2-attn", "spec-auto"]


def test_a_tree_is_launched_and_keyed_by_its_parameters():
    a = RunOptions(tp=1, spec_steps=5, spec_topk=4, spec_draft_tokens=8)
    assert run.deployment_fields(a) == {"tp": 1, "spec_params": "5/4/8"}
    steps, topk, draft = run.spec_params(a)
    tree = server_command("python3", "T", "D", 30000, "triton", "EAGLE3", True, True,
                          spec_steps=steps, topk=topk, draft_tokens=draft)
    assert [tree[tree.index(f) + 1] for f in SPEC_FLAGS] == ["5", "4", "8"]
    chain = RunOptions(tp=1, spec_steps=5, spec_topk=1, spec_draft_tokens=None)
    assert "spec_params" not in run.deployment_fields(chain)
