"""The scheduler says at start whether the series' decode fast path is on.

One INFO line from tensor-parallel rank 0: which patches sglpatch recorded
in the package, and whether each speculative decode step pulls the relayed
seq_lens to the host, with the reason and what would turn it off, so a user
who launched with a backend or a setting that forces the pull sees it.
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

from sglang.srt.layers.attention.triton_backend import TritonAttnBackend  # noqa: E402
from sglang.srt.managers import overlap_utils  # noqa: E402
from sglang.srt.managers.overlap_utils import (  # noqa: E402
    explain_needs_cpu_seq_lens,
    log_seq_lens_pull,
    sglpatch_series_applied,
)
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402


class FlashInferAttnBackend:  # stands in by name: no needs_cpu_seq_lens flag
    pass


def _args(tbo=False, mixed=False):
    return SimpleNamespace(enable_two_batch_overlap=tbo, enable_mixed_chunk=mixed)


def _triton():
    return object.__new__(TritonAttnBackend)


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

    def test_settings_that_force_it(self):
        for args, flag in ((_args(tbo=True), "--enable-two-batch-overlap"),
                           (_args(mixed=True), "--enable-mixed-chunk")):
            needs, why = explain_needs_cpu_seq_lens(args, [_triton()])
            self.assertTrue(needs)
            self.assertIn(flag, why)

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

    def test_the_four_cases(self):
        self.assertIn("SERIES; per-step seq_lens host pull off: R", self._line(True, True, False, "R"))
        self.assertIn("host pull on: R", self._line(True, True, True, "R"))
        self.assertIn("not used (no speculative decoding", self._line(True, False, True, "R"))
        self.assertIn("not used (the overlap schedule is off", self._line(False, False, True, ""))

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
