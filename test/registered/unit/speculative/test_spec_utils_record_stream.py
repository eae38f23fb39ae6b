"""Patch A: record_stream_each / record_stream_for_v2_verify.

Spec-v2 verify reads ScheduleBatch tensors that were allocated on other streams
(input_ids, out_cache_loc, seq_lens, req_pool_indices, ...). The helpers record
each of them on the verify stream exactly once: None is skipped, a tensor
reachable under two names is recorded once, and the v2 workers call the helper
once per verify instead of scattered manual record_stream calls.
"""

import inspect
import unittest
from types import SimpleNamespace

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.speculative import spec_utils  # noqa: E402
from sglang.srt.speculative.spec_utils import (  # noqa: E402
    record_stream_each,
    record_stream_for_v2_verify,
)


class _FakeStream:
    def __init__(self):
        self.recorded = []


class _FakeTensor:
    """record_stream only exists on device tensors; count the calls instead."""

    def __init__(self, name):
        self.name = name

    def record_stream(self, stream):
        stream.recorded.append(self)


class TestRecordStreamEach(CustomTestCase):
    def test_each_tensor_once_none_skipped(self):
        stream = _FakeStream()
        a, b, c = _FakeTensor("a"), _FakeTensor("b"), _FakeTensor("c")
        record_stream_each(stream, a, None, b, a, None, c, b)
        self.assertEqual(stream.recorded, [a, b, c])

    def test_nothing_to_record(self):
        stream = _FakeStream()
        record_stream_each(stream)
        record_stream_each(stream, None, None)
        self.assertEqual(stream.recorded, [])


class TestRecordStreamForV2Verify(CustomTestCase):
    def test_cross_stream_fields_recorded_once(self):
        stream = _FakeStream()
        seq_lens = _FakeTensor("seq_lens")
        batch = SimpleNamespace(
            input_ids=_FakeTensor("input_ids"),
            out_cache_loc=_FakeTensor("out_cache_loc"),
            seq_lens=seq_lens,
            req_pool_indices=_FakeTensor("req_pool_indices"),
            orig_seq_lens=seq_lens,  # same tensor under a second name
            mamba_track_indices=None,
            mamba_track_mask=None,
            mamba_track_seqlens=None,
        )
        record_stream_for_v2_verify(batch, stream)
        names = [t.name for t in stream.recorded]
        self.assertEqual(len(names), len(set(names)))
        self.assertEqual(
            set(names), {"input_ids", "out_cache_loc", "seq_lens", "req_pool_indices"}
        )

    def test_missing_attributes_are_skipped(self):
        stream = _FakeStream()
        batch = SimpleNamespace(seq_lens=_FakeTensor("seq_lens"))
        record_stream_for_v2_verify(batch, stream)
        self.assertEqual([t.name for t in stream.recorded], ["seq_lens"])

    def test_covers_the_fields_verify_rebinds(self):
        for name in ("input_ids", "out_cache_loc", "seq_lens", "req_pool_indices"):
            self.assertIn(name, spec_utils._V2_VERIFY_CROSS_STREAM_FIELDS)


class TestV2WorkersRecordOnce(CustomTestCase):
    """Each v2 verify records through the helper once, with no manual
    record_stream call left next to it (that would record twice)."""

    def _check(self, verify):
        src = inspect.getsource(verify)
        self.assertEqual(src.count("record_stream_for_v2_verify("), 1)
        self.assertNotIn(".record_stream(", src)

    def test_eagle_worker_v2(self):
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

        self._check(EAGLEWorkerV2.verify)

    def test_multi_layer_eagle_worker_v2(self):
        from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
            MultiLayerEagleWorkerV2,
        )

        self._check(MultiLayerEagleWorkerV2.verify)


if __name__ == "__main__":
    unittest.main()
