"""SGLANG_DEBUG_CHECK_SEQ_LENS_TRUTH: the lengths a decode forward used
against the requests' own token counts, independent of FutureMap.

The mirror check compares device seq_lens with seq_lens_cpu; a relay read one
verify too early (the disaggregated-decode prebuilt race) is stale on both
sides and passes it. This check derives the lengths from prompt + committed
output when the forward's result is processed, and must flag exactly that.
"""

import unittest
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.managers import overlap_utils  # noqa: E402
from sglang.srt.managers.overlap_utils import SeqLensTruthCheck  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from schedule_batch_fakes import spec_v2_decode_batch  # noqa: E402

PROMPT = 10


def _batch(outputs, seq_lens, algo=SpeculativeAlgorithm.EAGLE3):
    """A decode batch whose requests have a PROMPT-token prompt and
    `outputs[i]` committed output tokens, running with `seq_lens`."""
    batch = spec_v2_decode_batch(list(range(1, len(outputs) + 1)), seq_lens, algo=algo)
    for i, (req, n) in enumerate(zip(batch.reqs, outputs)):
        req.rid = f"r{i}"
        req.origin_input_ids = list(range(PROMPT))
        req.output_ids = list(range(n))
        req.is_retracted = False
    return batch


class TestSeqLensTruthCheck(CustomTestCase):
    def setUp(self):
        patcher = mock.patch.object(overlap_utils, "CHECK_SEQ_LENS_TRUTH", True)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.check = SeqLensTruthCheck()

    def _run(self, batch):
        used = self.check.record(batch)
        self.assertIsNotNone(used)
        # the forward's own later writes do not change what it read
        batch.seq_lens = batch.seq_lens + 100
        self.check.verify(batch, used)

    def test_spec_verify_reads_prompt_plus_output_minus_one(self):
        # a verify feeds the last committed (bonus) token with the drafts
        self._run(_batch([3, 5], [PROMPT + 2, PROMPT + 4]))
        self.assertEqual((self.check.checks, self.check.violations), (2, 0))

    def test_plain_decode_reads_prompt_plus_output(self):
        batch = _batch([3, 5], [PROMPT + 3, PROMPT + 5], algo=SpeculativeAlgorithm.NONE)
        self._run(batch)
        self.assertEqual((self.check.checks, self.check.violations), (2, 0))

    def test_lengths_one_verify_behind_are_flagged(self):
        # The stale relay: request 0 accepted 3 tokens in the last verify, but
        # the batch still carries its length from before that verify.
        with self.assertLogs(overlap_utils.logger, "ERROR") as logs:
            self._run(_batch([6, 5], [PROMPT + 2, PROMPT + 4]))
        self.assertEqual((self.check.checks, self.check.violations), (2, 1))
        self.assertIn("('r0', 12, 15)", logs.output[0])
        self.assertIn("2 checks, 1 violations", logs.output[0])

    def test_finished_and_retracted_requests_are_skipped(self):
        batch = _batch([6, 6, 5], [PROMPT, PROMPT, PROMPT + 4])
        batch.reqs[0].done = True
        batch.reqs[1].is_retracted = True
        self._run(batch)
        self.assertEqual((self.check.checks, self.check.violations), (1, 0))

    def test_only_decode_forwards_of_checked_kinds_are_recorded(self):
        extend = _batch([1], [PROMPT])
        extend.forward_mode = ForwardMode.EXTEND
        self.assertIsNone(self.check.record(extend))
        # spec v1 appends the accepted tokens inside its forward
        v1 = _batch([1], [PROMPT])
        with mock.patch.object(type(v1), "is_spec_v2", property(lambda self: False)):
            self.assertIsNone(self.check.record(v1))

    def test_counts_are_logged_every_log_every_checks(self):
        self.check.log_every = 4
        with self.assertLogs(overlap_utils.logger, "INFO") as logs:
            for _ in range(3):
                self._run(_batch([3, 5], [PROMPT + 2, PROMPT + 4]))
        self.assertEqual(
            [m for m in logs.output if "truth" in m],
            ["INFO:sglang.srt.managers.overlap_utils:seq_lens truth check: "
             "4 checks, 0 violations"],
        )

    def test_count_line_follows_the_checks_made_not_the_batch_size(self):
        # 3 requests, one finished: 2 checks, below log_every = 4, so no line
        self.check.log_every = 4
        batch = _batch([3, 5, 7], [PROMPT + 2, PROMPT + 4, PROMPT + 6])
        batch.reqs[0].done = True
        with self.assertNoLogs(overlap_utils.logger, "INFO"):
            self._run(batch)
        self.assertEqual(self.check.checks, 2)

    def test_off_by_default_records_nothing(self):
        with mock.patch.object(overlap_utils, "CHECK_SEQ_LENS_TRUTH", False):
            self.assertIsNone(self.check.record(_batch([3], [PROMPT + 2])))


if __name__ == "__main__":
    unittest.main()
