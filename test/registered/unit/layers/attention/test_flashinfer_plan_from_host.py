"""flashinfer's EAGLE graph replays plan from the batch's host lengths.

flashinfer's prefill plan copies qo_indptr, kv_indptr and the last page
lengths to the host, and packing the tree mask reads its packed size back:
four device-to-host reads a verify replay, the first of which waits for the
draft's graph. A verify graph's replay builds those arrays from
seq_lens_cpu instead and packs the mask into the graph's buffers itself.

- The plan gets host arrays equal to what it read back from the device,
  and the graph's buffers (qo_indptr, kv_indptr, last page lengths, kv
  indices, packed mask and its indptr) hold the same bytes as after
  0.5.12.post1's plan, padded rows included; the plan reads nothing back.
- Only an EAGLE verify on one wrapper, in a graph with a mask buffer, with
  seq_lens_cpu and flashinfer's packing op, takes that path; any other
  replay plans as before.
- The draft graph's replay (multi-step draft backend) takes the kv_indptr
  that generate_draft_decode_kv_indices writes from the host too: equal to
  the kernel's (sglang's own kernel, run in Triton's interpreter, and a
  stand-in of it), for every step, branch and padded row, at topk 1 and
  4; the capture, an eager draft and a batch without host lengths copy it
  back as before.
"""

import json
import subprocess
import sys
import unittest
from types import SimpleNamespace
from unittest import mock

import numpy as np
import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention import flashinfer_backend  # noqa: E402
from sglang.srt.layers.attention.flashinfer_backend import (  # noqa: E402
    FlashInferAttnBackend,
    FlashInferIndicesUpdaterPrefill,
    FlashInferMultiStepDraftBackend,
    VerifyPlanHostArrays,
)
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative import eagle_info, spec_utils  # noqa: E402
from sglang.srt.speculative.eagle_info import EagleVerifyInput  # noqa: E402
from sglang.srt.speculative.spec_info import SpecInputType  # noqa: E402
from sglang.srt.utils import next_power_of_2  # noqa: E402

CONTEXT = 32
DRAFT_TOKENS = 8
MAX_BS = 4


class Dev(torch.Tensor):
    """A tensor standing for one on the GPU: reading it on the host is a
    device-to-host copy, which the plan stand-in counts."""


def dev(t):
    return t.as_subclass(Dev)


def host(t):
    return t.as_subclass(torch.Tensor)


class KvIndicesReference:
    """create_flashinfer_kv_indices_triton on the CPU."""

    def __getitem__(self, grid):
        def launch(req_to_token, req_pool_indices, lens, kv_indptr, kv_start_idx,
                   kv_indices, stride):
            for i in range(grid[0]):
                start, n = int(kv_indptr[i]), int(lens[i])
                kv_indices[start:start + n] = req_to_token[int(req_pool_indices[i]), :n]

        return launch


def pack_segments(bits, indptr, packed_indptr, out):
    """flashinfer's segment_packbits kernel, bit order "little"."""
    bits, indptr, packed_indptr = (host(t).numpy() for t in (bits, indptr, packed_indptr))
    view = host(out)
    for i in range(len(indptr) - 1):
        seg = np.packbits(bits[indptr[i]:indptr[i + 1]].astype(np.uint8), bitorder="little")
        view[packed_indptr[i]:packed_indptr[i] + len(seg)] = torch.from_numpy(seg)


class PackingModule:
    def __init__(self):
        self.calls = 0

    def segment_packbits(self, x, indptr, indptr_new, bitorder, y):
        self.assert_little = bitorder == "little"
        self.calls += 1
        pack_segments(x, indptr, indptr_new, y)


class GraphPlanStandIn:
    """BatchPrefillWithPagedKVCacheWrapper.plan of flashinfer 0.6.11 in CUDA
    graph mode, for its data: what it reads to the host (counted when the
    tensor is on the device), the host arrays it plans from, and the graph
    buffers it fills. Page size 1."""

    is_cuda_graph_enabled = True

    def __init__(self, bs):
        z = lambda n, dt=torch.int32: dev(torch.zeros(n, dtype=dt))  # noqa: E731
        self._qo_indptr_buf = z(bs + 1)
        self._paged_kv_indptr_buf = z(bs + 1)
        self._paged_kv_last_page_len_buf = z(bs)
        self._paged_kv_indices_buf = z(bs * CONTEXT)
        self._custom_mask_buf = z(bs * DRAFT_TOKENS * CONTEXT, torch.uint8)
        self._mask_indptr_buf = z(bs + 1)
        self.host_reads = 0
        self.planned_from = None

    def _to_host(self, t):
        if isinstance(t, Dev):
            self.host_reads += 1
        return host(t).clone()

    def begin_forward(self, qo_indptr, kv_indptr, kv_indices, last_page_len,
                      num_qo_heads, num_kv_heads, head_dim, page_size, custom_mask=None,
                      **kwargs):
        assert page_size == 1
        if custom_mask is not None:
            rows = qo_indptr[1:] - qo_indptr[:-1]
            cols = kv_indptr[1:] - kv_indptr[:-1] - 1 + last_page_len
            mask_indptr = torch.zeros_like(qo_indptr)
            mask_indptr[1:] = torch.cumsum(rows * cols, 0)
            packed_indptr = torch.zeros_like(mask_indptr)
            packed_indptr[1:] = torch.cumsum((mask_indptr[1:] - mask_indptr[:-1] + 7) // 8, 0)
            packed = torch.zeros(int(self._to_host(packed_indptr)[-1]), dtype=torch.uint8)
            pack_segments(custom_mask.reshape(-1), mask_indptr, packed_indptr, packed)
        qo_h, kv_h = self._to_host(qo_indptr), self._to_host(kv_indptr)
        last_h = self._to_host(last_page_len)
        self.planned_from = (qo_h.tolist(), kv_h.tolist(),
                             (kv_h[1:] - kv_h[:-1] - 1 + last_h).tolist())
        host(self._qo_indptr_buf).copy_(host(qo_indptr))
        host(self._paged_kv_indptr_buf).copy_(host(kv_indptr))
        host(self._paged_kv_last_page_len_buf).copy_(host(last_page_len))
        host(self._paged_kv_indices_buf)[: len(kv_indices)].copy_(host(kv_indices))
        if custom_mask is not None:
            host(self._custom_mask_buf)[: len(packed)].copy_(packed)
            host(self._mask_indptr_buf).copy_(host(packed_indptr))

    def buffers(self):
        return {k: host(v).tolist() for k, v in vars(self).items() if k.endswith("_buf")}


def _updater():
    u = object.__new__(FlashInferIndicesUpdaterPrefill)
    u.num_qo_heads, u.num_kv_heads, u.head_dim = 4, 2, 8
    u.q_data_type = u.data_type = torch.float16
    u.req_to_token = dev(torch.arange(8 * CONTEXT, dtype=torch.int32).reshape(8, CONTEXT))
    u.kv_indptr = [dev(torch.zeros(MAX_BS + 1, dtype=torch.int32))]
    u.qo_indptr = [dev(torch.zeros(MAX_BS + 1, dtype=torch.int32))]
    u.kv_last_page_len = dev(torch.ones(MAX_BS, dtype=torch.int32))
    u.prefill_wrapper_ragged = None
    u.sliding_window_size = None
    u.attn_backend = SimpleNamespace(dispatch_reason=None, num_wrappers=1)
    u.update = u.update_single_wrapper
    return u


def _verify_input(mask):
    spec = object.__new__(EagleVerifyInput)
    spec.spec_input_type = SpecInputType.EAGLE_VERIFY
    spec.draft_token_num = DRAFT_TOKENS
    spec.custom_mask = dev(mask)
    device_side = spec.generate_attn_arg_prefill
    # its outputs live on the device, as on a GPU
    spec.generate_attn_arg_prefill = lambda *a: tuple(dev(host(t)) for t in device_side(*a))
    return spec


def _tree_mask(seq_lens, seed):
    g = torch.Generator().manual_seed(seed)
    n = sum(DRAFT_TOKENS * (int(s) + DRAFT_TOKENS) for s in seq_lens)
    return torch.rand(n, generator=g) < 0.5


@mock.patch.object(eagle_info, "create_flashinfer_kv_indices_triton", KvIndicesReference())
class TestVerifyPlanFromHost(CustomTestCase):
    def _both_paths(self, rpi, seq_lens, raw_bs):
        """0.5.12.post1's plan and the host-length plan on one batch: a graph
        of len(seq_lens) rows whose last rows are padding (length 1), and
        the mask of the raw_bs real requests."""
        bs, total = len(seq_lens), int(sum(seq_lens))
        mask = _tree_mask(seq_lens[:raw_bs], seed=bs)
        old, new = GraphPlanStandIn(bs), GraphPlanStandIn(bs)
        packing = PackingModule()
        u = _updater()
        u.update(dev(rpi), dev(seq_lens), seq_lens, total, prefix_lens=None,
                 prefill_wrappers=[old], use_ragged=False, encoder_lens=None,
                 spec_info=_verify_input(mask))
        with mock.patch.object(flashinfer_backend, "_mask_packing_module", lambda: packing):
            self.assertTrue(u.can_plan_verify_from_host([new], _verify_input(mask), seq_lens))
            u.update_verify_from_host(dev(rpi), dev(seq_lens), seq_lens, total, [new],
                                      _verify_input(mask))
        return old, new, packing

    def test_the_plan_and_the_graph_buffers_are_those_of_the_device_path(self):
        for rpi, seq_lens, raw_bs in (
            (torch.tensor([3]), torch.tensor([5]), 1),
            (torch.tensor([2, 0, 6]), torch.tensor([9, 3, 17]), 3),
            # a graph of four rows serving two requests: rows 3-4 padded
            (torch.tensor([1, 4, 0, 0]), torch.tensor([7, 12, 1, 1]), 2),
        ):
            with self.subTest(bs=len(seq_lens)):
                old, new, packing = self._both_paths(rpi, seq_lens, raw_bs)
                self.assertEqual(new.planned_from, old.planned_from)
                self.assertEqual(new.buffers(), old.buffers())
                self.assertEqual(packing.calls, 1)
                self.assertTrue(packing.assert_little)
                # 0.5.12.post1: qo_indptr, kv_indptr, last page lengths and
                # the packed size read back; the host path: nothing
                self.assertEqual(old.host_reads, 4)
                self.assertEqual(new.host_reads, 0)

    def test_host_arrays(self):
        a = VerifyPlanHostArrays.build(torch.tensor([5, 2], dtype=torch.int64), 3)
        self.assertEqual(a.qo_indptr.tolist(), [0, 3, 6])
        self.assertEqual(a.kv_indptr.tolist(), [0, 8, 13])
        self.assertEqual(a.last_page_len.tolist(), [1, 1])
        self.assertEqual(a.mask_indptr.tolist(), [0, 24, 39])
        self.assertEqual(a.packed_mask_indptr.tolist(), [0, 3, 5])
        for t in (a.qo_indptr, a.kv_indptr, a.last_page_len, a.mask_indptr,
                  a.packed_mask_indptr):
            self.assertEqual(t.dtype, torch.int32)


class TestWhoPlansFromHost(CustomTestCase):
    def setUp(self):
        self.packing = mock.patch.object(flashinfer_backend, "_mask_packing_module",
                                         lambda: PackingModule())
        self.packing.start()
        self.addCleanup(self.packing.stop)
        self.u = _updater()
        self.wrapper = GraphPlanStandIn(2)
        self.lens = torch.tensor([4, 6])
        self.spec = _verify_input(_tree_mask([4, 6], seed=0))

    def test_an_eagle_verify_graph_with_host_lengths(self):
        self.assertTrue(self.u.can_plan_verify_from_host([self.wrapper], self.spec, self.lens))

    def test_anything_else_plans_as_before(self):
        u, w, lens, spec = self.u, self.wrapper, self.lens, self.spec
        draft_extend = SimpleNamespace(spec_input_type=SpecInputType.EAGLE_DRAFT_EXTEND)
        eager = SimpleNamespace(is_cuda_graph_enabled=False, _custom_mask_buf=None)
        no_mask = GraphPlanStandIn(2)
        no_mask._custom_mask_buf = None
        renamed = GraphPlanStandIn(2)  # a flashinfer with other private names
        del renamed._mask_indptr_buf
        cases = {
            "no host lengths": ([w], spec, None),
            "no spec input": ([w], None, lens),
            "draft extend": ([w], draft_extend, lens),
            "not a graph": ([eager], spec, lens),
            "graph without a mask buffer": ([no_mask], spec, lens),
            "wrapper without a mask indptr buffer": ([renamed], spec, lens),
            "two wrappers": ([w, w], spec, lens),
        }
        for name, args in cases.items():
            with self.subTest(name):
                self.assertFalse(u.can_plan_verify_from_host(*args))
        for name, update in (("sliding window", u.update_sliding_window),
                             ("cross attention", u.update_cross_attention)):
            with self.subTest(name):
                u.update = update
                self.assertFalse(u.can_plan_verify_from_host([w], spec, lens))
        u.update = u.update_single_wrapper
        with mock.patch.object(flashinfer_backend, "_mask_packing_module", lambda: None):
            self.assertFalse(u.can_plan_verify_from_host([w], spec, lens))

    def test_the_replay_takes_the_host_path_only_where_it_may(self):
        for allowed in (True, False):
            with self.subTest(allowed=allowed):
                b = object.__new__(FlashInferAttnBackend)
                b.indices_updater_prefill = mock.Mock()
                b.indices_updater_prefill.can_plan_verify_from_host.return_value = allowed
                b.prefill_cuda_graph_metadata = {2: [self.wrapper]}
                b.init_forward_metadata_replay_cuda_graph(
                    2, torch.tensor([0, 1]), self.lens, 10, None,
                    ForwardMode.TARGET_VERIFY, self.spec, self.lens)
                updater = b.indices_updater_prefill
                self.assertEqual(updater.update_verify_from_host.called, allowed)
                self.assertEqual(updater.update.called, not allowed)


class DraftKvIndicesReference:
    """generate_draft_decode_kv_indices on the CPU, for what it writes to
    kv_indptr: program (step, request, branch) stores, at entry z = request
    * topk + branch (z = 0 stores the last entry, num_seqs * topk, instead),
    the sum of the first z draft positions plus z * (step + 1)."""

    def __getitem__(self, grid):
        steps, num_seqs, topk = grid

        def launch(req_pool_indices, req_to_token, seq_lens, kv_indices, kv_indptr,
                   positions, *args):
            view = host(kv_indptr)
            pos = host(positions)
            for i in range(steps):
                for bid in range(num_seqs):
                    for k in range(topk):
                        z = bid * topk + k or num_seqs * topk
                        view[i, z] = int(pos[:z].sum()) + z * (i + 1)

        return launch


class CountingDev(torch.Tensor):
    reads = 0

    def cpu(self):
        CountingDev.reads += 1
        return self.as_subclass(torch.Tensor).clone()


STEPS = 5


def _draft_backend(topk):
    d = object.__new__(FlashInferMultiStepDraftBackend)
    d.topk, d.speculative_num_steps, d.page_size = topk, STEPS, 1
    d.pool_len = CONTEXT
    d.kv_indptr = torch.zeros(STEPS, MAX_BS * topk + 1, dtype=torch.int32).as_subclass(
        CountingDev)
    d.generate_draft_decode_kv_indices = DraftKvIndicesReference()
    d.cuda_graph_kv_indices = torch.zeros(STEPS, MAX_BS * topk * CONTEXT, dtype=torch.int32)
    return d


def _draft_batch(seq_lens, num_reqs, topk, host_lengths=True):
    """A draft graph's batch as the runner hands it over: num_seqs rows, the
    first num_reqs the requests (positions = their lengths, once a branch),
    the rest padding (length 1, position 0); the spec input has a row a
    request."""
    num_seqs = len(seq_lens)
    positions = torch.zeros(num_seqs * topk, dtype=torch.int64)
    positions[: num_reqs * topk] = torch.tensor(seq_lens[:num_reqs]).repeat_interleave(topk)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    return SimpleNamespace(
        batch_size=num_seqs, seq_lens_sum=int(lens.sum()),
        req_pool_indices=torch.arange(num_seqs),
        req_to_token_pool=SimpleNamespace(req_to_token=torch.zeros(8, CONTEXT)),
        seq_lens=lens, positions=positions,
        seq_lens_cpu=lens.clone() if host_lengths else None,
        spec_info=SimpleNamespace(topk_p=torch.zeros(num_reqs, topk),
                                  is_draft_input=lambda: True),
    )


def _planned_indptrs(d, batch, **kwargs):
    """The host kv_indptr each draft step's plan got."""
    got = []
    CountingDev.reads = 0
    d.common_template(batch, d.cuda_graph_kv_indices,
                      lambda i, fb: got.append(
                          flashinfer_backend.global_override_indptr_cpu.tolist()),
                      **kwargs)
    return got, CountingDev.reads


class TestDraftIndptrFromHost(CustomTestCase):
    def test_the_host_indptr_is_the_kernels(self):
        for topk in (1, 4):
            for seq_lens, num_reqs in (([9], 1), ([5, 11, 3], 3), ([6, 2, 1, 1], 2)):
                with self.subTest(topk=topk, rows=len(seq_lens), reqs=num_reqs):
                    d = _draft_backend(topk)
                    want, reads = _planned_indptrs(d, _draft_batch(seq_lens, num_reqs, topk))
                    self.assertEqual(reads, 1)  # 0.5.12.post1's one read-back
                    got, reads = _planned_indptrs(
                        _draft_backend(topk), _draft_batch(seq_lens, num_reqs, topk),
                        indptr_from_host=True)
                    self.assertEqual(reads, 0)
                    self.assertEqual(got, want)
                    self.assertEqual(len(got), STEPS - 1)

    def test_the_replay_plans_from_the_host_and_nothing_else_does(self):
        d = _draft_backend(4)
        d.attn_backends = [mock.Mock() for _ in range(STEPS - 1)]
        batch = _draft_batch([6, 2, 1, 1], 2, 4)
        CountingDev.reads = 0
        d.init_forward_metadata_replay_cuda_graph(batch, 4)
        self.assertEqual(CountingDev.reads, 0)
        d.init_forward_metadata_capture_cuda_graph(batch)
        self.assertEqual(CountingDev.reads, 1)

    def test_without_what_the_host_needs_it_reads_back(self):
        cases = {
            "no host lengths": (_draft_batch([5, 3], 2, 4, host_lengths=False), 1),
            "no spec rows": (_draft_batch([5, 3], 2, 4), None),
            "more requests than rows": (_draft_batch([5, 3], 2, 4), 3),
        }
        for name, (batch, num_reqs) in cases.items():
            with self.subTest(name):
                if num_reqs is None:
                    del batch.spec_info.topk_p
                elif name != "no host lengths":
                    batch.spec_info.topk_p = torch.zeros(num_reqs, 4)
                self.assertIsNone(_draft_backend(4).draft_kv_indptr_on_host(batch))
        d = _draft_backend(4)
        d.page_size = 16
        self.assertIsNone(d.draft_kv_indptr_on_host(_draft_batch([5, 3], 2, 4)))


# (topk, seq_lens, requests with a draft) of the kernel comparison, each
# with DRAFT_STEPS draft steps
DRAFT_STEPS = 5
KERNEL_CASES = [
    (topk, seq_lens, num_reqs)
    for topk in (1, 4)
    for seq_lens, num_reqs in (([9], 1), ([5, 11, 3], 3), ([6, 2, 1, 1], 2))
]

# Run in a process of its own, as Triton reads TRITON_INTERPRET when a
# kernel is defined: the kernel alone, compiled from sglang's source file
# (importing sglang there would cost that process most of the test's time).
# Takes each case with its steps and its power-of-two bounds (requests,
# steps, draft rows) and prints its kv_indptr as the kernel wrote it.
INTERPRETED = r"""
import ast, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
import triton
import triton.language as tl

path, name, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tree = ast.parse(open(path).read())
node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
namespace = {"triton": triton, "tl": tl}
exec(compile(ast.Module([node], []), path, "exec"), namespace)
kernel = namespace[name]

written = []
for topk, seq_lens, num_reqs, steps, bounds in cases:
    num_seqs, n = len(seq_lens), len(seq_lens) * topk
    kv_indptr = torch.zeros(steps, 8 * topk + 1, dtype=torch.int32)
    kv_indices = torch.zeros(steps, 8 * topk * 32, dtype=torch.int32)
    positions = torch.zeros(n, dtype=torch.int64)
    positions[: num_reqs * topk] = torch.tensor(seq_lens[:num_reqs]).repeat_interleave(topk)
    kernel[(steps, num_seqs, topk)](
        torch.arange(num_seqs), torch.arange(8 * 32, dtype=torch.int32).reshape(8, 32),
        torch.tensor(seq_lens, dtype=torch.int32), kv_indices, kv_indptr, positions, 32,
        kv_indices.shape[1], kv_indptr.shape[1], *bounds, 1)
    written.append(kv_indptr[:, : n + 1].tolist())
print(json.dumps(written))
"""


class TestDraftIndptrAgainstTheKernel(CustomTestCase):
    def test_the_kernel_in_tritons_interpreter_writes_the_host_indptr(self):
        try:
            import triton  # noqa: F401
        except ImportError:
            self.skipTest("no triton")
        cases = [
            (topk, seq_lens, num_reqs, DRAFT_STEPS,
             [next_power_of_2(x) for x in (len(seq_lens), DRAFT_STEPS, len(seq_lens) * topk)])
            for topk, seq_lens, num_reqs in KERNEL_CASES
        ]
        res = subprocess.run(
            [sys.executable, "-c", INTERPRETED, spec_utils.__file__,
             "generate_draft_decode_kv_indices", json.dumps(cases)],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(res.returncode, 0, res.stdout[-2000:] + res.stderr[-3000:])
        written = json.loads(res.stdout.strip().splitlines()[-1])
        self.assertEqual(len(written), len(KERNEL_CASES))
        for (topk, seq_lens, num_reqs), kernel_indptr in zip(KERNEL_CASES, written):
            d = object.__new__(FlashInferMultiStepDraftBackend)
            d.topk, d.speculative_num_steps, d.page_size = topk, DRAFT_STEPS, 1
            host = d.draft_kv_indptr_on_host(SimpleNamespace(
                batch_size=len(seq_lens),
                seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32),
                spec_info=SimpleNamespace(topk_p=torch.zeros(num_reqs, topk))))
            self.assertEqual(host.tolist(), kernel_indptr, (topk, seq_lens))


if __name__ == "__main__":
    unittest.main()
