"""Patch D: forward-side readers of seq_lens_cpu / seq_lens_sum accept None.

- ForwardBatch.init_new takes extend lengths as host lists or device tensors
  (spec v2 draft extend without a host mirror) and builds the same device
  lengths and positions either way.
- CUDA-graph padding sums: None stays None, otherwise as before.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.model_executor import forward_batch_info  # noqa: E402
from sglang.srt.model_executor.cuda_graph_runner import (  # noqa: E402
    padded_seq_lens_sum,
)
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402


def _runner():
    return mock.MagicMock(
        server_args=SimpleNamespace(attention_backend="torch_native", enable_lora=False),
        use_ngram_embedding=False,
        model_is_mrope=False,
        is_hybrid_swa=False,
        device="cpu",
    )


def _extend_batch(prefix, extend, host_lists):
    seq = [p + e for p, e in zip(prefix, extend)]
    t = torch.tensor(seq, dtype=torch.int64)
    return ScheduleBatch(
        reqs=[],
        forward_mode=ForwardMode.DRAFT_EXTEND_V2,
        spec_algorithm=SpeculativeAlgorithm.EAGLE3,
        device="cpu",
        input_ids=torch.arange(sum(extend)),
        req_pool_indices=torch.arange(1, len(seq) + 1),
        seq_lens=t,
        seq_lens_cpu=t.clone() if host_lists else None,
        seq_lens_sum=int(t.sum()) if host_lists else None,
        out_cache_loc=torch.zeros(sum(extend), dtype=torch.int64),
        prefix_lens=prefix if host_lists else torch.tensor(prefix),
        extend_lens=extend,
        extend_num_tokens=sum(extend),
        extend_logprob_start_lens=[0] * len(seq),
    )


class TestInitNewExtendLengths(CustomTestCase):
    def _init(self, batch):
        # Single process: no expert-parallel group to ask.
        with mock.patch.object(
            forward_batch_info, "enable_num_token_non_padded", lambda: False
        ):
            return ForwardBatch.init_new(batch, _runner())

    def test_list_and_tensor_give_the_same_forward_batch(self):
        prefix, extend = [5, 9, 2], [3, 3, 3]
        a = self._init(_extend_batch(prefix, extend, host_lists=True))
        b = self._init(_extend_batch(prefix, extend, host_lists=False))
        for name in ("extend_prefix_lens", "extend_seq_lens", "positions", "extend_start_loc"):
            with self.subTest(name):
                self.assertEqual(getattr(a, name).tolist(), getattr(b, name).tolist())
        self.assertEqual(a.extend_prefix_lens.dtype, b.extend_prefix_lens.dtype)
        self.assertEqual(a.positions.tolist(), [5, 6, 7, 9, 10, 11, 2, 3, 4])
        # Host views: present with lists, None (computed by who needs them)
        # with device tensors.
        self.assertEqual(a.extend_prefix_lens_cpu, prefix)
        self.assertIsNone(b.extend_prefix_lens_cpu)
        self.assertEqual(b.extend_seq_lens_cpu, extend)
        self.assertEqual(a.seq_lens_sum, 25)
        self.assertIsNone(b.seq_lens_sum)
        self.assertIsNone(b.seq_lens_cpu)


class TestCudaGraphPaddingSums(CustomTestCase):
    def test_padded_sum(self):
        self.assertEqual(padded_seq_lens_sum(30, 2, 1), 32)
        self.assertEqual(padded_seq_lens_sum(30, 0, 1), 30)
        self.assertEqual(padded_seq_lens_sum(0, 3, 0), 0)
        self.assertIsNone(padded_seq_lens_sum(None, 2, 1))


if __name__ == "__main__":
    unittest.main()
