"""Patch D: decode metrics without the host seq_lens mirror.

When FutureMap skips the host pull (needs_cpu_seq_lens False) a spec v2
decode batch has seq_lens_cpu None; the metrics then fall back to the
requests' own lengths instead of crashing or syncing the device.
"""

import unittest
from types import SimpleNamespace

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.observability.scheduler_metrics_mixin import (  # noqa: E402
    _decode_seq_lens,
    _decode_total_seq_lens,
)


def _batch(lens, with_cpu):
    return SimpleNamespace(
        reqs=[SimpleNamespace(seqlen=n) for n in lens],
        seq_lens_cpu=torch.tensor(lens) if with_cpu else None,
    )


class TestDecodeSeqLensMetrics(CustomTestCase):
    def test_same_total_with_and_without_the_mirror(self):
        lens = [7, 130, 42]
        self.assertEqual(_decode_total_seq_lens(_batch(lens, True)), 179)
        self.assertEqual(_decode_total_seq_lens(_batch(lens, False)), 179)
        self.assertIsInstance(_decode_total_seq_lens(_batch(lens, True)), int)

    def test_same_per_request_lengths(self):
        lens = [3, 9]
        self.assertEqual(_decode_seq_lens(_batch(lens, True)), lens)
        self.assertEqual(_decode_seq_lens(_batch(lens, False)), lens)

    def test_mirror_preferred_when_present(self):
        batch = _batch([5, 6], True)
        batch.reqs[0].seqlen = 100  # lags in overlap; the mirror is current
        self.assertEqual(_decode_total_seq_lens(batch), 11)

    def test_empty_batch(self):
        self.assertEqual(_decode_total_seq_lens(_batch([], False)), 0)


if __name__ == "__main__":
    unittest.main()
