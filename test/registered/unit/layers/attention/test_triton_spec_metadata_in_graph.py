"""Triton builds the metadata of its target-verify and draft-extend CUDA
graphs inside the graphs, so their replays launch none of it from the host.

- init_forward_metadata_in_graph (upstream 0.5.13's name: what the graph
  runners call inside the graph they capture, with the capture's
  ForwardBatch) fills qo_indptr, kv_indptr, kv_indices and, for
  target verify, mask_indptr from the runner's static req_pool_indices and
  seq_lens: the values the host replay computed, and records the graph.
- The capture's own metadata (before the graph) is built by the same code,
  into the buffers the captured kernels read.
- A replay of such a graph leaves those buffers to the graph and still
  copies the verify's tree mask; a replay of a graph captured without the
  hook (another runner) computes them on the host as before.
- The draft's multi-step backend (draft decode graph) does the same with
  its steps' kv_indptr / kv_indices and the shared num_kv_splits.
- A tree of topk > 1 (spec v1: sglang's own 5 / 4 / 8 for a Llama
  target) builds the same metadata in its graphs: the values do not depend
  on topk, and the draft's kernels take it from the backend as before.
- With a sliding window nothing moves into the graph.
- The runners' helper calls the hook where a backend has it, and does
  nothing for an object without it; the base class's hook does nothing.
"""

import unittest
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention import triton_backend  # noqa: E402
from sglang.srt.layers.attention.base_attn_backend import (  # noqa: E402
    AttentionBackend,
    call_init_forward_metadata_in_graph,
)
from sglang.srt.layers.attention.triton_backend import (  # noqa: E402
    TritonAttnBackend,
    TritonMultiStepDraftBackend,
)
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    ForwardBatch,
    ForwardMode,
)

MAX_BS = 4
CONTEXT = 16
DRAFT_TOKENS = 4
SPEC_STEPS = 3


class KvIndicesReference:
    """create_flashinfer_kv_indices_triton on the CPU: program i copies the
    first page_kernel_lens[i] slots of request row req_pool_indices[i] to
    kv_indices[kv_indptr[i]:]."""

    def __getitem__(self, grid):
        def launch(req_to_token, req_pool_indices, page_kernel_lens, kv_indptr,
                   kv_start_idx, kv_indices, stride):
            for i in range(grid[0]):
                start, n = int(kv_indptr[i]), int(page_kernel_lens[i])
                kv_indices[start:start + n] = req_to_token[int(req_pool_indices[i]), :n]

        return launch


def _backend(sliding_window_size=None, topk=1, draft_tokens=DRAFT_TOKENS, steps=SPEC_STEPS):
    b = object.__new__(TritonAttnBackend)
    b.device = "cpu"
    b.num_draft_tokens = draft_tokens
    b.speculative_num_steps = steps
    b.sliding_window_size = sliding_window_size
    # the server's --speculative-eagle-topk, which the backend of 0001-0015
    # kept to refuse the in-graph path to a tree
    b.eagle_topk = topk
    b.req_to_token = torch.arange(8 * CONTEXT, dtype=torch.int32).reshape(8, CONTEXT)
    b.kv_indptr = torch.zeros(MAX_BS + 1, dtype=torch.int32)
    b.qo_indptr = torch.zeros(MAX_BS + 1, dtype=torch.int64)
    b.mask_indptr = torch.zeros(MAX_BS + 1, dtype=torch.int64)
    b.cuda_graph_kv_indices = torch.full((MAX_BS * CONTEXT,), -1, dtype=torch.int64)
    b.cuda_graph_custom_mask = torch.zeros(256, dtype=torch.bool)
    b.metadata_in_graph = set()
    return b


def _expected(req_pool_indices, seq_lens, tokens_per_req, verify):
    """The buffers as 0.5.12.post1's host replay fills them."""
    bs = len(seq_lens)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int64)
    kv_indptr[1:] = torch.cumsum(seq_lens, 0)
    rows = [torch.arange(CONTEXT)[:n] + int(r) * CONTEXT
            for r, n in zip(req_pool_indices.tolist(), seq_lens.tolist())]
    out = {"qo_indptr": torch.arange(0, bs * tokens_per_req + 1, tokens_per_req),
           "kv_indptr": kv_indptr, "kv_indices": torch.cat(rows)}
    if verify:
        mask = torch.zeros(bs + 1, dtype=torch.int64)
        mask[1:] = torch.cumsum(DRAFT_TOKENS * (seq_lens + DRAFT_TOKENS), 0)
        out["mask_indptr"] = mask
    return out


def _buffers(b, bs):
    n = int(b.kv_indptr[bs])
    return {"qo_indptr": b.qo_indptr[: bs + 1].clone(),
            "kv_indptr": b.kv_indptr[: bs + 1].long().clone(),
            "kv_indices": b.cuda_graph_kv_indices[:n].clone(),
            "mask_indptr": b.mask_indptr[: bs + 1].clone()}


def _capture_batch(mode, bs, req_pool_indices, seq_lens):
    """The ForwardBatch a runner captures with: its static buffers."""
    return ForwardBatch(forward_mode=mode, batch_size=bs, input_ids=None,
                        req_pool_indices=req_pool_indices, seq_lens=seq_lens,
                        out_cache_loc=None, seq_lens_sum=int(seq_lens[:bs].sum()))


class _Spec:
    def __init__(self, custom_mask):
        self.custom_mask = custom_mask


@mock.patch.object(triton_backend, "create_flashinfer_kv_indices_triton", KvIndicesReference())
class TestTritonSpecMetadataInGraph(CustomTestCase):
    def _check(self, got, want):
        for key, value in want.items():
            self.assertEqual(got[key].tolist(), value.tolist(), key)

    def _replay(self, b, mode, bs, req_pool_indices, seq_lens, spec_info=None):
        b.init_forward_metadata_replay_cuda_graph(
            bs, req_pool_indices, seq_lens, int(seq_lens.sum()), None, mode,
            spec_info, None)

    def test_verify_graph_builds_the_metadata_and_its_replay_leaves_it_alone(self):
        b = _backend()
        rpi, lens = torch.tensor([3, 1, 6]), torch.tensor([5, 9, 2])
        b.init_forward_metadata_in_graph(
            _capture_batch(ForwardMode.TARGET_VERIFY, 3, rpi, lens))
        self.assertEqual(b.metadata_in_graph, {("target_verify", 3)})
        self._check(_buffers(b, 3), _expected(rpi, lens, DRAFT_TOKENS, verify=True))
        # the next step: new lengths in the static buffers; the host replay
        # copies the tree mask and launches nothing else (the graph will)
        before = _buffers(b, 3)
        mask = torch.tensor([True, False, True, True])
        self._replay(b, ForwardMode.TARGET_VERIFY, 3, rpi, lens + 2, _Spec(mask))
        self._check(_buffers(b, 3), before)
        self.assertEqual(b.cuda_graph_custom_mask[:4].tolist(), mask.tolist())

    def test_draft_extend_graph_builds_the_metadata_and_its_replay_leaves_it_alone(self):
        b = _backend()
        rpi, lens = torch.tensor([2, 0]), torch.tensor([7, 3])
        # the draft-extend runner passes its whole buffers; the graph reads [:bs]
        full_rpi, full_lens = torch.tensor([2, 0, 5, 5]), torch.tensor([7, 3, 1, 1])
        b.init_forward_metadata_in_graph(
            _capture_batch(ForwardMode.DRAFT_EXTEND_V2, 2, full_rpi, full_lens))
        self.assertEqual(b.metadata_in_graph, {("draft_extend", 2)})
        want = _expected(rpi, lens, SPEC_STEPS + 1, verify=False)
        self._check(_buffers(b, 2), want)
        self._replay(b, ForwardMode.DRAFT_EXTEND_V2, 2, full_rpi, full_lens + 4)
        self._check(_buffers(b, 2), want)

    def test_capture_metadata_is_the_same_values_in_the_same_buffers(self):
        b = _backend()
        b.window_kv_indptr = None
        rpi, lens = torch.tensor([3, 1]), torch.tensor([5, 9])
        mask = torch.tensor([True, False])
        for mode, per_req, verify in ((ForwardMode.TARGET_VERIFY, DRAFT_TOKENS, True),
                                      (ForwardMode.DRAFT_EXTEND_V2, SPEC_STEPS + 1, False)):
            with self.subTest(mode=mode):
                b.init_forward_metadata_capture_cuda_graph(2, 2 * per_req, rpi, lens, None,
                                                           mode, _Spec(mask))
                m = b.forward_metadata
                self._check(_buffers(b, 2), _expected(rpi, lens, per_req, verify))
                self.assertEqual(m.max_extend_len, per_req)
                self.assertEqual(m.qo_indptr.data_ptr(), b.qo_indptr.data_ptr())
                self.assertEqual(m.kv_indptr.data_ptr(), b.kv_indptr.data_ptr())
                self.assertIs(m.kv_indices, b.cuda_graph_kv_indices)
                if verify:
                    self.assertEqual(m.mask_indptr.data_ptr(), b.mask_indptr.data_ptr())
                    self.assertEqual(m.custom_mask[:2].tolist(), mask.tolist())
                else:
                    self.assertIsNone(m.mask_indptr)

    def test_a_graph_captured_without_the_hook_replays_as_before(self):
        b = _backend()
        rpi, lens = torch.tensor([1, 4]), torch.tensor([6, 8])
        # another batch size was captured in the graph; this one was not
        b.init_forward_metadata_in_graph(_capture_batch(
            ForwardMode.TARGET_VERIFY, 3, torch.tensor([0, 1, 2]), torch.tensor([1, 1, 1])))
        self._replay(b, ForwardMode.TARGET_VERIFY, 2, rpi, lens, _Spec(None))
        self._check(_buffers(b, 2), _expected(rpi, lens, DRAFT_TOKENS, verify=True))
        self._replay(b, ForwardMode.DRAFT_EXTEND_V2, 2, rpi, lens)
        self._check(_buffers(b, 2), _expected(rpi, lens, SPEC_STEPS + 1, verify=False))

    def test_a_tree_builds_in_its_graphs_what_the_host_replay_builds(self):
        # sglang's own parameters for a Llama target: 5 steps, topk 4, 8
        # draft tokens (spec v1). Its target-verify and draft-extend graphs
        # compute the host replay's values, and their replays leave them be.
        rpi, lens = torch.tensor([3, 1, 0]), torch.tensor([5, 2, 7])
        full_rpi = torch.cat([rpi, torch.tensor([0])])
        full_lens = torch.cat([lens, torch.tensor([1])])  # a padded row
        mask = torch.tensor([True, False, False, True, True])
        for mode in (ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND):
            with self.subTest(mode=mode):
                graph = _backend(topk=4, draft_tokens=8, steps=5)
                host = _backend(topk=4, draft_tokens=8, steps=5)
                graph.init_forward_metadata_in_graph(_capture_batch(mode, 4, full_rpi, full_lens))
                self._replay(host, mode, 4, full_rpi, full_lens, _Spec(mask))
                self.assertEqual(len(graph.metadata_in_graph), 1)
                self.assertEqual(host.metadata_in_graph, set())
                built = _buffers(graph, 4)
                self._check(built, _buffers(host, 4))
                per_req = 8 if mode.is_target_verify() else 6
                self.assertEqual(built["qo_indptr"].tolist(), list(range(0, 4 * per_req + 1, per_req)))
                # the next step's replay copies the tree mask, nothing else
                self._replay(graph, mode, 4, full_rpi, full_lens + 3, _Spec(mask))
                self._check(_buffers(graph, 4), built)
                if mode.is_target_verify():
                    self.assertEqual(graph.cuda_graph_custom_mask[:5].tolist(), mask.tolist())

    def test_sliding_window_and_other_modes_stay_on_the_host(self):
        b = _backend(sliding_window_size=8)
        b.init_forward_metadata_in_graph(_capture_batch(
            ForwardMode.TARGET_VERIFY, 2, torch.tensor([0, 1]), torch.tensor([3, 3])))
        self.assertEqual(b.metadata_in_graph, set())
        self.assertEqual(b.kv_indptr.tolist(), [0] * (MAX_BS + 1))  # untouched
        b = _backend()
        b.init_forward_metadata_in_graph(_capture_batch(
            ForwardMode.DECODE, 2, torch.tensor([0, 1]), torch.tensor([3, 3])))
        self.assertEqual(b.metadata_in_graph, set())
        self.assertEqual(b.kv_indptr.tolist(), [0] * (MAX_BS + 1))

    def test_the_runners_helper_calls_the_hook_where_there_is_one(self):
        b = _backend()
        batch = _capture_batch(ForwardMode.TARGET_VERIFY, 1, torch.tensor([2]),
                               torch.tensor([4]))
        call_init_forward_metadata_in_graph(b, batch)
        self.assertEqual(b.metadata_in_graph, {("target_verify", 1)})
        self.assertEqual(b.kv_indptr[:2].tolist(), [0, 4])
        # an object that is no AttentionBackend, and the base class's default
        call_init_forward_metadata_in_graph(object(), batch)
        plain = object.__new__(TritonAttnBackend)
        plain.metadata_in_graph = set()
        self.assertIsNone(AttentionBackend.init_forward_metadata_in_graph(plain, batch))
        self.assertEqual(plain.metadata_in_graph, set())


class DraftKvIndicesStandIn:
    """Stands in for generate_draft_decode_kv_indices: step i's kv_indptr
    row becomes the running sum of (seq_lens + i + 1), a value that moves
    with the batch's lengths, which is all these tests need to see."""

    def __init__(self):
        self.grids = []

    def __getitem__(self, grid):
        self.grids.append(grid)
        steps, num_seqs, _ = grid

        def launch(req_pool_indices, req_to_token, seq_lens, kv_indices, kv_indptr,
                   positions, *rest):
            for i in range(steps):
                kv_indptr[i, 1:num_seqs + 1] = torch.cumsum(seq_lens[:num_seqs] + i + 1, 0)

        return launch


class _LastStep:
    """The last step backend: get_num_kv_splits writes the lengths it saw."""

    def __init__(self):
        self.cuda_graph_num_kv_splits = torch.zeros(MAX_BS * 4, dtype=torch.int32)
        self.sizes = []  # (num_kv_splits' length, the lengths') of each call

    def get_num_kv_splits(self, num_kv_splits, seq_lens):
        self.sizes.append((len(num_kv_splits), len(seq_lens)))
        num_kv_splits[: len(seq_lens)] = seq_lens


def _draft_backend():
    d = object.__new__(TritonMultiStepDraftBackend)
    d.topk, d.speculative_num_steps, d.page_size, d.pool_len = 1, SPEC_STEPS, 1, CONTEXT
    d.metadata_in_graph = set()
    d.kv_indptr = torch.zeros(SPEC_STEPS, MAX_BS + 1, dtype=torch.int32)
    d.cuda_graph_kv_indices = torch.zeros(SPEC_STEPS, MAX_BS * CONTEXT, dtype=torch.int64)
    d.attn_backends = [None] * (SPEC_STEPS - 1) + [_LastStep()]
    return d


def _draft_batch(bs, seq_lens):
    pool = mock.Mock()
    pool.req_to_token = torch.zeros(8, CONTEXT, dtype=torch.int32)
    return ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=bs, input_ids=None,
                        req_pool_indices=torch.arange(bs), seq_lens=seq_lens,
                        out_cache_loc=None, seq_lens_sum=int(seq_lens.sum()),
                        positions=seq_lens.clone(), req_to_token_pool=pool)


@mock.patch.object(triton_backend, "generate_draft_decode_kv_indices", DraftKvIndicesStandIn())
class TestTritonDraftMetadataInGraph(CustomTestCase):
    def _state(self, d, bs):
        return (d.kv_indptr[:, : bs + 1].tolist(),
                d.attn_backends[-1].cuda_graph_num_kv_splits[:bs].tolist())

    def test_draft_graph_builds_the_metadata_and_its_replay_leaves_it_alone(self):
        d = _draft_backend()
        lens = torch.tensor([5, 7])
        d.init_forward_metadata_in_graph(_draft_batch(2, lens))
        self.assertEqual(d.metadata_in_graph, {2})
        built = self._state(d, 2)
        self.assertEqual(built[0][0], [0, 6, 14])  # step 0: cumsum(lens + 1)
        self.assertEqual(built[1], [5, 7])
        d.init_forward_metadata_replay_cuda_graph(_draft_batch(2, lens + 3), 2)
        self.assertEqual(self._state(d, 2), built)  # the graph does it

    def test_a_tree_builds_in_its_graph_what_the_host_replay_builds(self):
        # topk 4: the kernel gets the tree's width in its grid and the last
        # step sizes num_kv_splits for every branch of every request.
        graph, host = _draft_backend(), _draft_backend()
        graph.topk = host.topk = 4
        lens = torch.tensor([5, 7])
        with mock.patch.object(triton_backend, "generate_draft_decode_kv_indices",
                               DraftKvIndicesStandIn()) as kernel:
            graph.init_forward_metadata_in_graph(_draft_batch(2, lens))
            self.assertEqual(kernel.grids, [(SPEC_STEPS, 2, 4)])
            host.init_forward_metadata_replay_cuda_graph(_draft_batch(2, lens), 2)
        self.assertEqual(graph.metadata_in_graph, {2})
        self.assertEqual(self._state(graph, 2), self._state(host, 2))
        self.assertEqual(graph.attn_backends[-1].sizes, [(8, 2)])
        built = self._state(graph, 2)
        graph.init_forward_metadata_replay_cuda_graph(_draft_batch(2, lens + 3), 2)
        self.assertEqual(self._state(graph, 2), built)  # the graph does it

    def test_a_draft_graph_captured_without_the_hook_replays_as_before(self):
        d = _draft_backend()
        d.init_forward_metadata_in_graph(_draft_batch(2, torch.tensor([1, 1])))
        d.init_forward_metadata_replay_cuda_graph(_draft_batch(3, torch.tensor([4, 2, 3])), 3)
        kv_indptr, splits = self._state(d, 3)
        self.assertEqual(kv_indptr[2], [0, 7, 12, 18])  # step 2: cumsum(lens + 3)
        self.assertEqual(splits, [4, 2, 3])


if __name__ == "__main__":
    unittest.main()
