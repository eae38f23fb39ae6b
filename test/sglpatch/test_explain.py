"""`sglpatch status --explain -- FLAGS`: the seq_lens host pull of a launch.

The verdict is sglpatch.seq_lens_pull's, a byte-identical copy of the
decision the patched scheduler's start-up line takes; the flags are read
with the shape of sglang 0.5.12.post1's parser and settled as its
ServerArgs settles them. Where sglang is importable, both are checked
against it.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from sglpatch import seq_lens_pull
from sglpatch.errors import SglpatchError
from sglpatch.explain import EAGLE_DRAFT_BACKENDS, explain_launch, launch_facts
from sglpatch.launch_flags import DEFAULTS, launch_parser, table_from_parser
from sglpatch.series import load_series, sha256_file
from sglpatch.sglang_options import OPTIONS

# sglang picks the EAGLE parameters from the model (AUTO): a Llama target gets
# topk 4 and spec v1, so the rules of a backend are shown at topk 1 (EAGLE)
AUTO = ["--speculative-algorithm", "EAGLE3"]
TOPK1 = [*AUTO, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4"]
TOPK4 = [*AUTO, "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
         "--speculative-num-draft-tokens", "8"]
EAGLE = TOPK1
SHARED = "srt/managers/seq_lens_pull.py"  # in the sglang package, from the series


def sglpatch(*args):
    return subprocess.run([sys.executable, "-m", "sglpatch", *args], capture_output=True,
                          text=True, cwd=REPO, env={"PYTHONPATH": str(REPO / "python")})


def pull(*flags, env=None):
    return explain_launch(list(flags), env or {})["pull"]


@pytest.mark.parametrize("flags, verdict, names", [
    # the three launches the old rules got wrong
    (["--prefill-attention-backend", "fa3", "--decode-attention-backend", "triton", *EAGLE],
     "on", "HybridAttnBackend"),
    (["--attention-backend", "triton", *TOPK4], "not used", "EAGLE topk 4"),
    (["--attention-backend", "triton", "--enable-dp-attention", "--dp-size", "2", *EAGLE],
     "on", "--enable-dp-attention"),
    # DP attention needs more than one DP rank (server_args turns it off)
    (["--attention-backend", "triton", "--enable-dp-attention", *EAGLE], "off", None),
    (["--attention-backend", "triton", *EAGLE], "off", None),
    (["--attention-backend", "triton", *TOPK1], "off", None),
    # sglang picks the topk from the model when it is not given: 4 for Llama
    (["--attention-backend", "fa3", *AUTO], "depends", "--speculative-eagle-topk"),
    (["--attention-backend", "triton", *AUTO], "depends", "spec v1"),
    # the model's attention is not in the flags
    (["--attention-backend", "fa3", *TOPK1], "depends", None),
    (["--attention-backend", "fa3", "--attn-cp-size", "2", *TOPK1], "on", "--attn-cp-size 2"),
    (["--attention-backend", "fa4", *TOPK1], "on", "fa4"),
    (["--attention-backend", "flashinfer", *EAGLE], "on", "--attention-backend triton"),
    (AUTO, "depends", None),
    (EAGLE, "depends", None),
    # one of prefill / decode given: the other is sglang's pick
    (["--prefill-attention-backend", "triton", *EAGLE], "depends", "HybridAttnBackend"),
    (["--prefill-attention-backend", "flashinfer", *EAGLE], "on", "flashinfer"),
    (["--attention-backend", "triton", "--prefill-attention-backend", "fa3", *EAGLE], "on",
     "HybridAttnBackend"),
    (["--prefill-attention-backend", "triton", "--decode-attention-backend", "triton",
      *EAGLE], "off", None),
    # the draft's own backend
    (["--attention-backend", "triton", "--speculative-draft-attention-backend", "flashinfer",
      *EAGLE], "on", "draft decode, draft extend"),
    (["--attention-backend", "flashinfer", "--speculative-draft-attention-backend", "triton",
      *EAGLE], "on", "target verify"),
    (["--attention-backend", "triton", "--speculative-draft-attention-backend", "triton",
      *EAGLE], "off", None),
    # settings the decision reads
    (["--attention-backend", "triton", "--enable-two-batch-overlap", *EAGLE], "on",
     "--enable-two-batch-overlap"),
    # EAGLE turns mixed chunked prefill off itself: it forces nothing
    (["--attention-backend", "triton", "--enable-mixed-chunk", *EAGLE], "off", None),
    (["--attention-backend", "triton", "--disable-overlap-schedule", *EAGLE], "not used",
     "overlap schedule is off"),
    (["--attention-backend", "triton", "--pp-size", "2", *EAGLE], "not used",
     "pipeline parallelism"),
    (["--attention-backend", "triton", "--device", "mps", *EAGLE], "not used", "mps"),
    (["--attention-backend", "triton", "--speculative-algorithm", "NGRAM",
      "--enable-mixed-chunk"], "not used", "NGRAM"),
    (["--attention-backend", "fa3"], "not used", "no speculative decoding"),
    # sglang's own adjustments of the backends
    (["--attention-backend", "fa3", "--kv-cache-dtype", "fp8_e5m2", *TOPK1], "off", None),
    (["--attention-backend", "fa3", "--enable-hierarchical-cache", *TOPK1], "on",
     "HybridAttnBackend"),
    (["--attention-backend", "fa3", "--enable-hierarchical-cache", "--hicache-io-backend",
      "direct", *TOPK1], "depends", None),
    (["--attention-backend", "triton", "--device", "hpu"], "not used", None),
    # sglang reads flags as argparse does: abbreviations, any case of the algorithm
    (["--attention-back", "triton", *TOPK1[2:], "--speculative-algorithm", "eagle3"], "off",
     None),
    (["--attention-backend=triton", *TOPK1[2:], "--speculative-algorithm", "NEXTN"], "off",
     None),
])
def test_verdicts(flags, verdict, names):
    result = explain_launch(flags, {})
    assert result["pull"] == verdict
    if names is not None:
        assert names in result["reason"]


def test_spec_v2_switched_off_in_the_environment():
    flags = ["--attention-backend", "triton", *EAGLE]
    assert pull(*flags, env={"SGLANG_ENABLE_SPEC_V2": "false"}) == "not used"
    assert pull(*flags, env={"SGLANG_ENABLE_SPEC_V2": "1"}) == "off"
    with pytest.raises(SglpatchError):
        pull(*flags, env={"SGLANG_ENABLE_SPEC_V2": "maybe"})


@pytest.mark.parametrize("flags", [
    ["--attention-backend", "TRITON", *EAGLE],                 # not a choice
    ["--speculative-eagle-topk", "abc", *EAGLE],                # not an int
    ["--enable-dp", *EAGLE],                                    # ambiguous abbreviation
    ["--no-such-flag"],                                         # unknown
    ["--attention-backend"],                                    # value missing
    ["--attention-backend", "triton", "--speculative-eagle-topk", "1", *AUTO],  # no steps
    ["--attention-backend", "triton", "--speculative-num-steps", "3", *AUTO],   # no topk
    ["--attention-backend", "triton", *TOPK1[:-4], "--speculative-eagle-topk", "0"],
    ["--attention-backend", "triton", *TOPK1[:-4], "--speculative-eagle-topk", "-3"],
    ["--attention-backend", "trtllm_mha", *TOPK4],
    ["--attention-backend", "triton", "--page-size", "16", *TOPK4],
    ["--attention-backend", "triton", "--speculative-algorithm", "MEDUSA"],
    ["--attention-backend", "triton", "--speculative-algorithm", "STANDALONE",
     "--enable-dp-attention", "--dp-size", "2"],
    ["--attention-backend", "torch_native", *EAGLE],           # no EAGLE draft on it
    ["--attention-backend", "triton", "--device", "hpu", *EAGLE],  # hpu: torch_native
    ["--attention-backend", "triton", "--speculative-draft-attention-backend", "nope", *EAGLE],
    ["--config", "launch.yaml"],
    ["--help"],
])
def test_refused(flags):
    with pytest.raises(SglpatchError):
        explain_launch(flags, {})


def test_a_refusal_is_one_line_and_exit_2():
    for flags in (["--speculative-eagle-topk", "abc"], ["--attention-backend", "TRITON"],
                  ["--enable-dp", *EAGLE]):
        result = sglpatch("status", "--explain", "--", *flags)
        assert result.returncode == 2
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("sglpatch: error: ")


def test_every_backend_sglang_accepts():
    (choices,) = [row[4] for row in OPTIONS if "--attention-backend" in row[0]]
    for name in choices:
        flags = ["--attention-backend", name, *TOPK1]
        if name not in EAGLE_DRAFT_BACKENDS:
            with pytest.raises(SglpatchError):
                explain_launch(flags, {})
            continue
        expected = {"triton": "off", "fa3": "depends"}.get(name, "on")
        assert pull(*flags) == expected, name


def test_settled_facts():
    facts, overlap_off = launch_facts(
        ["--speculative-algorithm", "nextn", "--prefill-attention-backend", "triton",
         "--decode-attention-backend", "triton", "--enable-mixed-chunk",
         "--enable-dp-attention", "--dp-size", "2", "--attn-cp-size", "2"], {})
    assert facts["overlap"] is None and "--speculative-num-steps" in overlap_off
    assert {k: facts[k] for k in ("spec_algorithm", "attention_backend", "mixed_chunk",
                                  "dp_attention", "attn_cp_size", "topk", "mla")} == {
        "spec_algorithm": "EAGLE", "attention_backend": "triton", "mixed_chunk": False,
        "dp_attention": True, "attn_cp_size": 2, "topk": None, "mla": None}
    facts, overlap_off = launch_facts(["--attention-backend", "triton", *TOPK4], {})
    assert facts["overlap"] is False and "topk 4" in overlap_off
    assert launch_facts(["--speculative-algorithm", "STANDALONE"], {})[0]["topk"] == 1


def test_the_decision_is_the_servers_copy():
    # The series ships sglang.srt.managers.seq_lens_pull; sglpatch's copy is
    # byte for byte the file every patch of the series leaves in the package.
    ours = Path(seq_lens_pull.__file__)
    assert load_series().final_hashes().get(SHARED) == sha256_file(ours)
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        return
    installed = Path(spec.origin).parent / SHARED
    if installed.is_file():  # a package with the series applied
        assert installed.read_bytes() == ours.read_bytes()


def test_cli_imports_neither_sglang_nor_torch():
    code = ("import sys; from sglpatch.cli import main; "
            "rc = main(['status', '--explain', '--json', '--', '--attention-backend', "
            "'triton', '--speculative-algorithm', 'EAGLE3', '--speculative-num-steps', '3', "
            "'--speculative-eagle-topk', '1', '--speculative-num-draft-tokens', '4']); "
            "assert rc == 0, rc; "
            "assert not {'torch', 'sglang'} & set(sys.modules), 'imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env={"PYTHONPATH": str(REPO / "python")})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["pull"] == "off"


def test_launch_flags_without_explain_are_refused():
    result = sglpatch("status", "--", "--attention-backend", "triton")
    assert result.returncode == 2
    assert result.stderr.strip() == "sglpatch: error: launch flags go with --explain"


def _sglang_parser():
    pytest.importorskip("torch")
    try:
        from sglang.test.test_utils import maybe_stub_sgl_kernel
    except ImportError:
        pytest.skip("no sglang in this environment")
    maybe_stub_sgl_kernel()
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def test_the_table_is_sglangs_parser():
    parser = _sglang_parser()
    assert table_from_parser(parser) == OPTIONS
    defaults = {action.dest: action.default for action in parser._actions}
    assert {dest: defaults[dest] for dest in DEFAULTS} == DEFAULTS
    # and the parser built from it has the same shape
    assert table_from_parser(launch_parser()) == tuple(
        (strings, dest, nargs, kind, choices, const)
        for strings, dest, nargs, kind, choices, const in OPTIONS
    )


# Launches whose settling server_args does without a GPU or a model's own
# requirements (an explicit backend, a Llama config): sglang's verdict on
# them, refused or settled, must be the one launch_facts reaches.
SETTLED = [
    ["--attention-backend", "triton", *EAGLE],
    ["--attention-backend", "fa3", "--speculative-algorithm", "eagle3"],
    ["--attention-backend", "triton", *TOPK1],
    ["--attention-backend", "triton", *TOPK4],
    ["--attention-backend", "flashinfer", "--speculative-algorithm", "NEXTN",
     "--enable-mixed-chunk"],
    ["--attention-backend", "triton", "--enable-dp-attention", *EAGLE],
    ["--attention-backend", "triton", "--enable-dp-attention", "--dp-size", "2",
     "--tp-size", "2", *EAGLE],
    ["--prefill-attention-backend", "triton", "--decode-attention-backend", "triton", *EAGLE],
    ["--attention-backend", "fa3", "--kv-cache-dtype", "fp8_e5m2", *EAGLE],
    ["--attention-backend", "triton", "--disable-overlap-schedule", *EAGLE],
    ["--attention-backend", "triton", "--speculative-eagle-topk", "1", *AUTO],
    ["--attention-backend", "triton", "--speculative-num-steps", "3", *AUTO],
    ["--attention-backend", "triton", *AUTO],
    ["--attention-backend", "triton", "--enable-mixed-chunk"],
]


@pytest.mark.parametrize("flags", SETTLED, ids=" ".join)
def test_settling_matches_sglang(flags, tmp_path):
    _sglang_parser()
    from sglang.srt.server_args import prepare_server_args

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16"}))
    argv = ["--model-path", str(tmp_path), "--device", "cpu", *flags]
    try:
        args = prepare_server_args(argv)
    except (AssertionError, TypeError, ValueError):
        with pytest.raises(SglpatchError):
            launch_facts(flags, {})
        return
    facts, _ = launch_facts(flags, {})
    if facts["overlap"] is None:  # sglang picked the topk from the model
        assert "--speculative-num-steps" not in flags
    else:
        assert facts["overlap"] == (not args.disable_overlap_schedule)
    assert facts["spec_algorithm"] == args.speculative_algorithm
    assert facts["mixed_chunk"] == args.enable_mixed_chunk
    assert facts["dp_attention"] == args.enable_dp_attention
    assert facts["attention_backend"] == args.attention_backend
    if args.speculative_algorithm is not None and facts["topk"] is not None:
        assert facts["topk"] == args.speculative_eagle_topk
