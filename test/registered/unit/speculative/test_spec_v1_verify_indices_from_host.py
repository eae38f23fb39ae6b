"""Spec v1's verify takes what each request keeps from the host copy of the
accepted rows it already reads.

- EagleVerifyInput.verify reads the accepted rows and the predictions back
  once (accept_index.tolist(), predict.tolist()). The flat accepted index,
  the evicted draft slots and the per-request counts come from those host
  lists: no boolean indexing of a device tensor and no read-back of
  num_correct_drafts, each of which waits for the GPU once more.
- What it computes is what the device tensors gave: the tokens kept, the
  slots freed (in the same order), the new lengths and out_cache_loc, the
  counts per request, with and without a request that finishes mid-row,
  for a chain (topk 1) and a tree.

The verify kernel and the request-to-token write are stand-ins; the rest
is the patched verify on CPU.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=4, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.speculative import eagle_info  # noqa: E402
from sglang.srt.speculative.eagle_info import EagleVerifyInput  # noqa: E402

VOCAB = 32


class _Req:
    def __init__(self, finish_after=None):
        self.output_ids = []
        self.finish_after = finish_after  # finished once it has this many
        self.require_reasoning = False
        self.grammar = None
        self.kv_committed_len = self.kv_allocated_len = 0
        self.spec_verify_ct = self.spec_num_correct_drafts = 0

    def check_finished(self):
        pass

    def finished(self):
        return self.finish_after is not None and len(self.output_ids) >= self.finish_after

    def update_spec_correct_drafts_histogram(self, n):
        pass


class _SamplingInfo:
    has_custom_logit_processor = False
    logit_bias = None
    is_all_greedy = True
    penalizer_orchestrator = SimpleNamespace(is_required=False)

    def __init__(self, bs):
        self.bs = bs

    def __len__(self):
        return self.bs


def _verify(rows, draft_tokens, topk=1, finish_after=None):
    """verify() of a batch whose verify kernel accepts `rows` (positions into
    the flattened drafts, -1 after the last), predicting 100 + position.
    Returns (output, batch, freed slots, boolean indexings, read-backs)."""
    bs, width = len(rows), len(rows[0])
    finish_after = finish_after or [None] * bs
    spec = object.__new__(EagleVerifyInput)
    spec.draft_token = torch.arange(bs * draft_tokens)
    spec.draft_token_num = draft_tokens
    spec.spec_steps = width - 1
    spec.topk = topk
    spec.retrieve_index = torch.arange(bs * draft_tokens).view(bs, draft_tokens)
    spec.retrieve_next_token = spec.retrieve_next_sibling = None
    spec.grammar = None

    def kernel(predicts, accept_index, accept_token_num, **_):
        accept_index.copy_(torch.tensor(rows, dtype=accept_index.dtype))
        predicts.copy_(100 + torch.arange(predicts.numel(), dtype=predicts.dtype))
        accept_token_num.copy_(
            torch.tensor([sum(p != -1 for p in r) - 1 for r in rows], dtype=torch.int32)
        )
        return predicts, accept_index, accept_token_num

    seq_lens = torch.full((bs,), 20, dtype=torch.int64)
    batch = SimpleNamespace(
        forward_mode=SimpleNamespace(is_idle=lambda: False),
        sampling_info=_SamplingInfo(bs),
        reqs=[_Req(f) for f in finish_after],
        model_config=SimpleNamespace(think_end_id=None),
        device="cpu",
        out_cache_loc=1000 + torch.arange(bs * draft_tokens),
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone(),
        req_pool_indices=torch.arange(bs),
        req_to_token_pool=SimpleNamespace(req_to_token=None),
        spec_info=SimpleNamespace(hidden_states=torch.arange(bs * draft_tokens).float()),
    )
    logits = SimpleNamespace(next_token_logits=torch.zeros(bs * draft_tokens, VOCAB))
    freed = []
    allocator = SimpleNamespace(free=lambda slots: freed.append(slots.tolist()))

    bool_indexings, read_backs = [], []
    getitem, cpu = torch.Tensor.__getitem__, torch.Tensor.cpu

    def watched_getitem(self, index):
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            bool_indexings.append(tuple(self.shape))
        return getitem(self, index)

    def watched_cpu(self, *args, **kwargs):
        read_backs.append(tuple(self.shape))
        return cpu(self, *args, **kwargs)

    with mock.patch.object(eagle_info, "verify_tree_greedy_func", kernel), mock.patch.object(
        eagle_info, "assign_req_to_token_pool_func"
    ), mock.patch.object(torch.Tensor, "__getitem__", watched_getitem), mock.patch.object(
        torch.Tensor, "cpu", watched_cpu
    ):
        out = spec.verify(batch, logits, allocator, page_size=1)
    return out, batch, freed, bool_indexings, read_backs


def _expected(rows, draft_tokens, kept_per_row):
    kept = [pos for row, n in zip(rows, kept_per_row) for pos in row[:n]]
    evicted = [p for p in range(len(rows) * draft_tokens) if p not in set(kept)]
    return kept, evicted


class TestChainWithoutFinish(CustomTestCase):
    ROWS = [[0, 1, -1, -1], [4, 5, 6, 7], [8, -1, -1, -1]]

    def test_reads_back_only_the_rows_and_predictions(self):
        _, _, _, bool_indexings, read_backs = _verify(self.ROWS, draft_tokens=4)
        self.assertEqual(bool_indexings, [])
        self.assertEqual(read_backs, [])

    def test_keeps_and_frees_what_the_device_tensors_gave(self):
        out, batch, freed, _, _ = _verify(self.ROWS, draft_tokens=4)
        kept, evicted = _expected(self.ROWS, 4, [2, 4, 1])
        self.assertEqual(out.accept_tokens.tolist(), [100 + p for p in kept])
        self.assertEqual(out.accept_indices.tolist(), kept)
        self.assertEqual(freed, [[1000 + p for p in evicted]])
        self.assertEqual(batch.out_cache_loc.tolist(), [1000 + p for p in kept])
        self.assertEqual(out.num_correct_drafts_per_req_cpu, [1, 3, 0])
        self.assertEqual(batch.seq_lens_cpu.tolist(), [22, 24, 21])
        self.assertEqual(batch.seq_lens.tolist(), [22, 24, 21])
        extend = out.draft_extend_input
        self.assertEqual(extend.num_accept_tokens_cpu, [2, 4, 1])
        self.assertEqual(extend.input_ids.tolist(), [100 + p for p in kept])


class TestTreeWithAFinishedRequest(CustomTestCase):
    # topk 2, 6 draft tokens a request: accepted paths are tree positions
    ROWS = [[0, 2, 5, -1], [6, 7, 9, 11]]

    def test_a_request_finishing_mid_row_keeps_up_to_its_last_token(self):
        # the second request finishes at its second token of four
        out, batch, freed, bool_indexings, read_backs = _verify(
            self.ROWS, draft_tokens=6, topk=2, finish_after=[None, 2]
        )
        kept, evicted = _expected(self.ROWS, 6, [3, 2])
        self.assertEqual(bool_indexings, [])
        self.assertEqual(read_backs, [])
        self.assertEqual(out.accept_tokens.tolist(), [100 + p for p in kept])
        self.assertEqual(freed, [[1000 + p for p in evicted]])
        self.assertEqual(out.num_correct_drafts_per_req_cpu, [2, 1])
        self.assertEqual(batch.seq_lens_cpu.tolist(), [23, 22])
        self.assertEqual(batch.reqs[1].output_ids, [106, 107])
        # the unfinished request goes on to the draft extend with its rows
        extend = out.draft_extend_input
        self.assertEqual(extend.num_accept_tokens_cpu, [3])
        self.assertEqual(extend.input_ids.tolist(), [100, 102, 105])
        self.assertEqual(batch.out_cache_loc.tolist(), [1000, 1002, 1005])


if __name__ == "__main__":
    unittest.main()
