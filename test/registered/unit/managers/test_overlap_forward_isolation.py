"""Patch A: Scheduler._overlap_forward_isolation makes an overlap forward
transactional for the ScheduleBatch.

The workers now take the ScheduleBatch itself, and spec-v2 workers rewrite it
during the forward. After the block the scheduler must see the batch exactly as
before: every dataclass field, and (beyond upstream) every attribute set outside
the dataclass fields; sampling_info is the scheduler's again; all of this also
when the forward raises. The (batch, snapshot) pair stays pinned in the
record_batch_in_overlap ring for two iterations.

The real Scheduler methods run on a Scheduler built with object.__new__ and
only the two ring attributes they touch.
"""

import dataclasses
import unittest

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402


class _SamplingInfo:
    """Stands in for SamplingBatchInfo: copy_for_forward returns a new object."""

    def __init__(self, name="sched"):
        self.name = name
        self.copies = []

    def copy_for_forward(self):
        copy = _SamplingInfo(self.name + "-fwd")
        self.copies.append(copy)
        return copy


def _scheduler():
    sched = object.__new__(Scheduler)
    sched.batch_record_buf = [None] * 2
    sched.batch_record_ct = 0
    return sched


def _batch(spec_v2=True):
    batch = ScheduleBatch(
        reqs=[],
        forward_mode=ForwardMode.DECODE,
        enable_overlap=True,
        spec_algorithm=(
            SpeculativeAlgorithm.EAGLE if spec_v2 else SpeculativeAlgorithm.NONE
        ),
        input_ids=torch.tensor([1, 2]),
        seq_lens=torch.tensor([5, 6]),
        seq_lens_cpu=torch.tensor([5, 6]),
        seq_lens_sum=11,
        out_cache_loc=torch.tensor([7, 8]),
        req_pool_indices=torch.tensor([1, 2]),
        prefix_lens=[4, 5],
        extend_lens=[1, 1],
        spec_info=object(),
        sampling_info=_SamplingInfo(),
    )
    # An attribute that is not a dataclass field, set before the forward.
    batch.extra_before = torch.tensor([0])
    return batch


def _mutate_like_spec_v2_forward(batch):
    """What a spec-v2 worker does to the batch during one forward."""
    batch.forward_mode = ForwardMode.TARGET_VERIFY
    batch.input_ids = torch.tensor([9, 9, 9, 9])
    batch.out_cache_loc = torch.tensor([20, 21, 22, 23])
    batch.seq_lens = batch.seq_lens + 2
    batch.seq_lens_sum += 4
    batch.spec_info = object()
    batch.extend_lens = [2, 2]
    batch.prefix_lens = [5, 6]
    batch.mamba_track_indices = torch.tensor([3])
    # Outside the dataclass fields: one changed, one added.
    batch.extra_before = torch.tensor([1])
    batch.extra_added_during_forward = torch.tensor([2])


def _state(batch):
    return dict(vars(batch))


class TestOverlapForwardIsolation(CustomTestCase):
    def assertSameState(self, batch, before):
        after = _state(batch)
        self.assertEqual(set(after), set(before))
        for name, value in before.items():
            self.assertIs(after[name], value, name)

    def test_spec_v2_restores_every_field_and_extra_attribute(self):
        sched, batch = _scheduler(), _batch(spec_v2=True)
        self.assertTrue(batch.is_spec_v2)
        sched_info = batch.sampling_info
        before = _state(batch)
        field_names = {f.name for f in dataclasses.fields(batch)}
        self.assertTrue(field_names < set(before))  # extra attrs are covered too

        with sched._overlap_forward_isolation(batch):
            # The forward sees a forward-only copy of sampling_info.
            self.assertIsNot(batch.sampling_info, sched_info)
            self.assertEqual(sched_info.copies, [batch.sampling_info])
            _mutate_like_spec_v2_forward(batch)

        self.assertSameState(batch, before)
        self.assertIs(batch.sampling_info, sched_info)
        self.assertFalse(hasattr(batch, "extra_added_during_forward"))

    def test_restores_when_the_forward_raises(self):
        sched, batch = _scheduler(), _batch(spec_v2=True)
        sched_info = batch.sampling_info
        before = _state(batch)

        with self.assertRaises(RuntimeError):
            with sched._overlap_forward_isolation(batch):
                _mutate_like_spec_v2_forward(batch)
                raise RuntimeError("forward failed")

        self.assertSameState(batch, before)
        self.assertIs(batch.sampling_info, sched_info)
        self.assertFalse(hasattr(batch, "extra_added_during_forward"))

    def test_non_spec_v2_swaps_and_restores_sampling_info_only(self):
        sched, batch = _scheduler(), _batch(spec_v2=False)
        self.assertFalse(batch.is_spec_v2)
        sched_info = batch.sampling_info
        new_ids = torch.tensor([3, 4])

        with sched._overlap_forward_isolation(batch):
            self.assertIsNot(batch.sampling_info, sched_info)
            batch.input_ids = new_ids

        self.assertIs(batch.sampling_info, sched_info)
        self.assertIs(batch.input_ids, new_ids)  # not transactional outside v2

    def test_sampling_info_none_is_left_alone(self):
        sched, batch = _scheduler(), _batch(spec_v2=True)
        batch.sampling_info = None
        with sched._overlap_forward_isolation(batch):
            self.assertIsNone(batch.sampling_info)
        self.assertIsNone(batch.sampling_info)

    def test_batch_and_snapshot_pinned_for_two_iterations(self):
        sched = _scheduler()
        first = _batch(spec_v2=True)
        first_ids, first_loc = first.input_ids, first.out_cache_loc

        with sched._overlap_forward_isolation(first):
            fwd_info = first.sampling_info
            _mutate_like_spec_v2_forward(first)
        entry = sched.batch_record_buf[sched.batch_record_ct]
        self.assertIs(entry[0], first)
        snapshot = entry[1]
        self.assertIs(snapshot["input_ids"], first_ids)
        self.assertIs(snapshot["out_cache_loc"], first_loc)
        # The forward-only sampling_info copy is pinned too.
        self.assertIs(snapshot["sampling_info"], fwd_info)

        def pinned():
            return any(
                e is not None and e[0] is first and e[1] is snapshot
                for e in sched.batch_record_buf
            )

        # The scheduler moves on and rebinds the batch's tensors.
        first.input_ids = torch.tensor([0])
        first.out_cache_loc = torch.tensor([0])

        with sched._overlap_forward_isolation(_batch(spec_v2=True)):
            pass
        self.assertTrue(pinned())  # still alive one iteration later
        with sched._overlap_forward_isolation(_batch(spec_v2=True)):
            pass
        self.assertFalse(pinned())  # the ring slot is reused after two


if __name__ == "__main__":
    unittest.main()
