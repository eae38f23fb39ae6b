"""The one decision on the per-step seq_lens host pull (seq_lens_pull).

decide_seq_lens_pull takes plain facts of a launch; the scheduler's start-up
line and `sglpatch status --explain` both call it. Covered: every fact it
reads, each unknown (None) fact, and every attention backend name sglang
accepts in every role (target verify, draft decode, draft extend), including
the HybridAttnBackend that differing prefill and decode backends build;
fa3's case, checked against fa3_needs_cpu_seq_lens on backend objects for
every combination of the facts it reads. The module imports neither torch
nor sglang.
"""

import ast
import inspect
import itertools
import unittest

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=2, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention.flashattention_backend import (  # noqa: E402
    FlashAttentionBackend,
    fa3_needs_cpu_seq_lens,
)
from sglang.srt.managers import seq_lens_pull  # noqa: E402
from sglang.srt.managers.seq_lens_pull import (  # noqa: E402
    DEPENDS,
    NOT_USED,
    OFF,
    ON,
    decide_seq_lens_pull,
)
from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES  # noqa: E402


def facts(**changes):
    """A plain EAGLE3 launch on triton, with the overlap schedule."""
    launch = dict(
        overlap=True,
        spec_algorithm="EAGLE3",
        topk=1,
        two_batch_overlap=False,
        mixed_chunk=False,
        dp_attention=False,
        attention_backend="triton",
        prefill_backend=None,
        decode_backend=None,
        draft_backend=None,
        speculative_attention_mode="prefill",
        # an MHA model without sliding-window, local or cross attention
        mla=False,
        sliding_window=False,
        local_attention=False,
        cross_attention=False,
        attn_cp_size=1,
        musa=False,
    )
    launch.update(changes)
    return launch


def verdict(**changes):
    return decide_seq_lens_pull(**facts(**changes))[0]


def reason(**changes):
    return decide_seq_lens_pull(**facts(**changes))[1]


class TestNotUsed(CustomTestCase):
    def test_without_overlap_or_speculation_nothing_is_relayed(self):
        self.assertEqual(verdict(overlap=False), NOT_USED)
        self.assertEqual(verdict(spec_algorithm=None), NOT_USED)
        self.assertEqual(verdict(overlap=False, attention_backend="flashinfer"), NOT_USED)
        self.assertEqual(verdict(overlap=None), DEPENDS)


class TestAlgorithms(CustomTestCase):
    def test_spec_v2_algorithms(self):
        for name in ("EAGLE", "EAGLE3", "STANDALONE", "NEXTN", "eagle3"):
            with self.subTest(name):
                self.assertEqual(verdict(spec_algorithm=name), OFF)

    def test_a_worker_that_lists_no_backends_keeps_it(self):
        self.assertEqual(verdict(spec_algorithm="MY_PLUGIN"), ON)


class TestSettings(CustomTestCase):
    def test_each_forces_the_pull_and_names_its_flag(self):
        for fact, flag in (
            ("two_batch_overlap", "--enable-two-batch-overlap"),
            ("mixed_chunk", "--enable-mixed-chunk"),
            ("dp_attention", "--enable-dp-attention"),
        ):
            with self.subTest(fact):
                self.assertEqual(verdict(**{fact: True}), ON)
                self.assertIn(flag, reason(**{fact: True}))
                self.assertEqual(verdict(**{fact: None}), DEPENDS)
                # a known reason to pull wins over an unknown fact
                self.assertEqual(verdict(**{fact: None, "attention_backend": "flashinfer"}), ON)


class TestBackends(CustomTestCase):
    def test_every_backend_sglang_accepts(self):
        skipping = seq_lens_pull.DEVICE_LENGTH_BACKENDS + (seq_lens_pull.FA3,)
        for name in ATTENTION_BACKEND_CHOICES:
            with self.subTest(name):
                expected = OFF if name in skipping else ON
                self.assertEqual(verdict(attention_backend=name), expected)

    def test_the_backend_sglang_picks_is_not_known(self):
        self.assertEqual(verdict(attention_backend=None), DEPENDS)

    def test_differing_prefill_and_decode_build_a_hybrid_backend(self):
        for prefill, decode in (("fa3", "triton"), ("triton", "flashinfer"), ("flashinfer", "triton")):
            with self.subTest(prefill=prefill, decode=decode):
                launch = dict(prefill_backend=prefill, decode_backend=decode)
                self.assertEqual(verdict(attention_backend=None, **launch), ON)
                self.assertIn("HybridAttnBackend", reason(attention_backend=None, **launch))
        # one of them given beside --attention-backend
        self.assertEqual(verdict(prefill_backend="fa3"), ON)
        self.assertEqual(verdict(decode_backend="fa3"), ON)
        # the same backend twice is that backend
        self.assertEqual(verdict(attention_backend=None, prefill_backend="triton",
                                 decode_backend="triton"), OFF)

    def test_one_role_given_the_other_picked_by_sglang(self):
        self.assertEqual(verdict(attention_backend=None, prefill_backend="triton"), DEPENDS)
        self.assertEqual(verdict(attention_backend=None, decode_backend="triton"), DEPENDS)
        # a backend that reads host lengths in a role it surely serves
        self.assertEqual(verdict(attention_backend=None, prefill_backend="flashinfer"), ON)
        self.assertEqual(verdict(attention_backend=None, decode_backend="flashinfer"), ON)

    def test_the_draft_backend(self):
        self.assertEqual(verdict(draft_backend="triton"), OFF)
        self.assertEqual(verdict(draft_backend="flashinfer"), ON)
        self.assertIn("draft decode, draft extend", reason(draft_backend="flashinfer"))
        self.assertEqual(verdict(attention_backend="flashinfer", draft_backend="triton"), ON)
        self.assertIn("target verify", reason(attention_backend="flashinfer",
                                              draft_backend="triton"))
        self.assertEqual(verdict(attention_backend=None, draft_backend="triton"), DEPENDS)

    def test_speculative_attention_mode_picks_the_draft_extend_backend(self):
        # prefill and decode differ: the target is a HybridAttnBackend in both
        # modes; the draft extend runs on the prefill or the decode backend.
        for mode in ("prefill", "decode"):
            with self.subTest(mode):
                self.assertEqual(
                    verdict(prefill_backend="flashinfer", speculative_attention_mode=mode), ON
                )


class FlashAttentionBackendOnMusa(FlashAttentionBackend):
    """Stands for MusaFlashAttentionBackend: a device's subclass."""


def _fa3_backend(cls, topk, mla, window, local, cross, cp, ver=3):
    backend = object.__new__(cls)
    backend.fa_impl_ver = ver
    backend.topk = topk
    backend.use_mla = mla
    backend.has_local_attention = local
    backend.has_swa = window
    backend.use_sliding_window_kv_pool = window
    backend.is_encoder_decoder = cross
    backend.attn_cp_size = cp
    return backend


class TestFa3(CustomTestCase):
    def test_the_plain_case_skips_it(self):
        self.assertEqual(verdict(attention_backend="fa3"), OFF)
        self.assertEqual(verdict(attention_backend="fa3", draft_backend="triton"), OFF)
        self.assertEqual(verdict(attention_backend="triton", draft_backend="fa3"), OFF)

    def test_each_fact_that_keeps_it(self):
        for change in (
            dict(topk=4),
            dict(mla=True),
            dict(sliding_window=True),
            dict(local_attention=True),
            dict(cross_attention=True),
            dict(attn_cp_size=2),
            dict(musa=True),
        ):
            with self.subTest(**change):
                self.assertEqual(verdict(attention_backend="fa3", **change), ON)
        self.assertEqual(verdict(attention_backend="fa4"), ON)
        self.assertIn("--attn-cp-size 2", reason(attention_backend="fa3", attn_cp_size=2))

    def test_unknown_facts_leave_it_open(self):
        for fact in ("topk", "mla", "sliding_window", "local_attention",
                     "cross_attention", "attn_cp_size", "musa"):
            with self.subTest(fact):
                self.assertEqual(verdict(attention_backend="fa3", **{fact: None}), DEPENDS)
        # a known fact that keeps it wins over an unknown one
        self.assertEqual(verdict(attention_backend="fa3", topk=4, mla=None), ON)
        self.assertEqual(verdict(attention_backend="fa3", topk=None, mla=True), ON)

    def test_agrees_with_the_backend_objects(self):
        # Every combination of what fa3_needs_cpu_seq_lens reads, on
        # FlashAttentionBackend and on a device's subclass of it.
        for musa, topk, mla, window, local, cross, cp in itertools.product(
            (False, True), (1, 4), (False, True), (False, True), (False, True),
            (False, True), (1, 2),
        ):
            cls = FlashAttentionBackendOnMusa if musa else FlashAttentionBackend
            backend = _fa3_backend(cls, topk, mla, window, local, cross, cp)
            got = verdict(
                attention_backend="fa3", topk=topk, mla=mla, sliding_window=window,
                local_attention=local, cross_attention=cross, attn_cp_size=cp, musa=musa,
            )
            self.assertEqual(got == ON, fa3_needs_cpu_seq_lens(backend))
            self.assertIn(got, (ON, OFF))


class TestModule(CustomTestCase):
    def test_imports_only_the_standard_library(self):
        tree = ast.parse(inspect.getsource(seq_lens_pull))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module.split(".")[0])
        self.assertEqual(imported, {"typing"})

    def test_describe(self):
        self.assertEqual(seq_lens_pull.describe(ON, "r"), "on: r")
        self.assertEqual(seq_lens_pull.describe(OFF, "r"), "off: r")
        self.assertEqual(seq_lens_pull.describe(NOT_USED, "r"), "not used (r)")


if __name__ == "__main__":
    unittest.main()
