"""Patch P1: FutureMap is a relay indexed by request-pool slot.

The forward writes (`publish` new seq_lens, `stash` sampled tokens or draft
extras) into the rows of the batch's req_pool_indices; the next iteration
reads them back by the same slots (`resolve_seq_lens_cpu` on the schedule
side, `resolve_future` on the forward stream). CPU tensors stand in for the
device ones; on CPU there are no events, so a publish records none.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.managers import overlap_utils  # noqa: E402
from sglang.srt.managers.io_struct import PauseGenerationReqInput  # noqa: E402
from sglang.srt.managers.overlap_utils import FutureIndices, FutureMap  # noqa: E402
from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative.eagle_info import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

POOL_SIZE = 6  # usable slots 1..6; row 0 is the padding row
TOPK, HIDDEN = 2, 3


def _pool():
    # ReqToTokenPool allocates size + 1 rows (padding row 0).
    return SimpleNamespace(
        size=POOL_SIZE, req_to_token=torch.zeros((POOL_SIZE + 1, 8), dtype=torch.int32)
    )


def _fm(spec=False):
    algo = SpeculativeAlgorithm.EAGLE if spec else SpeculativeAlgorithm.NONE
    return FutureMap(torch.device("cpu"), algo, _pool())


def _idx(*slots):
    return FutureIndices(indices=torch.tensor(slots, dtype=torch.int64))


def _draft(slots, base):
    n = len(slots)
    return EagleDraftInput(
        topk_p=torch.full((n, TOPK), float(base)) + torch.arange(n)[:, None],
        topk_index=torch.arange(n * TOPK).reshape(n, TOPK) + base,
        bonus_tokens=torch.arange(n, dtype=torch.int32) + base,
        hidden_states=torch.full((n, HIDDEN), float(base)) + torch.arange(n)[:, None],
        new_seq_lens=torch.arange(n) + base,
    )


def _spec_batch(fi, seq_lens):
    spec_info = EagleDraftInput()
    spec_info.future_indices = fi
    t = torch.tensor(seq_lens, dtype=torch.int64)
    return ScheduleBatch(
        reqs=[],
        forward_mode=ForwardMode.DECODE,
        enable_overlap=True,
        spec_algorithm=SpeculativeAlgorithm.EAGLE,
        req_pool_indices=fi.indices.clone(),
        seq_lens=t.clone(),
        seq_lens_cpu=t.clone(),
        seq_lens_sum=int(t.sum()),
        spec_info=spec_info,
    )


@mock.patch.object(overlap_utils, "spec_need_hidden_states", lambda *a: True)
class TestFutureMapRelay(CustomTestCase):
    def test_buffers_sized_by_request_pool(self):
        fm = _fm()
        self.assertEqual(fm.output_tokens_buf.shape[0], POOL_SIZE + 1)
        self.assertEqual(fm.new_seq_lens_buf.shape[0], POOL_SIZE + 1)
        self.assertFalse(hasattr(fm, "future_ct"))
        self.assertFalse(hasattr(FutureIndices(torch.tensor([1])), "interval"))

    def test_publish_resolve_round_trip_by_pool_index(self):
        fm = _fm(spec=True)
        fi = _idx(5, 2)
        fm.publish(fi, torch.tensor([17, 9], dtype=torch.int32))
        self.assertTrue(fi.seq_lens_pending)
        self.assertEqual(fm.new_seq_lens_buf[[5, 2]].tolist(), [17, 9])
        self.assertEqual(fi.publish_events, ())  # no events on CPU
        batch = _spec_batch(fi, [16, 8])
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens_cpu.tolist(), [17, 9])
        self.assertEqual(batch.seq_lens_sum, 26)
        self.assertFalse(fi.seq_lens_pending)

    def test_resolve_is_idempotent(self):
        fm = _fm(spec=True)
        fi = _idx(1, 3)
        fm.publish(fi, torch.tensor([4, 6]))
        batch = _spec_batch(fi, [3, 5])
        fm.resolve_seq_lens_cpu(batch)
        # A later write to the slots (not a forward of this batch) must not
        # be picked up by a second resolve in the same iteration.
        fm.new_seq_lens_buf[[1, 3]] = torch.tensor([100, 100])
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens_cpu.tolist(), [4, 6])
        self.assertEqual(batch.seq_lens_sum, 10)

    def test_known_lengths_are_not_pending(self):
        # Prefill / prebuilt: the schedule holds the lengths already.
        fm = _fm(spec=True)
        fi = _idx(2)
        fm.publish(fi, torch.tensor([7]), relayed=False)
        self.assertFalse(fi.seq_lens_pending)
        self.assertEqual(fm.new_seq_lens_buf[2].item(), 7)
        batch = _spec_batch(fi, [7])
        batch.seq_lens_cpu = torch.tensor([7])
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens_cpu.tolist(), [7])

    def test_filtered_and_merged_batches_gather_their_current_slots(self):
        fm = _fm(spec=True)
        a, b = _idx(1, 4, 6), _idx(3)
        fm.publish(a, torch.tensor([10, 40, 60]))
        fm.publish(b, torch.tensor([30]), relayed=False)
        draft_a = EagleDraftInput()
        draft_a.future_indices = a
        draft_a.filter_batch(torch.tensor([0, 2]))  # drop slot 4
        draft_b = EagleDraftInput()
        draft_b.future_indices = b
        draft_a.merge_batch(draft_b)
        self.assertTrue(draft_a.future_indices.seq_lens_pending)
        batch = _spec_batch(draft_a.future_indices, [0, 0, 0])
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens_cpu.tolist(), [10, 60, 30])

    def test_dp_idle_empty_indices_are_a_no_op(self):
        for spec in (False, True):
            fm = _fm(spec=spec)
            before_tokens = fm.output_tokens_buf.clone()
            before_lens = fm.new_seq_lens_buf.clone()
            empty = FutureIndices(indices=torch.empty((0,), dtype=torch.int64))
            fm.publish(empty, torch.empty((0,), dtype=torch.int64))
            self.assertFalse(empty.seq_lens_pending)
            if spec:
                # An idle stub has no rows to infer buffer shapes from.
                fm.stash(empty, EagleDraftInput.create_idle_input(
                    torch.device("cpu"), HIDDEN, torch.float32, TOPK, None
                ))
                self.assertFalse(fm.buf_initialized)
            else:
                fm.stash(empty, torch.empty((0,), dtype=torch.int64))
            self.assertTrue(torch.equal(fm.output_tokens_buf, before_tokens))
            self.assertTrue(torch.equal(fm.new_seq_lens_buf, before_lens))
            batch = _spec_batch(empty, [])
            fm.resolve_seq_lens_cpu(batch)
            self.assertEqual(batch.seq_lens_cpu.tolist(), [])
            self.assertEqual(batch.seq_lens_sum, 0)
        # resolve_future on an idle spec batch reads nothing.
        fm = _fm(spec=True)
        fm.resolve_future(_spec_batch(empty, []))

    def test_sentinel_input_ids_resolve_to_stashed_tokens(self):
        fm = _fm()
        fi = _idx(4, 1, 6)
        batch = ScheduleBatch(reqs=[], forward_mode=ForwardMode.DECODE)
        _set_sentinel(fm, batch, fi)
        self.assertEqual(batch.output_ids.tolist(), [-4, -1, -6])
        fm.stash(fi, torch.tensor([101, 0, 103], dtype=torch.int32))
        # prepare_for_decode moves output_ids into input_ids; a mixed batch
        # puts real prefill tokens (>= 0, including 0) in front.
        batch.input_ids = torch.cat([torch.tensor([0, 7]), batch.output_ids])
        fm.resolve_future(batch)
        self.assertEqual(batch.input_ids.tolist(), [0, 7, 101, 0, 103])

    def test_slot_reuse_reads_the_new_owner(self):
        fm = _fm()
        fm.stash(_idx(2, 3), torch.tensor([11, 12]))
        # The request in slot 2 finished; a new request took slot 2 and its
        # prefill forward stashed its first token.
        fm.stash(_idx(2), torch.tensor([55]))
        batch = ScheduleBatch(reqs=[], forward_mode=ForwardMode.DECODE)
        batch.input_ids = torch.tensor([-2, -3])
        fm.resolve_future(batch)
        self.assertEqual(batch.input_ids.tolist(), [55, 12])

    def test_slot_zero_padding_rows_are_harmless(self):
        fm = _fm(spec=True)
        fm.publish(_idx(1, 2), torch.tensor([5, 6]))
        fm.stash(_idx(1, 2), _draft([1, 2], 10))
        # A CUDA-graph padded batch writes and reads padding row 0.
        fm.publish(_idx(1, 2, 0, 0), torch.tensor([7, 8, 999, 999]))
        fm.stash(_idx(1, 2, 0, 0), _draft([1, 2, 0, 0], 20))
        self.assertEqual(fm.new_seq_lens_buf[[1, 2]].tolist(), [7, 8])
        self.assertEqual(fm.bonus_tokens_buf[[1, 2]].tolist(), [20, 21])
        # Non-spec: token id sentinel -0 == 0 is a real token, never resolved,
        # and slot 0 is never handed to a request.
        fm = _fm()
        fm.stash(_idx(0, 3), torch.tensor([77, 33]))
        batch = ScheduleBatch(reqs=[], forward_mode=ForwardMode.DECODE)
        batch.input_ids = torch.tensor([0, -3])
        fm.resolve_future(batch)
        self.assertEqual(batch.input_ids.tolist(), [0, 33])

    def test_spec_extras_stash_and_resolve(self):
        fm = _fm(spec=True)
        self.assertFalse(fm.buf_initialized)
        src = _draft([3, 5], 40)
        fm.stash(_idx(3, 5), src)
        fm.publish(_idx(3, 5), src.new_seq_lens)
        self.assertTrue(fm.buf_initialized)
        self.assertEqual(fm.topk_p_buf.shape, (POOL_SIZE + 1, TOPK))
        self.assertEqual(fm.hidden_states_buf.shape, (POOL_SIZE + 1, HIDDEN))
        # Next iteration: the batch is now [slot 5, slot 3].
        batch = _spec_batch(_idx(5, 3), [0, 0])
        fm.resolve_future(batch)
        d = batch.spec_info
        self.assertTrue(torch.equal(d.topk_p, src.topk_p[[1, 0]]))
        self.assertTrue(torch.equal(d.topk_index, src.topk_index[[1, 0]]))
        self.assertEqual(d.bonus_tokens.tolist(), [41, 40])
        self.assertTrue(torch.equal(d.hidden_states, src.hidden_states[[1, 0]]))

    def test_stash_casts_to_the_buffer_dtype(self):
        # Seen on an H200: the prefill's draft input sized bonus_tokens_buf
        # as int64, a verify's bonus_tokens were int32, and the index-put of
        # the first overlap EAGLE3 decode raised (dtypes must match).
        fm = _fm(spec=True)
        first = _draft([3], 40)
        first.bonus_tokens = first.bonus_tokens.to(torch.int64)
        fm.stash(_idx(3), first)
        self.assertEqual(fm.bonus_tokens_buf.dtype, torch.int64)
        later = _draft([3, 5], 50)
        self.assertEqual(later.bonus_tokens.dtype, torch.int32)
        later.topk_p = later.topk_p.to(torch.float64)
        fm.stash(_idx(3, 5), later)
        batch = _spec_batch(_idx(5, 3), [0, 0])
        fm.resolve_future(batch)
        self.assertEqual(batch.spec_info.bonus_tokens.tolist(), [51, 50])
        self.assertEqual(batch.spec_info.topk_p.dtype, fm.topk_p_buf.dtype)
        self.assertTrue(torch.equal(batch.spec_info.topk_index, later.topk_index[[1, 0]]))

    def test_scheduler_helper_without_overlap_is_a_no_op(self):
        sched = object.__new__(Scheduler)
        sched.future_map = None
        batch = _spec_batch(_idx(1), [3])
        batch.spec_info.future_indices.seq_lens_pending = True
        sched.resolve_seq_lens_cpu(batch, None)
        self.assertEqual(batch.seq_lens_cpu.tolist(), [3])
        sched.future_map = _fm(spec=True)
        sched.future_map.publish(batch.spec_info.future_indices, torch.tensor([4]))
        sched.resolve_seq_lens_cpu(None, batch)
        self.assertEqual(batch.seq_lens_cpu.tolist(), [4])


class TestPartialScheduler(CustomTestCase):
    """Schedulers built with Scheduler.__new__ (as sglang's own scheduler
    unit tests build them) never ran init_overlap; the schedule paths that
    now resolve relayed lengths must still run on them."""

    def _scheduler(self):
        sched = Scheduler.__new__(Scheduler)
        sched._engine_paused = False
        sched.enable_overlap = False
        sched.last_batch = None
        sched.cur_batch = None
        sched.chunked_req = mock.sentinel.chunked_req
        sched.server_args = mock.MagicMock()
        sched.waiting_queue = []
        requeued = []
        sched._add_request_to_queue = requeued.append
        return sched, requeued

    def test_retract_clears_running_batch(self):
        sched, requeued = self._scheduler()
        running = mock.MagicMock()
        running.reqs = ["a", "b"]
        running.is_empty.return_value = False
        running.retract_all.return_value = ["ra", "rb"]
        sched.running_batch = running

        sched.pause_generation(PauseGenerationReqInput(mode="retract"))

        running.retract_all.assert_called_once_with(sched.server_args)
        self.assertEqual(requeued, ["ra", "rb"])
        self.assertFalse(running.batch_is_full)
        self.assertIsNone(sched.chunked_req)
        self.assertTrue(sched._engine_paused)

    def test_last_extend_batch_merges_into_the_running_batch(self):
        sched, requeued = self._scheduler()
        last = mock.MagicMock()
        last.forward_mode.is_extend.return_value = True
        last.is_empty.return_value = False
        sched.last_batch = last
        sched.disaggregation_mode = None
        running = mock.MagicMock()
        running.is_empty.return_value = False
        sched.running_batch = running

        sched.pause_generation(PauseGenerationReqInput(mode="abort"))

        last.filter_batch.assert_called_once()
        running.merge_batch.assert_called_once_with(last)
        self.assertIsNone(sched.last_batch)
        self.assertEqual(requeued, [])

    def test_resolve_without_init_overlap_leaves_batches_alone(self):
        sched, _ = self._scheduler()
        batch = _spec_batch(_idx(1), [3])
        batch.spec_info.future_indices.seq_lens_pending = True
        sched.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens_cpu.tolist(), [3])
        self.assertTrue(batch.spec_info.future_indices.seq_lens_pending)


def _set_sentinel(fm, batch, fi):
    # P1 names the step `invalidate`; patch C renames it (input_ids only).
    if hasattr(fm, "set_input_ids_sentinel"):
        fm.set_input_ids_sentinel(batch, fi)
    else:
        fm.invalidate(batch, fi)


if __name__ == "__main__":
    unittest.main()
