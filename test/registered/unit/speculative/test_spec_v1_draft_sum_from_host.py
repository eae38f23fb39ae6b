"""The spec v1 draft takes the batch's seq_lens_sum from the host mirror.

EAGLEWorker._draft_preprocess_decode (spec v1: topk > 1, or the overlap
schedule off) summed the device lengths with .item(), a read-back that
waits for the previous iteration's draft extend. Where the batch keeps
seq_lens_cpu (which mirrors seq_lens row for row) the sum comes from it,
and the device lengths are not read; a batch without the mirror sums them
as before. The draft's other outputs (positions, cache locations) are those
of 0.5.12.post1.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.speculative import eagle_worker  # noqa: E402
from sglang.srt.speculative.eagle_worker import EAGLEWorker  # noqa: E402

TOPK, STEPS = 4, 5


class DeviceLengths(torch.Tensor):
    """Stands for seq_lens on the GPU: counts the host reads of it (a sum
    turned into a Python number)."""

    reads = 0

    def item(self):
        DeviceLengths.reads += 1
        return self.as_subclass(torch.Tensor).item()


def _worker():
    w = object.__new__(EAGLEWorker)
    w.page_size = 1
    w.topk = TOPK
    w.speculative_num_steps = STEPS
    w.extend_lens = None
    w.num_new_pages_per_topk = None
    w.token_to_kv_pool_allocator = mock.Mock()
    w.device = "cpu"
    return w


def _batch(seq_lens, mirror):
    lens = torch.tensor(seq_lens, dtype=torch.int64)
    return SimpleNamespace(
        maybe_evict_swa=lambda: None,
        reqs=[SimpleNamespace(decode_batch_idx=0) for _ in seq_lens],
        batch_size=lambda: len(seq_lens),
        spec_info=SimpleNamespace(),
        sampling_info=SimpleNamespace(
            penalizer_orchestrator=SimpleNamespace(is_required=False)
        ),
        tree_cache=None,
        req_pool_indices=torch.arange(len(seq_lens)),
        req_to_token_pool=SimpleNamespace(req_to_token=torch.zeros(4, 64, dtype=torch.int32)),
        seq_lens=lens.as_subclass(DeviceLengths),
        seq_lens_cpu=lens.clone() if mirror else None,
        seq_lens_sum=-1,  # spec v1 leaves it stale between iterations
    )


def _preprocess(batch):
    slots = torch.arange(len(batch.reqs) * TOPK * STEPS)
    launches = []
    with mock.patch.object(eagle_worker, "alloc_token_slots",
                           return_value=(slots, "backup")), \
         mock.patch.object(eagle_worker, "assign_draft_cache_locs",
                           mock.MagicMock(__getitem__=lambda s, grid: (
                               lambda *a: launches.append(grid)))):
        DeviceLengths.reads = 0
        _worker()._draft_preprocess_decode(batch)
    return launches


class TestSpecV1DraftSumFromHost(CustomTestCase):
    def test_the_sum_comes_from_the_host_mirror(self):
        batch = _batch([7, 3, 12], mirror=True)
        launches = _preprocess(batch)
        self.assertEqual(batch.seq_lens_sum, 22)
        self.assertIsInstance(batch.seq_lens_sum, int)
        self.assertEqual(DeviceLengths.reads, 0)
        # the rest of the draft's preparation is unchanged
        self.assertEqual(launches, [(3,)])
        self.assertEqual(batch.spec_info.positions.as_subclass(torch.Tensor).tolist(),
                         [7] * TOPK + [3] * TOPK + [12] * TOPK)
        self.assertEqual(batch.out_cache_loc.tolist(), list(range(3 * TOPK * STEPS)))

    def test_without_a_mirror_the_device_lengths_are_summed(self):
        batch = _batch([7, 3], mirror=False)
        _preprocess(batch)
        self.assertEqual(batch.seq_lens_sum, 10)
        self.assertEqual(DeviceLengths.reads, 1)


if __name__ == "__main__":
    unittest.main()
