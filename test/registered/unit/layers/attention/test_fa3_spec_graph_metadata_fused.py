"""FA3's spec v2 verify (topk 1) and draft-extend graph replays set their
metadata with the fused kernel the decode replay uses: the verify's shifted
by the draft tokens, the draft extend's unshifted (its lengths already
count its tokens).

- Each replay calls normal_decode_set_metadata once, with its own buffers,
  its shift, the page-table width the bound gives (never wider than a
  row), and the sliding-window table and pool where the server has one.
- Run in Triton's interpreter on the CPU, each replay writes what the torch
  operations it replaces wrote: cache lengths, cumulative lengths and every
  page-table column up to that width, at page size 1 (the kernel's fast
  path) and 4 (its general path), and nothing past that width; the draft
  extend's query lengths as before.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention import flashattention_backend as fa3_module  # noqa: E402
from sglang.srt.layers.attention.flashattention_backend import (  # noqa: E402
    FlashAttentionBackend,
    FlashAttentionMetadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

CONTEXT = 64
DRAFT_TOKENS = 4
POOL_ROWS = 8
BS = 3


def backend(page_size=1, bs=BS):
    """A FlashAttentionBackend with the state its verify and draft-extend
    replays touch, on the CPU."""
    b = object.__new__(FlashAttentionBackend)
    b.max_context_len = CONTEXT
    b.page_size = page_size
    b.topk = 1
    b.speculative_num_steps = DRAFT_TOKENS - 1
    b.speculative_num_draft_tokens = DRAFT_TOKENS
    b.use_sliding_window_kv_pool = False
    b.token_to_kv_pool = None
    b.has_swa = False
    b.has_local_attention = False
    # every (row, column) a distinct KV slot
    b.req_to_token = torch.arange(POOL_ROWS * CONTEXT, dtype=torch.int32).view(
        POOL_ROWS, CONTEXT
    )
    strided = torch.arange(0, CONTEXT, page_size)

    def metadata():
        return FlashAttentionMetadata(
            cache_seqlens_int32=torch.zeros(bs, dtype=torch.int32),
            cu_seqlens_q=torch.zeros(bs + 1, dtype=torch.int32),
            cu_seqlens_k=torch.zeros(bs + 1, dtype=torch.int32),
            page_table=torch.full((bs, CONTEXT // page_size), -1, dtype=torch.int32),
        )

    b.decode_cuda_graph_metadata = {"strided_indices": strided}
    b.target_verify_metadata = {bs: metadata()}
    b.draft_extend_metadata = {"strided_indices": strided, bs: metadata()}
    return b


VERIFY, DRAFT_EXTEND = ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND_V2
# what each replay adds to the decode lengths
SHIFT = {VERIFY: DRAFT_TOKENS, DRAFT_EXTEND: 0}


def replay(b, seq_lens, pool_rows, bound, mode=VERIFY):
    seq_lens = torch.tensor(seq_lens)
    b.init_forward_metadata_replay_cuda_graph(
        len(seq_lens),
        torch.tensor(pool_rows),
        seq_lens,
        None,
        None,
        mode,
        # a draft extend takes each request's draft tokens (spec v2)
        SimpleNamespace(seq_lens_upper_bound=bound, num_tokens_per_req=DRAFT_TOKENS),
        None,  # no host mirror: the bound sizes the fill (patch 0011)
    )
    return b.forward_metadata


class TestReplaysCallTheFusedKernel(CustomTestCase):
    def _calls(self, b, mode):
        calls = []
        with mock.patch.object(
            fa3_module, "normal_decode_set_metadata",
            lambda *args: calls.append(args),
        ):
            md = replay(b, [10, 20, 5], [5, 2, 7], bound=30, mode=mode)
        return md, calls

    def test_once_with_the_replays_buffers_and_shift(self):
        for mode in (VERIFY, DRAFT_EXTEND):
            with self.subTest(mode.name):
                b = backend()
                md, calls = self._calls(b, mode)
                self.assertEqual(len(calls), 1)
                (seqlens, cu_k, table, r2t, pool, strided, pages, lens, shift,
                 page_size, swa_table, swa_pool) = calls[0]
                self.assertIs(seqlens, md.cache_seqlens_int32)
                self.assertIs(cu_k, md.cu_seqlens_k)
                self.assertIs(table, md.page_table)
                self.assertIs(r2t, b.req_to_token)
                self.assertEqual(pool.tolist(), [5, 2, 7])
                self.assertEqual(lens.tolist(), [10, 20, 5])
                self.assertEqual((shift, page_size), (SHIFT[mode], 1))
                # the bound plus the shift: the width the fill covers
                self.assertEqual((md.max_seq_len_k, pages), (30 + SHIFT[mode],) * 2)
                self.assertIsNone(swa_table)
                self.assertIsNone(swa_pool)

    def test_the_fill_never_passes_a_page_table_row(self):
        # a host mirror near the context's end: its maximum plus the draft
        # tokens is wider than a row; the torch slices this replaces clamped
        b = backend()
        calls = []
        lens = torch.tensor([CONTEXT - 2, 5, 7])
        with mock.patch.object(
            fa3_module, "normal_decode_set_metadata",
            lambda *args: calls.append(args),
        ):
            b.init_forward_metadata_replay_cuda_graph(
                BS, torch.tensor([5, 2, 7]), lens, None, None, VERIFY,
                SimpleNamespace(), lens.clone(),
            )
        self.assertEqual(b.forward_metadata.max_seq_len_k, CONTEXT - 2 + DRAFT_TOKENS)
        self.assertEqual(calls[0][6], CONTEXT)

    def test_a_sliding_window_pool_goes_to_the_kernel(self):
        for mode, buffers in ((VERIFY, "target_verify_metadata"),
                              (DRAFT_EXTEND, "draft_extend_metadata")):
            with self.subTest(mode.name):
                b = backend()
                b.use_sliding_window_kv_pool = True
                b.token_to_kv_pool = object()
                swa = torch.zeros(BS, CONTEXT, dtype=torch.int32)
                getattr(b, buffers)[BS].swa_page_table = swa
                _, calls = self._calls(b, mode)
                self.assertIs(calls[0][10], swa)
                self.assertIs(calls[0][11], b.token_to_kv_pool)


def interpreted_metadata_kernels():
    """{name: kernel} of the fused metadata kernel's two paths (page size 1
    without a window, and the general one) as Triton's interpreter runs
    them, on the CPU's tensors: patched into the backend's module, the
    replays run sglang's own kernel where there is no Triton driver."""
    from triton.runtime.interpreter import InterpretedFunction

    return {
        name: InterpretedFunction(getattr(fa3_module, name).fn)
        for name in ("_fused_metadata_kernel_ps1_no_swa", "_fused_metadata_kernel_general")
    }


class TestReplaysInTritonsInterpreter(CustomTestCase):
    def test_it_writes_what_the_torch_operations_wrote(self):
        try:
            import triton.runtime.interpreter  # noqa: F401
        except ImportError:
            self.skipTest("no triton")
        kernels = interpreted_metadata_kernels()
        for mode, shift in SHIFT.items():
            for page_size in (1, 4):
                with self.subTest(mode=mode.name, page_size=page_size), (
                    mock.patch.multiple(fa3_module, **kernels)
                ):
                    b = backend(page_size)
                    lens, rows, bound = [10, 21, 5], [5, 2, 7], 30
                    md = replay(b, lens, rows, bound, mode)
                    # the torch operations the replay ran before
                    want_lens = torch.tensor(lens, dtype=torch.int32) + shift
                    want_cu = torch.zeros(BS + 1, dtype=torch.int32)
                    want_cu[1:] = torch.cumsum(want_lens, dim=0, dtype=torch.int32)
                    pages = (bound + shift + page_size - 1) // page_size
                    strided = torch.arange(0, CONTEXT, page_size)[:pages]
                    want_table = (
                        b.req_to_token[torch.tensor(rows)[:, None], strided[None, :]]
                        // page_size
                    )
                    self.assertTrue(torch.equal(md.cache_seqlens_int32, want_lens))
                    self.assertTrue(torch.equal(md.cu_seqlens_k, want_cu))
                    self.assertTrue(torch.equal(md.page_table[:, :pages], want_table))
                    # nothing past the width
                    self.assertTrue(bool((md.page_table[:, pages:] == -1).all()))
                    if shift == 0:  # the draft extend's queries: its draft tokens
                        want_q = torch.arange(
                            0, (BS + 1) * DRAFT_TOKENS, DRAFT_TOKENS, dtype=torch.int32
                        )
                        self.assertTrue(torch.equal(md.cu_seqlens_q, want_q))


if __name__ == "__main__":
    unittest.main()
