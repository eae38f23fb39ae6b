"""FA3 sizes spec v2 decode metadata from an upper bound when the host
seq_lens are absent, so the scheduler may skip their per-step host pull.

- fa3_needs_cpu_seq_lens: False only for FlashAttentionBackend itself (not
  a device's subclass, such as MUSA's) at FA3, MHA, topk 1 without local,
  sliding-window or cross attention and without context parallelism; the
  multi-step (draft decode) backend needs the pull when any step backend does.
- _max_seq_len_k: the exact host maximum plus the mode's extra with the
  mirror; the spec input's bound plus the extra, clamped to the context
  length, without it; whole rows (the context length), said once, with
  neither.
- The verify and draft-extend graph replays, run without the mirror, fill
  the same cache lengths, cumulative lengths and page-table entries as with
  it (every column a request reads), and a width the bound covers.
- An extend planned without the mirror (a decode batch DP attention runs as
  an extend) takes the spec input's bound instead of failing.
- Spec v2 prepare_for_decode leaves the batch's largest KV allocation as
  the draft input's bound: at least every request's length plus what the
  forward adds.
- The tree mask the draft builds for the verify: FA3 at topk 1 never reads
  it, so the EAGLE draft workers build it QLEN_ONLY (bs * n * n entries,
  however long the sequences or wide the bound, every kernel write inside
  it); other verify backends keep FULL_MASK, sized from the bound.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=8, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention import flashattention_backend as fa3_module  # noqa: E402
from sglang.srt.layers.attention.flashattention_backend import (  # noqa: E402
    FlashAttentionBackend,
    FlashAttentionMultiStepBackend,
    fa3_needs_cpu_seq_lens,
)
from sglang.srt.layers.attention.hybrid_linear_attn_backend import (  # noqa: E402
    HybridLinearAttnBackend,
)
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative import eagle_info_v2, spec_utils  # noqa: E402
from sglang.srt.speculative import eagle_utils, eagle_worker_v2  # noqa: E402
from sglang.srt.speculative.eagle_info import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.eagle_utils import (  # noqa: E402
    TreeMaskMode,
    verify_tree_mask_mode,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker  # noqa: E402
# the replays' stand-in backend and fused kernel, beside this file (0020)
from test_fa3_spec_graph_metadata_fused import (  # noqa: E402
    CONTEXT,
    DRAFT_TOKENS,
    backend as replay_backend,
    interpreted_metadata_kernels,
)


class FlashAttentionBackendOnMusa(FlashAttentionBackend):
    """Stands for MusaFlashAttentionBackend (not importable without MUSA)."""


def _plain(cls=FlashAttentionBackend, **overrides):
    attrs = dict(
        fa_impl_ver=3,
        topk=1,
        use_mla=False,
        has_local_attention=False,
        has_swa=False,
        use_sliding_window_kv_pool=False,
        is_encoder_decoder=False,
        attn_cp_size=1,
    )
    attrs.update(overrides)
    backend = object.__new__(cls)
    backend.__dict__.update(attrs)
    return backend


class TestNeedsCpuSeqLens(CustomTestCase):
    def test_plain_fa3_skips_the_pull(self):
        self.assertFalse(fa3_needs_cpu_seq_lens(_plain()))

    def test_every_other_case_keeps_it(self):
        for name, change in {
            "fa4": dict(fa_impl_ver=4),
            "topk 4": dict(topk=4),
            "mla": dict(use_mla=True),
            "local attention": dict(has_local_attention=True),
            "sliding window layers": dict(has_swa=True),
            "swa kv pool": dict(use_sliding_window_kv_pool=True),
            "encoder-decoder": dict(is_encoder_decoder=True),
            "context parallel": dict(attn_cp_size=2),
        }.items():
            with self.subTest(name):
                self.assertTrue(fa3_needs_cpu_seq_lens(_plain(**change)))

    def test_a_device_subclass_keeps_it(self):
        # MUSA's fa3 is a subclass with its own planning: not reviewed for
        # the bound, so it does not inherit the skip.
        self.assertTrue(fa3_needs_cpu_seq_lens(_plain(FlashAttentionBackendOnMusa)))
        self.assertTrue(fa3_needs_cpu_seq_lens(SimpleNamespace(**vars(_plain()))))

    def test_multi_step_backend_needs_it_when_any_step_does(self):
        multi = object.__new__(FlashAttentionMultiStepBackend)
        multi.attn_backends = [
            SimpleNamespace(needs_cpu_seq_lens=False),
            SimpleNamespace(needs_cpu_seq_lens=False),
        ]
        self.assertFalse(multi.needs_cpu_seq_lens)
        multi.attn_backends[1].needs_cpu_seq_lens = True
        self.assertTrue(multi.needs_cpu_seq_lens)


class TestMaxSeqLenK(CustomTestCase):
    def test_exact_with_the_mirror_bound_without(self):
        backend = replay_backend(bs=2)
        mirror = torch.tensor([10, 20])
        bounded = SimpleNamespace(seq_lens_upper_bound=30)
        self.assertEqual(backend._max_seq_len_k(mirror, bounded, 4), 24)
        self.assertEqual(backend._max_seq_len_k(None, bounded, 4), 34)
        self.assertEqual(backend._max_seq_len_k(None, bounded), 30)

    def test_bound_is_clamped_to_the_context(self):
        backend = replay_backend(bs=2)
        near_end = SimpleNamespace(seq_lens_upper_bound=CONTEXT - 1)
        self.assertEqual(backend._max_seq_len_k(None, near_end, 4), CONTEXT)

    def test_neither_mirror_nor_bound_fills_whole_rows_and_says_so(self):
        backend = replay_backend(bs=2)
        with mock.patch.object(fa3_module, "_warned_no_bound", False), self.assertLogs(
            fa3_module.logger, "WARNING"
        ) as logs:
            for spec_info in (None, SimpleNamespace(seq_lens_upper_bound=None)):
                self.assertEqual(backend._max_seq_len_k(None, spec_info, 4), CONTEXT)
        self.assertEqual(len(logs.records), 1)  # once, not per forward
        self.assertIn("seq_lens_upper_bound", logs.output[0])


class TestReplayWithoutMirror(CustomTestCase):
    """Each replay with the mirror, then without it (the bound instead), into
    fresh buffers: what the kernels read must be the same."""

    def _replay(self, mode, seq_lens, spec_info, with_mirror):
        bs = len(seq_lens)
        backend = replay_backend(bs=bs)
        seq_lens = torch.tensor(seq_lens)
        # the replay's fused Triton kernel, run by the interpreter on the CPU
        with mock.patch.multiple(fa3_module, **interpreted_metadata_kernels()):
            backend.init_forward_metadata_replay_cuda_graph(
                bs,
                torch.tensor([5, 2]),
                seq_lens,
                None,  # seq_lens_sum: fa3 never reads it
                None,
                mode,
                spec_info,
                seq_lens.clone() if with_mirror else None,
            )
        return backend.forward_metadata

    def _assert_same_reads(self, exact, bounded, key_lens):
        self.assertTrue(torch.equal(exact.cache_seqlens_int32, bounded.cache_seqlens_int32))
        self.assertTrue(torch.equal(exact.cu_seqlens_k, bounded.cu_seqlens_k))
        for row, length in enumerate(key_lens):
            self.assertTrue(
                torch.equal(exact.page_table[row, :length], bounded.page_table[row, :length])
            )
            # the rows were really filled: slots of request pool rows 5 and 2
            self.assertEqual(int(bounded.page_table[row, 0]), [5, 2][row] * CONTEXT)
        # the bound covers every column read, and the mirror's width too
        self.assertGreaterEqual(bounded.max_seq_len_k, max(key_lens))
        self.assertGreaterEqual(bounded.max_seq_len_k, exact.max_seq_len_k)

    def test_target_verify(self):
        spec_info = SimpleNamespace(seq_lens_upper_bound=30)
        exact = self._replay(ForwardMode.TARGET_VERIFY, [10, 20], spec_info, True)
        bounded = self._replay(ForwardMode.TARGET_VERIFY, [10, 20], spec_info, False)
        self.assertEqual(exact.max_seq_len_k, 20 + DRAFT_TOKENS)
        self.assertEqual(bounded.max_seq_len_k, 30 + DRAFT_TOKENS)
        self._assert_same_reads(exact, bounded, [10 + DRAFT_TOKENS, 20 + DRAFT_TOKENS])

    def test_draft_extend(self):
        # the draft extend's lengths already include the draft tokens
        spec_info = SimpleNamespace(seq_lens_upper_bound=30, num_tokens_per_req=DRAFT_TOKENS)
        exact = self._replay(ForwardMode.DRAFT_EXTEND_V2, [14, 24], spec_info, True)
        bounded = self._replay(ForwardMode.DRAFT_EXTEND_V2, [14, 24], spec_info, False)
        self.assertEqual((exact.max_seq_len_k, bounded.max_seq_len_k), (24, 30))
        self.assertTrue(torch.equal(exact.cu_seqlens_q, bounded.cu_seqlens_q))
        self._assert_same_reads(exact, bounded, [14, 24])


class TestExtendWithoutMirror(CustomTestCase):
    def _extend(self, with_mirror):
        backend = replay_backend(bs=2)
        backend.use_mla = False
        seq_lens = torch.tensor([10, 20])
        batch = SimpleNamespace(
            forward_mode=ForwardMode.EXTEND,
            seq_lens=seq_lens,
            seq_lens_cpu=seq_lens.clone() if with_mirror else None,
            batch_size=2,
            spec_info=SimpleNamespace(seq_lens_upper_bound=30),
            req_pool_indices=torch.tensor([5, 2]),
            req_to_token_pool=SimpleNamespace(req_to_token=backend.req_to_token),
            extend_prefix_lens_cpu=torch.tensor([9, 19]),
            extend_seq_lens_cpu=[1, 1],
            extend_seq_lens=torch.tensor([1, 1]),
            encoder_lens=None,
        )
        backend.init_forward_metadata(batch)
        return backend.forward_metadata

    def test_extend_takes_the_bound(self):
        # Before: seq_lens_cpu.max() on None raised AttributeError.
        exact, bounded = self._extend(True), self._extend(False)
        self.assertEqual((exact.max_seq_len_k, bounded.max_seq_len_k), (20, 30))
        self.assertTrue(torch.equal(exact.cu_seqlens_k, bounded.cu_seqlens_k))
        for row, length in enumerate([10, 20]):
            self.assertTrue(
                torch.equal(exact.page_table[row, :length], bounded.page_table[row, :length])
            )


class TestPrepareForDecodeBound(CustomTestCase):
    def test_bound_is_the_largest_allocation(self):
        # two requests mid-decode: committed 10 and 30 tokens, 12 and 40
        # allocated; 4 tokens a decode step, so 8 more past the committed
        reqs = [
            SimpleNamespace(kv_allocated_len=12, kv_committed_len=10, decode_batch_idx=0),
            SimpleNamespace(kv_allocated_len=40, kv_committed_len=30, decode_batch_idx=0),
        ]
        batch = SimpleNamespace(
            reqs=reqs,
            batch_size=lambda: 2,
            maybe_evict_swa=lambda: None,
            sampling_info=SimpleNamespace(
                penalizer_orchestrator=SimpleNamespace(is_required=False)
            ),
            token_to_kv_pool_allocator=SimpleNamespace(page_size=1),
            tree_cache=None,
            device="cpu",
            req_pool_indices=torch.tensor([5, 2]),
            req_to_token_pool=SimpleNamespace(req_to_token=None),
        )
        draft_input = EagleDraftInput()
        with mock.patch.object(
            eagle_info_v2, "get_alloc_len_per_decode", return_value=DRAFT_TOKENS
        ), mock.patch.object(
            eagle_info_v2, "alloc_token_slots", return_value=torch.arange(14)
        ), mock.patch.object(spec_utils, "assign_req_to_token_pool_func"):
            draft_input.prepare_for_decode(batch)
        # max(12, 10 + 8) = 18 and max(40, 30 + 8) = 40
        self.assertEqual([r.kv_allocated_len for r in reqs], [18, 40])
        self.assertEqual(draft_input.seq_lens_upper_bound, 40)
        # a request's length runs ahead of its committed count by at most one
        # unseen verify (DRAFT_TOKENS), and this forward's verify reads
        # DRAFT_TOKENS more: both stay under the bound
        committed_before = [10, 30]
        for committed, req in zip(committed_before, reqs):
            self.assertGreaterEqual(req.kv_allocated_len, committed + 2 * DRAFT_TOKENS)
        self.assertGreaterEqual(
            draft_input.seq_lens_upper_bound, max(committed_before) + 2 * DRAFT_TOKENS
        )



class _DeviceFlashAttentionBackend(FlashAttentionBackend):
    """Stands for a device port that subclasses FlashAttentionBackend."""


def _other_verify_backend():
    """A verify backend that may read the tree mask (flashinfer, say)."""
    return SimpleNamespace(get_verify_buffers_to_fill_after_draft=lambda: (None, None))


def _emulated_tree_kernel(writes):
    """sgl_kernel's build_tree_efficient, reduced to the tree-mask entries
    it writes (its index rule per mode), each checked against the mask."""

    def kernel(
        parent_list,
        top_scores_index,
        seq_lens,
        tree_mask,
        positions,
        retrieve_index,
        retrieve_next_token,
        retrieve_next_sibling,
        topk,
        depth,
        n,
        mode,
    ):
        lens = seq_lens.tolist()
        for bid, seq_len in enumerate(lens):
            seq_tree_idx = n * n * bid + sum(lens[:bid]) * n
            for tid in range(n):
                if mode == TreeMaskMode.FULL_MASK:
                    first = seq_tree_idx + (seq_len + n) * tid + seq_len
                else:
                    first = n * n * bid + n * tid
                writes.append((first, first + n - 1))
                assert first + n - 1 < tree_mask.numel(), "write past the mask"

    return kernel


class TestVerifyTreeMask(CustomTestCase):
    BS, LONG, SHORT = 64, 120_000, 10
    BOUND = LONG + 8  # the batch's largest KV allocation

    def test_mode_by_verify_backend(self):
        fa = object.__new__(FlashAttentionBackend)
        self.assertEqual(verify_tree_mask_mode(fa, 1), TreeMaskMode.QLEN_ONLY)
        for name, (backend, topk) in {
            "fa3 topk 4": (fa, 4),
            "device subclass": (object.__new__(_DeviceFlashAttentionBackend), 1),
            "another backend": (_other_verify_backend(), 1),
            "hybrid-linear target": (object.__new__(HybridLinearAttnBackend), 1),
            "none": (None, 1),
        }.items():
            with self.subTest(name):
                self.assertEqual(
                    verify_tree_mask_mode(backend, topk), TreeMaskMode.FULL_MASK
                )

    def _draft(self, target_backend):
        bs, n = self.BS, 2  # one draft step: n = 2 verify tokens a request
        w = object.__new__(EagleDraftWorker)
        w.server_args = SimpleNamespace()
        w.topk, w.speculative_num_steps, w.speculative_num_draft_tokens = 1, 1, n
        w.hot_token_id = None
        w.cuda_graph_runner = None
        w.req_to_token_pool = None
        w.draft_runner = SimpleNamespace()
        w.target_worker = SimpleNamespace(
            model_runner=SimpleNamespace(
                attn_backend=target_backend,
                model_config=SimpleNamespace(context_len=2 * self.LONG),
            )
        )
        with mock.patch.object(eagle_worker_v2, "DraftBackendFactory"):
            w.init_attention_backend()

        seq_lens = torch.full((bs,), self.SHORT, dtype=torch.int64)
        seq_lens[0] = self.LONG
        fb = ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=bs,
            input_ids=torch.zeros(bs, dtype=torch.int64),
            req_pool_indices=torch.arange(bs),
            seq_lens=seq_lens,
            out_cache_loc=torch.arange(bs),
            seq_lens_sum=None,
            positions=seq_lens.clone(),
            spec_info=EagleDraftInput(
                topk_p=torch.full((bs, 1), 0.5),
                topk_index=torch.arange(bs).reshape(bs, 1),
                hidden_states=torch.zeros(bs, 8),
            ),
        )
        batch = SimpleNamespace(
            spec_info=SimpleNamespace(
                prepare_for_v2_draft=lambda *args: (fb, False),
                bonus_tokens=torch.zeros(bs, dtype=torch.int64),
                seq_lens_upper_bound=self.BOUND,
            ),
            forward_mode=ForwardMode.DECODE,
            seq_lens=seq_lens,
            seq_lens_sum=None,  # the scheduler skipped the host pull
        )
        writes = []
        with mock.patch.object(
            eagle_utils,
            "sgl_build_tree_kernel_efficient",
            _emulated_tree_kernel(writes),
            create=True,
        ):
            verify_input = w.draft(batch)
        self.assertEqual(len(writes), bs * n)
        return w, verify_input

    def test_fa3_topk1_builds_a_draft_sized_mask(self):
        w, verify_input = self._draft(object.__new__(FlashAttentionBackend))
        self.assertEqual(w.tree_mask_mode, TreeMaskMode.QLEN_ONLY)
        self.assertEqual(verify_input.custom_mask.numel(), self.BS * 2 * 2)

    def test_other_verify_backends_keep_the_full_mask(self):
        w, verify_input = self._draft(_other_verify_backend())
        self.assertEqual(w.tree_mask_mode, TreeMaskMode.FULL_MASK)
        self.assertEqual(
            verify_input.custom_mask.numel(),
            self.BS * self.BOUND * 2 + self.BS * 2 * 2,
        )


if __name__ == "__main__":
    unittest.main()
