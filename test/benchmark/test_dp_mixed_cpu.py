"""e2e run with data parallelism and --mixed-load, against the stand-in
sglang (standin_sglang.py): the DP flags reach the server, every record
carries the deployment, and the mixed load serves its prompts while the
long generations decode, outputs on the chain. Plus mixed.py's pieces
(stream reading, the overlap test) and the DP option checks."""

import json
import os
import subprocess
import sys

import pytest

from standin_sglang import E2E, model_configs, run_e2e

sys.path.insert(0, os.path.dirname(E2E))
import mixed  # noqa: E402
import results  # noqa: E402
import run  # noqa: E402
from options import RunOptions  # noqa: E402
from server import server_command  # noqa: E402


def qwen3_models(tmp_path):
    """The reused model dir of --preset qwen3-tiny: the stand-in's chain."""
    import torch

    models = tmp_path / "work" / "models-qwen3-tiny"
    (models / "draft").mkdir(parents=True)
    (models / "draft" / "synthetic.json").write_text(json.dumps(
        {"preset": "qwen3-tiny", "accept_steps": 3, "draft_accuracy": 0.8, "spec_steps": 3,
         "vocab": 5000, "arch": "qwen3"}))
    torch.save({"f": torch.arange(1, 10001)}, str(models / "token_map.pt"))


def test_dp_attention_run_with_the_mixed_load(tmp_path):
    pytest.importorskip("torch")
    qwen3_models(tmp_path)
    events, data = run_e2e(
        tmp_path, "--preset", "qwen3-tiny", "--tp", "2", "--dp", "2",
        "--enable-dp-attention", "--piecewise", "disabled", "--no-bench",
        "--mixed-load", "--mix-decodes", "2", "--mix-decode-tokens", "300",
        "--mix-prompts", "6", "--mix-prompt-len", "40", "--mix-new-tokens", "4",
        "--mix-deadline-s", "60",
        env={"FAKE_TOKEN_S": "0.01"}, token_map=True, variants=("base",))
    (up,) = [e for e in events if e["event"] == "up"]
    argv = up["argv"]
    assert argv[argv.index("--dp-size") + 1] == "2" and "--enable-dp-attention" in argv
    assert argv[argv.index("--tp") + 1] == "2"
    assert "--disable-piecewise-cuda-graph" in argv
    (mix,) = data["mixed_load"]
    assert (mix["dp"], mix["dp_attention"], mix["tp"]) == (2, True, 2)
    assert mix["overlapped"] == 6 and mix["prompts"] >= 6
    assert set(mix["prompts_per_rank"]) == {"0", "1"}
    assert mix["long_generations"] == 4 * mix["rounds"]
    assert mix["prompts_off_chain"] == 0 and mix["long_off_chain"] == 0
    assert mix["long_errors"] == mix["prompt_errors"] == 0 and mix["errors"] == []
    assert mix["alive"] is True
    (g,) = data["greedy_runs"]
    assert (g["dp"], g["dp_attention"]) == (2, True) and g["prompts_off_constructed_f"] == 0
    assert "errors" not in data


def test_dp_fields_key_the_records_apart():
    a = RunOptions(tp=2, dp=2, enable_dp_attention=True)
    assert run.deployment_fields(a) == {"tp": 2, "dp": 2, "dp_attention": True}
    replicas = RunOptions(tp=2, dp=2, enable_dp_attention=False)
    assert run.deployment_fields(replicas) == {"tp": 2, "dp": 2}
    plain = RunOptions(tp=2)
    assert run.deployment_fields(plain) == {"tp": 2}  # dp 1: no dp fields
    point = {"variant": "base", "attention_backend": "default", "speculative": "EAGLE3",
             "overlap": True, "piecewise_cuda_graph": False, "concurrency": 8}
    keys = {results._key(dict(point, **run.deployment_fields(x)), results.RUN_KEY)
            for x in (a, replicas, plain)}
    assert len(keys) == 3
    # an older record (no dp fields) keys as the plain TP=2 one
    assert results._key(dict(point, tp=2), results.RUN_KEY) == \
        results._key(dict(point, **run.deployment_fields(plain)), results.RUN_KEY)


def test_the_dp_flags_of_the_launch():
    cmd = server_command("python3", "T", "D", 30000, "default", "EAGLE3", True, False, tp=2,
                         dp=2, dp_attention=True)
    assert cmd[cmd.index("--dp-size") + 1] == "2" and "--enable-dp-attention" in cmd
    plain = server_command("python3", "T", "D", 30000, "default", "EAGLE3", True, False, tp=2)
    assert "--dp-size" not in plain and "--enable-dp-attention" not in plain


@pytest.mark.parametrize("args,said", [
    (["--preset", "qwen3-small", "--tp", "2", "--dp", "2", "--enable-dp-attention"],
     "--piecewise disabled"),
    (["--preset", "small", "--tp", "2", "--dp", "2", "--enable-dp-attention",
      "--piecewise", "disabled"], "use --preset qwen3-small"),
    (["--preset", "qwen3-small", "--tp", "3", "--dp", "2", "--enable-dp-attention",
      "--piecewise", "disabled"], "must be a multiple of --dp"),
    (["--preset", "qwen3-small", "--tp", "2", "--enable-dp-attention",
      "--piecewise", "disabled"], "needs --dp 2 or more"),
])
def test_dp_options_that_sglang_would_not_serve_as_recorded(tmp_path, args, said):
    res = subprocess.run([sys.executable, E2E, "run", "--work-dir", str(tmp_path), *args],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and said in res.stderr, res.stderr
    assert not (tmp_path / "models-qwen3-small").exists()  # refused before any build


def test_stream_ids_whole_so_far_or_new_only():
    assert mixed.stream_ids([[5], [5, 6], [5, 6, 7, 8]]) == [5, 6, 7, 8]
    assert mixed.stream_ids([[5], [6], [7, 8]]) == [5, 6, 7, 8]
    assert mixed.stream_ids([[5, 6]]) == [5, 6]
    assert mixed.stream_ids([]) == []


class Gen:
    def __init__(self, rank, first, arrivals):
        self.rank, self.t_first, self.arrivals = rank, first, arrivals


def test_a_prompt_overlaps_when_the_other_rank_decoded_before_and_after():
    longs = [Gen(0, 1.0, [1.0, 5.0, 9.0]), Gen(1, 1.0, [1.0, 3.0])]
    # rank 1 prefills while rank 0 decodes from before 2.0 until after 6.0
    assert mixed.overlapped(longs, 1, 2.0, 6.0)
    # rank 0's prompt: rank 1's generations brought nothing after 6.0
    assert not mixed.overlapped(longs, 0, 2.0, 6.0)
    # sent before the other rank's first token
    assert not mixed.overlapped([Gen(0, 3.0, [3.0, 9.0])], 1, 2.0, 6.0)
    # one scheduler: its own generations count
    assert mixed.overlapped([Gen(None, 1.0, [1.0, 9.0])], None, 2.0, 6.0)


def test_sglang_accepts_the_dp_attention_launch(tmp_path, monkeypatch):
    """sglang 0.5.12.post1's own argument checks (ServerArgs) take the
    launch of `e2e.py run --preset qwen3-small --tp 2 --dp 2
    --enable-dp-attention`, EAGLE3 topk 1, as one of Hopper's: DP attention
    on, the chunked prefill split per DP rank, piecewise CUDA graphs off, the
    overlap (spec v2) schedule kept, fa3 as the default backend."""
    S = pytest.importorskip("sglang.srt.server_args")
    model_configs(tmp_path, "qwen3-small", ("target", "draft"))
    # a Hopper card of 80 GB, as far as ServerArgs asks
    monkeypatch.setattr(S, "get_device_memory_capacity", lambda *a, **k: 81559, raising=False)
    monkeypatch.setattr(S, "is_hopper_with_cuda_12_3", lambda *a, **k: True, raising=False)
    monkeypatch.setattr(S, "is_sm100_supported", lambda *a, **k: False, raising=False)
    cmd = server_command("python3", str(tmp_path / "target"), str(tmp_path / "draft"), 31000,
                         "default", "EAGLE3", True, False, tp=2, dp=2, dp_attention=True)
    sa = S.prepare_server_args(cmd[3:] + ["--device", "cuda"])
    assert (sa.tp_size, sa.dp_size, sa.enable_dp_attention) == (2, 2, True)
    assert sa.disable_piecewise_cuda_graph and not sa.disable_overlap_schedule
    assert sa.attention_backend == "fa3" and sa.speculative_eagle_topk == 1
    assert sa.load_balance_method == "round_robin"  # routed_dp_rank pins past it
