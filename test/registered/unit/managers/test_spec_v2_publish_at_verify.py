"""Patch P1: the spec v2 decode step must not make the host wait for the
previous forward.

The schedule stream waits on the batch's publish event (a stream wait).
Two things keep that from turning into a host wait on the whole previous
forward (measured on an H200, docs/patches/0003-*.md):
1. the worker publishes the new lengths right after the verify, through the
   scheduler's `on_verify_done` hook, before the draft extend;
2. `EagleDraftInputV2Mixin.prepare_for_decode` copies its kv lengths to the
   device without blocking (a blocking copy synchronizes the schedule
   stream, and with it the publish wait queued there).
CPU tensors stand in for device ones.
"""

import contextlib
import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.managers import overlap_utils  # noqa: E402
from sglang.srt.managers.overlap_utils import FutureMap  # noqa: E402
from sglang.srt.mem_cache import common as mem_common  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative import (  # noqa: E402
    eagle_info_v2,
    eagle_worker_v2,
    multi_layer_eagle_worker_v2,
    spec_utils,
)
from sglang.srt.speculative.eagle_info import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from schedule_batch_fakes import (  # noqa: E402
    FakeTreeCache,
    fake_req_to_token_pool,
    run_batch_scheduler,
    spec_v2_decode_batch,
)

EAGLE = SpeculativeAlgorithm.EAGLE3
WORKERS = (eagle_worker_v2.EAGLEWorkerV2, multi_layer_eagle_worker_v2.MultiLayerEagleWorkerV2)


def _draft_input(n, new_seq_lens):
    return EagleDraftInput(
        topk_p=torch.zeros((n, 1)),
        topk_index=torch.zeros((n, 1), dtype=torch.int64),
        bonus_tokens=torch.zeros(n, dtype=torch.int32),
        hidden_states=torch.zeros((n, 2)),
        new_seq_lens=new_seq_lens,
    )


class _Steps:
    """The parts of a spec v2 decode, each noting itself in `log`."""

    def __init__(self, new_seq_lens, on_draft_extend=None):
        self.log = []
        self.new_seq_lens = new_seq_lens
        self.on_draft_extend = on_draft_extend or (lambda: None)

    def draft(self, batch):
        self.log.append("draft")
        return SimpleNamespace(is_verify_input=lambda: True)

    def verify(self, batch):
        self.log.append("verify")
        n = len(self.new_seq_lens)
        return SimpleNamespace(next_draft_input=_draft_input(n, self.new_seq_lens))

    def draft_extend(self, batch, batch_output):
        self.log.append("draft_extend")
        self.on_draft_extend()


def _worker(cls, steps):
    """A real spec v2 worker whose model calls are `steps`."""
    worker = object.__new__(cls)
    worker._draft_worker = SimpleNamespace(
        draft=steps.draft,
        _draft_extend_for_decode=steps.draft_extend,
        draft_tp_context=lambda group: contextlib.nullcontext(),
        draft_runner=SimpleNamespace(tp_group=None),
    )
    worker.plan_stream = None
    worker.verify = steps.verify
    return worker


class TestWorkerCallsHookBetweenVerifyAndDraftExtend(CustomTestCase):
    def setUp(self):
        for module in (eagle_worker_v2, multi_layer_eagle_worker_v2):
            for name in ("speculative_moe_backend_context", "speculative_moe_a2a_backend_context"):
                if hasattr(module, name):
                    p = mock.patch.object(module, name, contextlib.nullcontext)
                    p.start()
                    self.addCleanup(p.stop)

    def _decode_batch(self):
        batch = spec_v2_decode_batch([1, 2], [5, 6], algo=EAGLE)
        batch.spec_info = EagleDraftInput()  # a decode carries its draft input
        return batch

    def test_hook_gets_the_verified_lengths_before_the_draft_extend(self):
        for cls in WORKERS:
            with self.subTest(worker=cls.__name__):
                self.assertTrue(cls.publishes_on_verify_done)
                steps = _Steps(torch.tensor([7, 9]))
                got = []

                def hook(new_seq_lens):
                    steps.log.append("hook")
                    got.append(new_seq_lens.tolist())

                _worker(cls, steps).forward_batch_generation(
                    self._decode_batch(), on_verify_done=hook
                )
                self.assertEqual(steps.log, ["draft", "verify", "hook", "draft_extend"])
                self.assertEqual(got, [[7, 9]])

    def test_without_hook_the_decode_runs_as_before(self):
        for cls in WORKERS:
            with self.subTest(worker=cls.__name__):
                steps = _Steps(torch.tensor([7, 9]))
                _worker(cls, steps).forward_batch_generation(self._decode_batch())
                self.assertEqual(steps.log, ["draft", "verify", "draft_extend"])


class _FakeResult(SimpleNamespace):
    def copy_to_cpu(self, **kwargs):
        pass


class _DecodeWorker:
    """Verify gives `new_seq_lens`; at the draft extend it notes what the
    relay holds for the batch's slots (what the next schedule could read)."""

    publishes_on_verify_done = True

    def __init__(self, fm, new_seq_lens):
        self.fm, self.new_seq_lens = fm, new_seq_lens
        self.relay_at_draft_extend = None

    def forward_batch_generation(self, batch, on_verify_done=None):
        if on_verify_done is not None:
            on_verify_done(self.new_seq_lens)
        slots = batch.req_pool_indices
        self.relay_at_draft_extend = self.fm.new_seq_lens_buf[slots].tolist()
        n = len(self.new_seq_lens)
        return _FakeResult(
            next_draft_input=_draft_input(n, self.new_seq_lens),
            delay_sample_func=None,
            next_token_ids=torch.zeros(n, dtype=torch.int64),
        )


class _WorkerWithoutHook(_DecodeWorker):
    publishes_on_verify_done = False

    def forward_batch_generation(self, batch):  # no hook parameter at all
        return super().forward_batch_generation(batch)


class _CopyingSamplingInfo(SimpleNamespace):
    def copy_for_forward(self):
        return _CopyingSamplingInfo()


@mock.patch.object(overlap_utils, "spec_need_hidden_states", lambda *a: False)
class TestRunBatchPublishesAtVerify(CustomTestCase):
    def _run(self, worker_cls):
        fm = FutureMap(torch.device("cpu"), EAGLE, fake_req_to_token_pool())
        batch = spec_v2_decode_batch([3, 5], [10, 20], algo=EAGLE)
        batch.sampling_info = _CopyingSamplingInfo()
        batch.return_logprob = batch.return_hidden_states = False
        # The prefill before this decode stashed its draft extras.
        fm.stash(batch.spec_info.future_indices, _draft_input(2, batch.seq_lens))
        worker = worker_cls(fm, torch.tensor([12, 23]))
        run_batch_scheduler(worker, fm, overlap=True).run_batch(batch)
        return fm, batch, worker

    def test_lengths_are_in_the_relay_before_the_draft_extend(self):
        fm, batch, worker = self._run(_DecodeWorker)
        self.assertEqual(worker.relay_at_draft_extend, [12, 23])
        self.assertTrue(batch.spec_info.future_indices.seq_lens_pending)
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens.tolist(), [12, 23])

    def test_worker_without_the_hook_publishes_after_the_forward(self):
        fm, batch, worker = self._run(_WorkerWithoutHook)
        self.assertEqual(worker.relay_at_draft_extend, [0, 0])  # none at draft extend
        self.assertTrue(batch.spec_info.future_indices.seq_lens_pending)
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens.tolist(), [12, 23])


class TestPrepareForDecodeCopiesWithoutBlocking(CustomTestCase):
    def setUp(self):
        self.assigned = []
        patches = [
            mock.patch.object(eagle_info_v2, "get_alloc_len_per_decode", lambda: 2),
            mock.patch.object(mem_common, "evict_from_tree_cache", lambda *a: None),
            mock.patch.object(
                spec_utils,
                "assign_req_to_token_pool_func",
                lambda pool_idx, table, cur, nxt, loc, bs: self.assigned.append(
                    (cur.tolist(), nxt.tolist())
                ),
            ),
        ]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)

    def _prepare(self, page_size):
        batch = spec_v2_decode_batch([1, 2], [5, 6], algo=EAGLE)
        batch.tree_cache = FakeTreeCache()
        batch.token_to_kv_pool_allocator = batch.tree_cache.token_to_kv_pool_allocator
        batch.token_to_kv_pool_allocator.page_size = page_size
        batch.req_to_token_pool = fake_req_to_token_pool()
        for req, n in zip(batch.reqs, (5, 6)):
            req.kv_committed_len = req.kv_allocated_len = n
        copies = []
        real_to = torch.Tensor.to

        def to(tensor, *args, **kwargs):
            if "device" in kwargs or (args and not isinstance(args[0], torch.dtype)):
                copies.append(kwargs.get("non_blocking", False))
            return real_to(tensor, *args, **kwargs)

        with mock.patch.object(torch.Tensor, "to", to):
            batch.prepare_for_decode()
        self.assertEqual(batch.forward_mode, ForwardMode.DECODE)
        # cur = allocated before this step; nxt = committed + 2 * alloc_len_per_decode
        self.assertEqual(self.assigned, [([5, 6], [9, 10])])
        self.assertGreaterEqual(len(copies), 2)
        self.assertTrue(all(copies), f"blocking device copies: {copies}")

    def test_every_host_to_device_copy_is_non_blocking(self):
        self._prepare(page_size=1)

    def test_paged_allocation_gets_the_device_lengths(self):
        seen = {}

        def alloc_paged(tree_cache, cur, cur_cpu, nxt, nxt_cpu, last_loc, n):
            seen.update(cur=cur.tolist(), nxt=nxt.tolist(), n=n)
            return torch.arange(n, dtype=torch.int64)

        with mock.patch.object(
            eagle_info_v2, "get_last_loc", lambda table, pool_idx, cur: cur - 1
        ), mock.patch.object(eagle_info_v2, "alloc_paged_token_slots_extend", alloc_paged):
            self._prepare(page_size=2)
        self.assertEqual(seen, {"cur": [5, 6], "nxt": [9, 10], "n": 8})


if __name__ == "__main__":
    unittest.main()
