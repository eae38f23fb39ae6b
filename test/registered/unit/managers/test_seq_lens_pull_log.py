"""The scheduler says at start whether the series' decode fast path is on.

One INFO line from tensor-parallel rank 0: which patches sglpatch recorded
in the package, and whether each speculative decode step pulls the relayed
seq_lens to the host, with the reason and what would turn it off, so a user
who launched with a backend or a setting that forces the pull sees it.
The verdict is seq_lens_pull's on the launch's facts (what `sglpatch status
--explain` says before launching), with the backend objects as a safety net:
where the launch leaves the pull off or open, a backend object that says it
reads the host lengths keeps it on.
"""

import json
import os
import tempfile
import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.configs.model_config import AttentionArch  # noqa: E402
from sglang.srt.layers.attention.flashattention_backend import (  # noqa: E402
    FlashAttentionBackend,
)
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend  # noqa: E402
from sglang.srt.managers import overlap_utils  # noqa: E402
from sglang.srt.managers.overlap_utils import (  # noqa: E402
    explain_needs_cpu_seq_lens,
    log_seq_lens_pull,
    seq_lens_pull_facts,
    seq_lens_pull_verdict,
    sglpatch_series_applied,
)
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402


class FlashInferAttnBackend:  # stands in by name: no needs_cpu_seq_lens flag
    pass


def _args(tbo=False, mixed=False, **settled):
    """Settled server_args of an EAGLE3 launch; its attention backend is left
    open (None) unless given, so the backend objects decide."""
    args = dict(
        speculative_algorithm="EAGLE3",
        speculative_eagle_topk=1,
        enable_two_batch_overlap=tbo,
        enable_mixed_chunk=mixed,
        enable_dp_attention=False,
        attention_backend=None,
        prefill_attention_backend=None,
        decode_attention_backend=None,
        speculative_draft_attention_backend=None,
        speculative_attention_mode="prefill",
    )
    args.update(settled)
    return SimpleNamespace(**args)


def _triton():
    return object.__new__(TritonAttnBackend)


def _model_runner(mla=False, window=None, cp=1):
    return SimpleNamespace(
        model_config=SimpleNamespace(
            attention_arch=AttentionArch.MLA if mla else AttentionArch.MHA,
            is_local_attention_model=False,
            is_encoder_decoder=False,
        ),
        sliding_window_size=window,
        token_to_kv_pool=None,
        attn_cp_size=cp,
    )


def _fa3(needs):
    backend = object.__new__(FlashAttentionBackend)
    backend.needs_cpu_seq_lens = needs
    return backend


class TestExplain(CustomTestCase):
    def test_triton_everywhere_is_off(self):
        needs, why = explain_needs_cpu_seq_lens(_args(), [_triton(), None, _triton()])
        self.assertFalse(needs)
        self.assertIn("device lengths", why)

    def test_a_backend_that_reads_host_lengths_is_named_with_the_remedy(self):
        needs, why = explain_needs_cpu_seq_lens(_args(), [FlashInferAttnBackend(), _triton()])
        self.assertTrue(needs)
        self.assertIn("FlashInferAttnBackend", why)
        self.assertIn("--attention-backend triton", why)
        self.assertIn("--attention-backend fa3 --speculative-eagle-topk 1", why)
        self.assertIn("--speculative-num-steps N", why)

    def test_settings_that_force_it(self):
        for args, flag in ((_args(tbo=True), "--enable-two-batch-overlap"),
                           (_args(mixed=True), "--enable-mixed-chunk")):
            needs, why = explain_needs_cpu_seq_lens(args, [_triton()])
            self.assertTrue(needs)
            self.assertIn(flag, why)

    def test_dp_attention_keeps_it(self):
        needs, why = explain_needs_cpu_seq_lens(
            _args(enable_dp_attention=True, attention_backend="triton"), [_triton()]
        )
        self.assertTrue(needs)
        self.assertIn("--enable-dp-attention", why)

    def test_the_launch_decides_first(self):
        # Facts that keep the pull keep it whatever the objects say...
        needs, why = explain_needs_cpu_seq_lens(
            _args(attention_backend="flashinfer"), [_triton()]
        )
        self.assertTrue(needs)
        self.assertTrue(why.startswith("flashinfer reads the host lengths"))
        # ...as a HybridAttnBackend (prefill and decode backends differ) does.
        needs, why = explain_needs_cpu_seq_lens(
            _args(prefill_attention_backend="fa3", decode_attention_backend="triton"),
            [_triton()],
        )
        self.assertTrue(needs)
        self.assertIn("HybridAttnBackend", why)
        needs, why = explain_needs_cpu_seq_lens(
            _args(attention_backend="triton"), [_triton(), None, _triton()]
        )
        self.assertFalse(needs)

    def test_objects_are_a_safety_net(self):
        # The launch says triton everywhere, but an object reads host lengths.
        needs, why = explain_needs_cpu_seq_lens(
            _args(attention_backend="triton"), [_triton(), FlashInferAttnBackend()]
        )
        self.assertTrue(needs)
        self.assertIn("FlashInferAttnBackend", why)

    def test_verdict_words(self):
        backends = [_triton()]
        cases = (
            (_args(attention_backend="triton"), True, ("off", "device lengths")),
            (_args(attention_backend="flashinfer"), True, ("on", "flashinfer")),
            (_args(speculative_algorithm=None), True, ("not used", "no speculative")),
            (_args(attention_backend="triton"), False, ("not used", "overlap schedule")),
        )
        for args, overlap, (verdict, says) in cases:
            with self.subTest(verdict=verdict, says=says):
                got, why = seq_lens_pull_verdict(args, backends, overlap)
                self.assertEqual(got, verdict)
                self.assertIn(says, why)

    def test_facts_from_server_args(self):
        args = _args(
            tbo=True,
            attention_backend="fa3",
            prefill_attention_backend="fa3",
            decode_attention_backend="triton",
            speculative_draft_attention_backend="flashinfer",
            speculative_attention_mode="decode",
            enable_dp_attention=True,
            speculative_eagle_topk=4,
        )
        facts = seq_lens_pull_facts(args, True)
        self.assertEqual(
            {k: facts[k] for k in (
                "overlap", "spec_algorithm", "topk", "two_batch_overlap", "mixed_chunk",
                "dp_attention", "attention_backend", "prefill_backend",
                "decode_backend", "draft_backend", "speculative_attention_mode",
            )},
            dict(
                overlap=True, spec_algorithm="EAGLE3", topk=4, two_batch_overlap=True,
                mixed_chunk=False, dp_attention=True, attention_backend="fa3",
                prefill_backend="fa3", decode_backend="triton",
                draft_backend="flashinfer", speculative_attention_mode="decode",
            ),
        )

    def test_fa3_facts_from_the_target_model_runner(self):
        fa3 = _args(attention_backend="fa3")
        for runner, expected in (
            (_model_runner(), {"mla": False, "sliding_window": False, "attn_cp_size": 1}),
            (_model_runner(mla=True), {"mla": True}),
            (_model_runner(window=4096), {"sliding_window": True}),
            (_model_runner(window=-1), {"sliding_window": False}),
            (_model_runner(cp=2), {"attn_cp_size": 2}),
        ):
            facts = seq_lens_pull_facts(fa3, True, runner)
            self.assertEqual({k: facts[k] for k in expected}, expected)
            self.assertFalse(facts["musa"])
            self.assertFalse(facts["local_attention"] or facts["cross_attention"])
        self.assertIsNone(seq_lens_pull_facts(fa3, True)["mla"])

    def test_fa3_verdicts(self):
        fa3 = _args(attention_backend="fa3")
        plain, mla = _model_runner(), _model_runner(mla=True)
        self.assertEqual(seq_lens_pull_verdict(fa3, [_fa3(False)], True, plain)[0], "off")
        # facts that keep the pull keep it, whatever the objects say
        self.assertEqual(seq_lens_pull_verdict(fa3, [_fa3(False)], True, mla)[0], "on")
        topk4 = _args(attention_backend="fa3", speculative_eagle_topk=4)
        self.assertEqual(seq_lens_pull_verdict(topk4, [_fa3(False)], True, plain)[0], "on")
        # an object that keeps it (a device subclass, a draft model's own
        # attention) keeps it
        self.assertEqual(seq_lens_pull_verdict(fa3, [_fa3(True)], True, plain)[0], "on")
        # without the model's facts the objects decide
        self.assertEqual(seq_lens_pull_verdict(fa3, [_fa3(False)], True)[0], "off")
        self.assertEqual(seq_lens_pull_verdict(fa3, [_fa3(True)], True)[0], "on")

    def test_decide_agrees_with_explain(self):
        for args in (_args(), _args(tbo=True), _args(mixed=True)):
            for backends in ([_triton()], [FlashInferAttnBackend()], [None]):
                self.assertEqual(
                    overlap_utils.decide_needs_cpu_seq_lens(args, backends),
                    explain_needs_cpu_seq_lens(args, backends)[0],
                )


class TestSeriesApplied(CustomTestCase):
    def _state(self, content):
        d = tempfile.mkdtemp()
        path = os.path.join(d, ".sglpatch-state.json")
        with open(path, "w") as f:
            f.write(content)
        return path

    def test_recorded_patches(self):
        applied = [{"name": f"000{i}-x.patch", "sha256": "0"} for i in range(1, 9)]
        path = self._state(json.dumps({"applied": applied, "sglpatch_version": "0.2.0"}))
        self.assertEqual(
            sglpatch_series_applied(path), "patches 0001-0008 applied by sglpatch 0.2.0"
        )

    def test_no_state_file_and_a_broken_one(self):
        self.assertIn("no sglpatch state file", sglpatch_series_applied("/nonexistent/x.json"))
        self.assertIn("unreadable", sglpatch_series_applied(self._state("[1, 2]")))


class TestStartLine(CustomTestCase):
    def _line(self, *args):
        with mock.patch.object(overlap_utils, "sglpatch_series_applied", lambda: "SERIES"):
            with self.assertLogs(overlap_utils.logger, "INFO") as logs:
                log_seq_lens_pull(*args)
        (line,) = logs.output
        return line

    def test_the_three_verdicts(self):
        self.assertIn("SERIES; per-step seq_lens host pull off: R", self._line("off", "R"))
        self.assertIn("host pull on: R", self._line("on", "R"))
        self.assertIn("host pull not used (R)", self._line("not used", "R"))

    def test_init_overlap_without_overlap_says_not_used(self):
        sched = object.__new__(Scheduler)
        sched.spec_algorithm = SpeculativeAlgorithm.EAGLE3
        sched.device, sched.forward_stream = "cpu", None
        sched.enable_overlap, sched.tp_rank = False, 0
        sched.server_args = _args(attention_backend="triton")
        with mock.patch.object(overlap_utils, "sglpatch_series_applied", lambda: "SERIES"):
            with mock.patch(
                "sglang.srt.managers.scheduler.use_mlx", lambda: False
            ), self.assertLogs(overlap_utils.logger, "INFO") as logs:
                sched.init_overlap()
        self.assertIsNone(sched.future_map)
        self.assertIn("host pull not used (the overlap schedule is off", logs.output[-1])

    def test_init_overlap_logs_once_on_rank_zero(self):
        for rank, lines in ((0, 1), (1, 0)):
            sched = object.__new__(Scheduler)
            sched.spec_algorithm = SpeculativeAlgorithm.EAGLE3
            sched.draft_worker = SimpleNamespace(
                spec_v2_attn_backends=(FlashInferAttnBackend(), _triton())
            )
            sched.device, sched.forward_stream = "cpu", None
            sched.enable_overlap, sched.tp_rank = True, rank
            sched.req_to_token_pool = SimpleNamespace(req_to_token=torch.zeros((5, 4)))
            sched.server_args = _args()
            sched.tp_worker = SimpleNamespace(model_runner=_model_runner())
            with mock.patch("sglang.srt.managers.scheduler.use_mlx", lambda: False), \
                    mock.patch.object(overlap_utils.logger, "info") as info:
                sched.init_overlap()
            self.assertEqual(info.call_count, lines)
            self.assertTrue(sched.future_map.needs_cpu_seq_lens)
            if lines:
                message = info.call_args[0][0] % info.call_args[0][1:]
                self.assertIn("host pull on: FlashInferAttnBackend", message)


if __name__ == "__main__":
    unittest.main()
