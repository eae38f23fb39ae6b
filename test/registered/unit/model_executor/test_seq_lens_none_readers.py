"""Patch D: forward-side readers of seq_lens_cpu / seq_lens_sum accept None.

- ForwardBatch.init_new takes extend lengths as host lists or device tensors
  (spec v2 draft extend without a host mirror) and builds the same device
  lengths and positions either way.
- CUDA-graph padding sums: None stays None, otherwise as before.
- DP attention's MLP-sync padding (prepare_mlp_sync_batch): a verify batch
  without the host mirror pads its device lengths and keeps its sum None;
  the decode-to-extend conversion it makes when a DP rank prefills gives
  the extend planners host lengths taken from its own copy.
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


def _verify_batch(lens, host_mirror):
    """A spec v2 verify ForwardBatch of len(lens) requests, 4 tokens each."""
    seq = torch.tensor(lens, dtype=torch.int64)
    bs, tokens = len(lens), 4 * len(lens)
    return ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY,
        batch_size=bs,
        input_ids=torch.arange(tokens),
        req_pool_indices=torch.arange(1, bs + 1),
        seq_lens=seq,
        out_cache_loc=torch.arange(tokens),
        seq_lens_sum=int(seq.sum()) if host_mirror else None,
        seq_lens_cpu=seq.clone() if host_mirror else None,
        positions=torch.arange(tokens),
        lora_ids=[None] * bs,
        spec_info=SimpleNamespace(num_tokens_per_req=4, is_draft_input=lambda: False),
        global_num_tokens_cpu=[tokens, 12],
        global_num_tokens_for_logprob_cpu=[tokens, 12],
        global_num_tokens_gpu=torch.zeros(2, dtype=torch.int64),
    )


def _padding_runner(fill=1):
    backend = SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: fill)
    return SimpleNamespace(attn_backend=backend, is_draft_worker=False)


class TestDpAttentionPaddingWithoutHostMirror(CustomTestCase):
    def test_pad_inputs_keeps_a_missing_sum_none(self):
        # Before: None + int raised TypeError, and the server exited.
        fb = _verify_batch([10, 20], host_mirror=False)
        fb._pad_inputs_to_size(_padding_runner(), 16, 4)
        self.assertEqual(fb.seq_lens.tolist(), [10, 20, 1, 1])
        self.assertIsNone(fb.seq_lens_sum)
        self.assertIsNone(fb.seq_lens_cpu)
        self.assertEqual(fb.input_ids.shape[0], 16)

    def test_pad_inputs_with_the_mirror_as_before(self):
        fb = _verify_batch([10, 20], host_mirror=True)
        fb._pad_inputs_to_size(_padding_runner(), 16, 4)
        self.assertEqual(fb.seq_lens_sum, 32)
        self.assertEqual(fb.seq_lens_cpu.tolist(), [10, 20, 1, 1])

    def _mlp_sync(self, fb, extend_in_batch, padding_mode):
        fb.is_extend_in_batch = extend_in_batch
        fbi = forward_batch_info
        tensor = torch.tensor

        def unpinned(*args, pin_memory=False, **kwargs):  # no CUDA host memory here
            return tensor(*args, **kwargs)

        with mock.patch.object(fbi, "get_attention_tp_size", lambda: 1), mock.patch.object(
            fbi, "get_attention_cp_size", lambda: 1
        ), mock.patch.object(fbi, "get_attention_dp_rank", lambda: 0), mock.patch.object(
            fbi, "set_dp_buffer_len", lambda *a: None
        ), mock.patch.object(fbi, "set_is_extend_in_batch", lambda *a: None), mock.patch.object(
            fbi.DpPaddingMode, "get_dp_padding_mode", lambda *a: padding_mode
        ), mock.patch.object(fbi.torch, "tensor", unpinned), mock.patch(
            "sglang.srt.batch_overlap.two_batch_overlap.TboForwardBatchPreparer.prepare",
            lambda **kw: None,
        ):
            fb.prepare_mlp_sync_batch(_padding_runner())
        return fb

    def test_verify_padded_for_the_other_dp_rank(self):
        # The other DP rank has 12 tokens (3 requests of 4): with MAX_LEN this
        # rank's verify is padded to 3 requests; with SUM_LEN (a rank is
        # prefilling) it keeps its own 2. Either way the sum stays None.
        dp = forward_batch_info.DpPaddingMode
        for extend_in_batch, mode, lens in (
            (False, dp.MAX_LEN, [10, 20, 1]),
            (True, dp.SUM_LEN, [10, 20]),
        ):
            with self.subTest(mode=mode.name):
                fb = self._mlp_sync(
                    _verify_batch([10, 20], host_mirror=False), extend_in_batch, mode
                )
                self.assertIs(fb.forward_mode, ForwardMode.TARGET_VERIFY)
                self.assertEqual(fb.seq_lens.tolist(), lens)
                self.assertIsNone(fb.seq_lens_sum)
                self.assertIsNone(fb.seq_lens_cpu)

    def test_decode_to_extend_conversion_gives_host_lengths(self):
        # A rank prefills and MAX_LEN is chosen: the batch runs as an extend of
        # one token a request, whose planners read host lengths.
        fb = self._mlp_sync(
            _verify_batch([10, 20], host_mirror=False),
            extend_in_batch=True,
            padding_mode=forward_batch_info.DpPaddingMode.MAX_LEN,
        )
        self.assertIs(fb.forward_mode, ForwardMode.EXTEND)
        self.assertEqual(fb.extend_prefix_lens_cpu.tolist(), [9, 19])
        self.assertEqual(fb.seq_lens_cpu.tolist(), [10, 20])
        self.assertEqual(fb.seq_lens_sum, 30)

if __name__ == "__main__":
    unittest.main()
