"""FA3's spec v1 draft-decode graphs at EAGLE topk > 1 (a draft tree) share
the prefix half of their metadata across the step backends, in the plain
case only.

- FlashAttentionMultiStepBackend.init_cuda_graph_state: where every step
  backend fuses its tree metadata (fa3_fuses_tree_metadata), the step
  backends hold one storage for draft_decode_metadata_topk_normal
  (cache_seqlens, cu_seqlens_q, cu_seqlens_k, page_table), and each step's
  captured metadata is a view of it; the draft-token half
  (draft_decode_metadata_topk_expand) stays per backend.
- At each multi-step replay, only the first step backend fills the shared
  prefix half (one normal_decode_set_metadata call, its cumsum into a
  scratch buffer, so that the captured zeros of cu_seqlens_k stay); the
  others fill only their draft-token half.
- Run in Triton's interpreter on the CPU, each step backend's metadata after
  replays equals what independent, unshared backends (the torch operations)
  produce, in every buffer its graph reads, to the last element.
- Every other configuration (topk 1, FA4, MLA, local, sliding-window or
  cross attention, context parallelism, a device subclass, a page size that
  is not a power of two) keeps one storage per step backend and the torch
  operations.
"""

import random
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
    FlashAttentionMultiStepBackend,
    fa3_fuses_tree_metadata,
)

# the plain backend's stand-in, the variants it must leave alone and the
# KV pool, beside this file (the verify and draft-extend replays' test)
from test_fa3_tree_graph_metadata_fused import (  # noqa: E402
    CONTEXT,
    MAX_BS,
    POOL_ROWS,
    SENTINEL,
    TOPK,
    VARIANTS as BACKEND_VARIANTS,
    bare_backend,
    interpreted_kernels,
    pool,
)

STEPS = 4  # three step backends
KEYS = ("cache_seqlens", "cu_seqlens_q", "cu_seqlens_k", "page_table")
FUSED = ("_fused_metadata_kernel_ps1_no_swa", "_fused_metadata_kernel_general")
# topk 1 has a test of its own here
VARIANTS = {k: v for k, v in BACKEND_VARIANTS.items() if k != "topk 1"}


def step_backend(step_id, page_size, req_to_token, cls=FlashAttentionBackend,
                 topk=TOPK, **overrides):
    """A draft step's FlashAttentionBackend, on the CPU."""
    return bare_backend(page_size, req_to_token, cls, topk, draft_tokens=8,
                        steps=STEPS, step_id=step_id, **overrides)


def multi_step(page_size=1, req_to_token=None, fuse=True, topk=TOPK, **overrides):
    """A FlashAttentionMultiStepBackend of STEPS - 1 step backends, its graph
    state from its own init_cuda_graph_state; fuse=False: the step backends
    as if fa3_fuses_tree_metadata had said no (the unshared torch path).
    The prefix page tables start at a sentinel, so a write the torch path
    did not make shows."""
    ms = object.__new__(FlashAttentionMultiStepBackend)
    ms.topk = topk
    ms.speculative_num_steps = STEPS
    ms.attn_backends = []
    for i in range(STEPS - 1):
        b = step_backend(i, page_size, req_to_token, topk=topk, **overrides)
        if not fuse:
            b.fuses_tree_metadata = False
        ms.attn_backends.append(b)
    ms.init_cuda_graph_state(MAX_BS, MAX_BS * TOPK)
    if topk > 1:
        for b in ms.attn_backends:
            b.draft_decode_metadata_topk_normal["page_table"].fill_(SENTINEL)
    return ms


def draft_input():
    return SimpleNamespace(is_draft_input=lambda: True)


def capture(ms, bs):
    ms.init_forward_metadata_capture_cuda_graph(
        SimpleNamespace(
            batch_size=bs,
            req_pool_indices=torch.zeros(bs, dtype=torch.int64),
            seq_lens=torch.ones(bs, dtype=torch.int32),
            encoder_lens=None,
            spec_info=draft_input(),
        )
    )


def random_batch(rng, bs, raw_bs):
    """A draft graph batch of bs as the draft graph runner pads it: raw_bs
    requests, the rest with the fill value 1 and a stale pool row; the
    draft tokens' cache slots, [bs * topk, steps]."""
    lens = [rng.randint(1, CONTEXT - STEPS - 1) for _ in range(raw_bs)]
    lens += [1] * (bs - raw_bs)
    rows = [rng.randrange(POOL_ROWS) for _ in range(bs)]
    # each draft branch's slots are consecutive, as the allocator gives them
    # (so that they span at most two pages at the page sizes here)
    starts = torch.tensor(
        [rng.randrange(POOL_ROWS * CONTEXT) for _ in range(bs * TOPK)]
    )
    cache_loc = (starts[:, None] + torch.arange(STEPS)).view(-1)
    return SimpleNamespace(
        batch_size=bs,
        req_pool_indices=torch.tensor(rows, dtype=torch.int64),
        seq_lens=torch.tensor(lens, dtype=torch.int64),
        seq_lens_cpu=torch.tensor(lens, dtype=torch.int64),
        seq_lens_sum=sum(lens),
        encoder_lens=None,
        spec_info=draft_input(),
        out_cache_loc=cache_loc,
    )


def replay(ms, batch):
    ms.init_forward_metadata_replay_cuda_graph(batch, batch.batch_size)


# the page-size > 1 draft-token half is torch.compile'd; on the CPU run it as
# the function it compiles (the same operations)
_EXPAND = fa3_module.draft_decode_set_expand_metadata
EAGER = dict(
    draft_decode_set_expand_metadata=getattr(
        _EXPAND, "_torchdynamo_orig_callable", getattr(_EXPAND, "__wrapped__", _EXPAND)
    )
)


def storage(t):
    return t.untyped_storage().data_ptr()


def fields(md):
    return {
        "cache_seqlens_int32": md.cache_seqlens_int32,
        "cu_seqlens_q": md.cu_seqlens_q,
        "cu_seqlens_k": md.cu_seqlens_k,
        "page_table": md.page_table,
        "max_seq_len_q": md.max_seq_len_q,
        "max_seq_len_k": md.max_seq_len_k,
    }


def assert_same(test, want, got, what):
    test.assertEqual(want.keys(), got.keys())
    for name in want:
        a, b = want[name], got[name]
        if isinstance(a, torch.Tensor):
            test.assertTrue(torch.equal(a, b), f"{what}: {name}\n{a}\n{b}")
        else:
            test.assertEqual(a, b, f"{what}: {name}")


# (page size, graph batch sizes captured, replays as (graph batch, raw batch))
CASES = (
    (1, (4, 2), ((4, 3), (2, 2), (4, 4))),
    (4, (4, 1), ((4, 2), (1, 1), (4, 4))),
    (8, (3,), ((3, 3), (3, 1))),
)


class TestSharing(CustomTestCase):
    def test_plain_step_backends_share_the_prefix_storage(self):
        for page_size in (1, 4):
            with self.subTest(page_size=page_size):
                ms = multi_step(page_size, pool(0))
                first, *rest = ms.attn_backends
                for bs in (4, 2):
                    capture(ms, bs)
                for b in rest:
                    for k in KEYS:
                        self.assertEqual(
                            storage(b.draft_decode_metadata_topk_normal[k]),
                            storage(first.draft_decode_metadata_topk_normal[k]),
                            k,
                        )
                    # the draft-token half stays each backend's own
                    for k in KEYS:
                        self.assertNotEqual(
                            storage(b.draft_decode_metadata_topk_expand[k]),
                            storage(first.draft_decode_metadata_topk_expand[k]),
                            k,
                        )
                    # each backend's captured metadata: its own objects,
                    # views of the shared storage
                    for bs in (4, 2):
                        mine = b.draft_decode_metadata_topk_normal[bs]
                        theirs = first.draft_decode_metadata_topk_normal[bs]
                        self.assertIsNot(mine, theirs)
                        for name in ("cache_seqlens_int32", "cu_seqlens_q",
                                     "cu_seqlens_k", "page_table"):
                            self.assertEqual(
                                getattr(mine, name).data_ptr(),
                                getattr(theirs, name).data_ptr(),
                                name,
                            )
                    self.assertTrue(b.draft_prefix_filled_by_first_step)
                    self.assertIsNone(b.draft_prefix_cu_seqlens_k_scratch)
                # only the first fills, into its own scratch cumsum
                self.assertFalse(first.draft_prefix_filled_by_first_step)
                scratch = first.draft_prefix_cu_seqlens_k_scratch
                self.assertEqual(scratch.shape, (MAX_BS + 1,))
                for b in ms.attn_backends:
                    for d in (b.draft_decode_metadata_topk_normal,
                              b.draft_decode_metadata_topk_expand):
                        for k in KEYS:
                            self.assertNotEqual(storage(d[k]), storage(scratch))

    def test_every_other_case_keeps_a_storage_per_step(self):
        for name, change in {"unfused": dict(fuse=False), **VARIANTS}.items():
            with self.subTest(name):
                change = dict(change)
                ms = multi_step(change.pop("page_size", 1), pool(0), **change)
                ptrs = [
                    storage(b.draft_decode_metadata_topk_normal[k])
                    for b in ms.attn_backends
                    for k in KEYS
                ]
                self.assertEqual(len(set(ptrs)), len(ptrs))
                for b in ms.attn_backends:
                    self.assertIsNone(b.draft_prefix_cu_seqlens_k_scratch)
                    self.assertFalse(b.draft_prefix_filled_by_first_step)

    def test_one_unfused_step_keeps_every_storage_apart(self):
        ms = object.__new__(FlashAttentionMultiStepBackend)
        ms.topk, ms.speculative_num_steps = TOPK, STEPS
        ms.attn_backends = [step_backend(i, 1, pool(0)) for i in range(STEPS - 1)]
        ms.attn_backends[1].fuses_tree_metadata = False
        ms.init_cuda_graph_state(MAX_BS, MAX_BS * TOPK)
        ptrs = {
            storage(b.draft_decode_metadata_topk_normal["page_table"])
            for b in ms.attn_backends
        }
        self.assertEqual(len(ptrs), STEPS - 1)
        self.assertIsNone(ms.attn_backends[0].draft_prefix_cu_seqlens_k_scratch)

    def test_topk_one_is_untouched(self):
        ms = multi_step(1, pool(0), topk=1)
        for b in ms.attn_backends:
            self.assertFalse(hasattr(b, "draft_decode_metadata_topk_normal"))
            self.assertIsNone(b.draft_prefix_cu_seqlens_k_scratch)
            self.assertFalse(b.draft_prefix_filled_by_first_step)


class TestReplaysInTritonsInterpreter(CustomTestCase):
    def setUp(self):
        try:
            import triton.runtime.interpreter  # noqa: F401
        except ImportError:
            self.skipTest("no triton")

    def test_each_step_reads_what_unshared_backends_produce(self):
        for seed, (page_size, graph_bss, replays) in enumerate(CASES):
            with self.subTest(page_size=page_size):
                r2t = pool(seed)
                rng = random.Random(seed)
                batches = [random_batch(rng, bs, raw) for bs, raw in replays]
                unshared = multi_step(page_size, r2t, fuse=False)
                shared = multi_step(page_size, r2t)
                launches = []
                kernels = interpreted_kernels(launches)
                for ms in (unshared, shared):
                    for bs in graph_bss:
                        capture(ms, bs)
                with mock.patch.multiple(fa3_module, **EAGER, **kernels):
                    for k, batch in enumerate(batches):
                        for ms in (unshared, shared):
                            replay(ms, batch)
                        self._check(unshared, shared, f"replay {k}")
                # the first step backend's fill, once per replay
                self.assertEqual(len(launches), len(batches))

    def _check(self, unshared, shared, what):
        for i, (want, got) in enumerate(
            zip(unshared.attn_backends, shared.attn_backends)
        ):
            where = f"{what}, step {i}"
            assert_same(self, fields(want.forward_metadata),
                        fields(got.forward_metadata), where)
            assert_same(
                self,
                fields(want.forward_metadata_spec_decode_expand),
                fields(got.forward_metadata_spec_decode_expand),
                where + " (draft tokens)",
            )
            # every buffer of the step's graphs, to the last element
            for k in KEYS:
                self.assertTrue(
                    torch.equal(
                        want.draft_decode_metadata_topk_normal[k],
                        got.draft_decode_metadata_topk_normal[k],
                    ),
                    f"{where}: {k}",
                )
                self.assertTrue(
                    torch.equal(
                        want.draft_decode_metadata_topk_expand[k],
                        got.draft_decode_metadata_topk_expand[k],
                    ),
                    f"{where}: expand {k}",
                )
            # the captured zeros of cu_seqlens_k stay
            cu = got.draft_decode_metadata_topk_normal["cu_seqlens_k"]
            self.assertFalse(bool(cu.any()), where)


def raises(name):
    def call(*args, **kwargs):
        raise AssertionError(f"{name} called")

    return call


class TestCallsAndFallbacks(CustomTestCase):
    def test_only_the_first_step_fills_the_prefix(self):
        for page_size in (1, 4):
            with self.subTest(page_size=page_size):
                ms = multi_step(page_size, pool(1))
                capture(ms, 4)
                batch = random_batch(random.Random(1), 4, 3)
                fills, normal = [], []
                orig = FlashAttentionBackend._draft_decode_prefix_metadata_fused

                def fused(self, *args):
                    fills.append(self)
                    return orig(self, *args)

                with mock.patch.multiple(
                    FlashAttentionBackend,
                    _draft_decode_prefix_metadata_fused=fused,
                    _draft_decode_prefix_metadata_torch=raises("the torch path"),
                ), mock.patch.multiple(
                    fa3_module,
                    normal_decode_set_metadata=lambda *a: normal.append(a),
                    **EAGER,
                ):
                    replay(ms, batch)
                first = ms.attn_backends[0]
                self.assertEqual(fills, [first])
                self.assertEqual(len(normal), 1)
                md = first.forward_metadata
                (seqlens, cu_k, table, r2t, rows, strided, pages, lens, shift,
                 ps) = normal[0]
                self.assertIs(seqlens, md.cache_seqlens_int32)
                self.assertIs(table, md.page_table)
                # the cumsum goes to the scratch buffer, not the graphs' one
                self.assertEqual(
                    cu_k.data_ptr(), first.draft_prefix_cu_seqlens_k_scratch.data_ptr()
                )
                self.assertEqual(cu_k.shape, (5,))
                self.assertIs(r2t, first.req_to_token)
                self.assertEqual((shift, ps), (0, page_size))
                longest = int(batch.seq_lens_cpu.max())
                self.assertEqual(pages, -(-longest // page_size))
                floored = batch.seq_lens - batch.seq_lens % page_size
                self.assertEqual(lens.tolist(), floored.tolist())
                self.assertEqual(rows.tolist(), batch.req_pool_indices.tolist())
                # every step's metadata still says the longest request
                for b in ms.attn_backends:
                    self.assertEqual(b.forward_metadata.max_seq_len_k, longest)

    def test_every_other_case_fills_each_step_with_the_torch_path(self):
        batch = random_batch(random.Random(2), 4, 3)
        for name, change in {"unfused": dict(fuse=False), **VARIANTS}.items():
            with self.subTest(name):
                change = dict(change)
                ms = multi_step(change.pop("page_size", 1), pool(2), **change)
                capture(ms, 4)
                ran = []
                with mock.patch.multiple(
                    fa3_module,
                    **{f: raises(f) for f in FUSED + ("normal_decode_set_metadata",)},
                ), mock.patch.multiple(
                    FlashAttentionBackend,
                    _draft_decode_prefix_metadata_torch=lambda s, *a: ran.append(s),
                    _draft_decode_prefix_metadata_fused=raises("the fused fill"),
                ), mock.patch.object(
                    fa3_module, "draft_decode_set_expand_metadata", lambda **k: None
                ):
                    replay(ms, batch)
                self.assertEqual(ran, ms.attn_backends)


if __name__ == "__main__":
    unittest.main()
