"""`sglpatch status --explain -- FLAGS`: the seq_lens host pull of a launch."""

import json
import subprocess
import sys

import pytest

from conftest import REPO
from sglpatch.explain import (
    BACKENDS_WITHOUT_PULL,
    BACKENDS_WITHOUT_PULL_AT_TOPK_1,
    explain_launch,
)

EAGLE = ["--speculative-algorithm", "EAGLE3"]


def sglpatch(*args):
    return subprocess.run([sys.executable, "-m", "sglpatch", *args], capture_output=True,
                          text=True, cwd=REPO, env={"PYTHONPATH": str(REPO / "python")})


@pytest.mark.parametrize("flags, pull, says", [
    (["--attention-backend", "triton", *EAGLE], "off", "triton reads device lengths"),
    # fa3 skips the pull at EAGLE topk 1 (patch 0011); the flags cannot say
    # the topk sglang picks, or whether the model is a plain MHA one
    (["--attention-backend", "fa3", "--speculative-eagle-topk", "1", *EAGLE], "off",
     "a bound the scheduler already knows, for an MHA model"),
    (["--attention-backend", "fa3", *EAGLE], "depends", "without --speculative-eagle-topk"),
    (["--attention-backend", "fa3", "--speculative-eagle-topk", "4", *EAGLE], "on",
     "fa3 with EAGLE topk 4 reads the host lengths"),
    (["--attention-backend", "fa3", "--speculative-eagle-topk", "1", "--attn-cp-size", "2",
      *EAGLE], "on", "context parallelism"),
    (["--attention-backend", "flashinfer", *EAGLE], "on", "--attention-backend triton"),
    (["--speculative-eagle-topk", "4", *EAGLE], "on", "sglang picks flashinfer"),
    (["--attention-backend", "flashinfer", "--decode-attention-backend", "triton", *EAGLE],
     "off", "triton"),
    (EAGLE, "depends", "sglang picks one at start"),
    (["--attention-backend", "triton", "--enable-two-batch-overlap", *EAGLE], "on",
     "--enable-two-batch-overlap"),
    # EAGLE turns mixed chunked prefill off itself: it forces nothing
    (["--attention-backend", "triton", "--enable-mixed-chunk", *EAGLE], "off", "triton"),
    (["--attention-backend", "triton", "--enable-mixed-chunk",
      "--speculative-algorithm", "NGRAM"], "on", "--enable-mixed-chunk"),
    (["--attention-backend", "triton", "--disable-overlap-schedule", *EAGLE], "not used",
     "overlap schedule is off"),
    (["--attention-backend", "fa3"], "not used", "no speculative decoding"),
])
def test_verdicts(flags, pull, says):
    verdict = explain_launch(flags)
    assert verdict["pull"] == pull
    assert says in verdict["reason"]


def test_cli_imports_neither_sglang_nor_torch():
    code = ("import sys; from sglpatch.cli import main; "
            "rc = main(['status', '--explain', '--json', '--', '--attention-backend', "
            "'triton', '--speculative-algorithm', 'EAGLE3']); "
            "assert rc == 0, rc; "
            "assert not {'torch', 'sglang'} & set(sys.modules), 'imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env={"PYTHONPATH": str(REPO / "python")})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"pull": "off", "reason": "triton reads device lengths"}


def test_launch_flags_without_explain_are_refused():
    result = sglpatch("status", "--", "--attention-backend", "triton")
    assert result.returncode == 2
    assert result.stderr.strip() == "sglpatch: error: launch flags go with --explain"


def test_the_rule_matches_the_patched_backends():
    # The tool's list of backends without the pull is the series' own: the
    # Triton pair sets needs_cpu_seq_lens = False, the base class True
    # (test_needs_cpu_seq_lens_backends.py checks every other backend class
    # of the patched sglang keeps True).
    pytest.importorskip("torch")
    try:
        from sglang.test.test_utils import maybe_stub_sgl_kernel
    except ImportError:
        pytest.skip("no sglang in this environment")
    maybe_stub_sgl_kernel()
    from sglang.srt.layers.attention.triton_backend import (
        TritonAttnBackend,
        TritonMultiStepDraftBackend,
    )

    if not hasattr(TritonAttnBackend, "needs_cpu_seq_lens"):
        pytest.skip("this sglang is not patched")
    assert BACKENDS_WITHOUT_PULL == ("triton",)
    assert TritonAttnBackend.needs_cpu_seq_lens is False
    assert TritonMultiStepDraftBackend.needs_cpu_seq_lens is False
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

    assert AttentionBackend.needs_cpu_seq_lens is True
    # fa3 decides per backend object (patch 0011): off only in the plain
    # case, which is what BACKENDS_WITHOUT_PULL_AT_TOPK_1 describes
    from sglang.srt.layers.attention import flashattention_backend as fa

    if not hasattr(fa, "fa3_needs_cpu_seq_lens"):
        pytest.skip("this sglang is patched only through an earlier patch")
    assert BACKENDS_WITHOUT_PULL_AT_TOPK_1 == ("fa3",)
    plain = dict(fa_impl_ver=3, topk=1, use_mla=False, has_local_attention=False,
                 has_swa=False, use_sliding_window_kv_pool=False, is_encoder_decoder=False,
                 attn_cp_size=1)
    assert fa.fa3_needs_cpu_seq_lens(type("B", (), plain)) is False
    for change in ({"topk": 4}, {"use_mla": True}, {"attn_cp_size": 2}, {"fa_impl_ver": 4}):
        assert fa.fa3_needs_cpu_seq_lens(type("B", (), {**plain, **change})) is True
