"""Patch E: two-batch-overlap children start with no attention plan.

``TboForwardBatchPreparer.filter_batch`` builds each child ForwardBatch field
by field and refuses (completeness check) any parent field that is not None
and not handled. The plan-marker fields default to non-None values (False),
so filter_batch must set them explicitly, and it must reset them: a parent's
"ready" describes the parent's metadata, never a child's.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.batch_overlap import two_batch_overlap  # noqa: E402
from sglang.srt.batch_overlap.two_batch_overlap import (  # noqa: E402
    TboForwardBatchPreparer,
)
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    ForwardBatch,
    ForwardMode,
)


def _make_target_verify_batch(bs: int) -> ForwardBatch:
    return ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY,
        batch_size=bs,
        input_ids=torch.arange(bs, dtype=torch.long),
        positions=torch.arange(bs, dtype=torch.long),
        out_cache_loc=torch.arange(bs, dtype=torch.long) + 100,
        req_pool_indices=torch.arange(bs, dtype=torch.long),
        seq_lens=torch.arange(1, bs + 1, dtype=torch.int32),
        seq_lens_cpu=torch.arange(1, bs + 1, dtype=torch.int32),
        seq_lens_sum=int(torch.arange(1, bs + 1).sum()),
    )


def _filter(parent: ForwardBatch, lo: int, hi: int) -> ForwardBatch:
    server_args = SimpleNamespace(
        moe_dense_tp_size=None, attention_backend="triton", device="cpu"
    )
    with mock.patch.object(
        two_batch_overlap, "get_attention_tp_size", return_value=1
    ), mock.patch.object(
        two_batch_overlap, "get_global_server_args", return_value=server_args
    ):
        return TboForwardBatchPreparer.filter_batch(
            parent,
            start_token_index=lo,
            end_token_index=hi,
            start_seq_index=lo,
            end_seq_index=hi,
            output_attn_backend=None,
            out_num_token_non_padded=torch.tensor(hi - lo),
        )


class TestTboFilterBatchMarker(CustomTestCase):
    def assertUnmarked(self, child):
        """Every marker field at its default: the child must plan for itself."""
        self.assertFalse(child.forward_metadata_ready)
        self.assertIsNone(child.forward_metadata_planned_bs)
        self.assertIsNone(child.forward_metadata_planned_num_tokens)
        self.assertFalse(child.forward_metadata_replan_equivalent)
        self.assertIsNone(child.forward_metadata_planner)
        self.assertTrue(child.needs_forward_metadata_init())

    def test_unmarked_parent_passes_completeness_check(self):
        child = _filter(_make_target_verify_batch(8), lo=0, hi=4)
        self.assertEqual(child.batch_size, 4)
        self.assertTrue(torch.equal(child.input_ids, torch.arange(4)))
        self.assertUnmarked(child)

    def test_marked_parent_gives_unmarked_children(self):
        planner = object()
        parent = _make_target_verify_batch(8)
        parent.mark_forward_metadata_ready(replan_equivalent=True, planner=planner)
        children = [_filter(parent, 0, 4), _filter(parent, 4, 8)]
        for child in children:
            self.assertEqual(child.batch_size, 4)
            self.assertUnmarked(child)
        self.assertTrue(torch.equal(children[1].seq_lens, parent.seq_lens[4:8]))
        # The parent keeps its own record.
        self.assertTrue(parent.forward_metadata_ready)
        self.assertEqual(parent.forward_metadata_planned_bs, 8)
        self.assertIs(parent.forward_metadata_planner, planner)


if __name__ == "__main__":
    unittest.main()
