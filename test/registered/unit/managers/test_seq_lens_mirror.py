"""Patch C: ScheduleBatch.seq_lens (device) always mirrors seq_lens_cpu.

Real ScheduleBatch transitions (prepare_for_decode, filter_batch,
merge_batch, mix_with_running, FutureMap.resolve_seq_lens_cpu) run on CPU
tensors standing in for device ones, with minimal fakes for the pools,
allocator and sampling info, in four modes: non-overlap, overlap non-spec,
overlap spec v2, mixed. After every transition the debug check must hold.
Also: the spec v2 draft extend puts its +num_draft_tokens on the forward
batch only, and SGLANG_DEBUG_CHECK_SEQ_LENS_MIRROR fires on a broken mirror.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt import environ  # noqa: E402
from sglang.srt.managers import overlap_utils, schedule_batch  # noqa: E402
from sglang.srt.managers.overlap_utils import (  # noqa: E402
    FutureIndices,
    FutureMap,
    check_seq_lens_mirror,
)
from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.mem_cache import common as mem_common  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative import eagle_info_v2, spec_utils  # noqa: E402
from sglang.srt.speculative.eagle_info import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from schedule_batch_fakes import (  # noqa: E402
    FakeReq as _Req,
    FakeSamplingInfo as _SamplingInfo,
    FakeTreeCache as _TreeCache,
    fake_req_to_token_pool as _pool,
    run_batch_scheduler,
)


def _batch(slots, lens, *, overlap, spec, fm=None):
    reqs = [_Req(s, l) for s, l in zip(slots, lens)]
    tree_cache = _TreeCache()
    t = torch.tensor(lens, dtype=torch.int64)
    batch = ScheduleBatch(
        reqs=reqs,
        req_to_token_pool=fm.req_pool if fm else _pool(),
        token_to_kv_pool_allocator=tree_cache.token_to_kv_pool_allocator,
        tree_cache=tree_cache,
        model_config=SimpleNamespace(is_encoder_decoder=False, vocab_size=32),
        forward_mode=ForwardMode.DECODE,
        enable_overlap=overlap,
        spec_algorithm=(
            SpeculativeAlgorithm.EAGLE if spec else SpeculativeAlgorithm.NONE
        ),
        device="cpu",
        req_pool_indices=torch.tensor(slots, dtype=torch.int64),
        seq_lens=t.clone(),
        seq_lens_cpu=t.clone(),
        orig_seq_lens=t.clone().to(torch.int32),
        seq_lens_sum=int(t.sum()),
        output_ids=torch.tensor(lens, dtype=torch.int64),
        input_ids=torch.zeros(len(lens), dtype=torch.int64),
        out_cache_loc=torch.zeros(len(lens), dtype=torch.int64),
        sampling_info=_SamplingInfo(),
        prefix_lens=[l - 1 for l in lens],
        extend_lens=[1] * len(lens),
        extend_num_tokens=len(lens),
        extend_logprob_start_lens=[0] * len(lens),
    )
    if spec:
        batch.spec_info = EagleDraftInput()
        batch.spec_info.future_indices = FutureIndices(batch.req_pool_indices)
    return batch


def _fm(spec):
    fm = FutureMap(
        torch.device("cpu"),
        SpeculativeAlgorithm.EAGLE if spec else SpeculativeAlgorithm.NONE,
        _pool(),
    )
    fm.req_pool = _pool()
    return fm


class _MirrorCase(CustomTestCase):
    def setUp(self):
        patches = [
            mock.patch.object(overlap_utils, "CHECK_SEQ_LENS_MIRROR", True),
            mock.patch.object(
                schedule_batch,
                "get_global_server_args",
                lambda: SimpleNamespace(enable_mamba_extra_buffer=lambda: False),
            ),
            mock.patch.object(eagle_info_v2, "get_alloc_len_per_decode", lambda: 2),
            # Nothing to evict: the fake allocator never runs out.
            mock.patch.object(mem_common, "evict_from_tree_cache", lambda *a: None),
            mock.patch.object(
                spec_utils, "assign_req_to_token_pool_func", lambda *a, **k: None
            ),
        ]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)

    def assertMirror(self, batch, expect=None):
        check_seq_lens_mirror(batch)  # raises AssertionError on a broken mirror
        if expect is not None:
            self.assertEqual(batch.seq_lens.tolist(), expect)
            self.assertEqual(batch.seq_lens_cpu.tolist(), expect)
            self.assertEqual(batch.seq_lens_sum, sum(expect))


class TestSeqLensMirrorTransitions(_MirrorCase):
    def _non_spec_walk(self, overlap):
        fm = _fm(spec=False)
        batch = _batch([1, 2, 3], [5, 7, 9], overlap=overlap, spec=False, fm=fm)
        self.assertMirror(batch)
        if overlap:
            # run_batch: the sentinel goes to output_ids only.
            fm.set_input_ids_sentinel(batch, FutureIndices(batch.req_pool_indices))
            self.assertEqual(batch.output_ids.tolist(), [-1, -2, -3])
            self.assertMirror(batch, [5, 7, 9])
        before = batch.seq_lens
        batch.prepare_for_decode()
        self.assertMirror(batch, [6, 8, 10])
        if overlap:
            self.assertIsNot(batch.seq_lens, before)  # a new tensor, not add_
            self.assertEqual(before.tolist(), [5, 7, 9])
        batch.reqs[1].done = True
        batch.filter_batch()
        self.assertMirror(batch, [6, 10])
        other = _batch([5], [4], overlap=overlap, spec=False, fm=fm)
        batch.merge_batch(other)
        self.assertMirror(batch, [6, 10, 4])

    def test_non_overlap(self):
        self._non_spec_walk(overlap=False)

    def test_overlap_non_spec(self):
        self._non_spec_walk(overlap=True)

    def test_mixed(self):
        for overlap in (False, True):
            running = _batch([1, 2], [5, 6], overlap=overlap, spec=False)
            running.prepare_for_decode()
            self.assertMirror(running, [6, 7])
            prefill = _batch([4], [3], overlap=overlap, spec=False)
            prefill.forward_mode = ForwardMode.EXTEND
            prefill.output_ids = None  # not run yet
            prefill.mix_with_running(running)
            self.assertEqual(prefill.forward_mode, ForwardMode.MIXED)
            self.assertMirror(prefill, [3, 6, 7])

    def test_overlap_spec_v2(self):
        fm = _fm(spec=True)
        batch = _batch([2, 4, 6], [10, 20, 30], overlap=True, spec=True, fm=fm)
        # The verify forward publishes seq_lens + accept_lens.
        fi = batch.spec_info.future_indices
        fm.publish(fi, torch.tensor([12, 21, 33]))
        fm.set_input_ids_sentinel(batch, fi)
        # No seq_lens sentinel: until resolved, both sides keep the old value.
        self.assertMirror(batch, [10, 20, 30])
        fm.resolve_seq_lens_cpu(batch)
        self.assertMirror(batch, [12, 21, 33])
        fm.resolve_seq_lens_cpu(batch)  # idempotent
        self.assertMirror(batch, [12, 21, 33])
        batch.reqs[0].done = True
        batch.filter_batch()
        self.assertMirror(batch, [21, 33])
        # Merge a prefill batch whose lengths the schedule already knows.
        prefill = _batch([7], [5], overlap=True, spec=True, fm=fm)
        fm.publish(prefill.spec_info.future_indices, prefill.seq_lens, relayed=False)
        fm.resolve_seq_lens_cpu(prefill)
        batch.merge_batch(prefill)
        self.assertMirror(batch, [21, 33, 5])
        before = batch.seq_lens
        batch.prepare_for_decode()
        # Spec v2 decode preparation leaves the lengths to the verify.
        self.assertMirror(batch, [21, 33, 5])
        self.assertIs(batch.seq_lens, before)
        # Next verify: a filtered / merged batch gathers its current slots.
        fm.publish(batch.spec_info.future_indices, torch.tensor([23, 34, 6]))
        self.assertMirror(batch, [21, 33, 5])
        fm.resolve_seq_lens_cpu(batch)
        self.assertMirror(batch, [23, 34, 6])

    def test_overlap_spec_v2_merge_before_resolve_stays_consistent(self):
        # Disagg decode may merge before the scheduler resolves: the device
        # side is no longer a forward-stream future, so the merge is safe and
        # the merged batch resolves as a whole.
        fm = _fm(spec=True)
        running = _batch([1, 3], [8, 9], overlap=True, spec=True, fm=fm)
        fm.publish(running.spec_info.future_indices, torch.tensor([10, 11]))
        prebuilt = _batch([5], [4], overlap=True, spec=True, fm=fm)
        fm.publish(prebuilt.spec_info.future_indices, prebuilt.seq_lens, relayed=False)
        running.merge_batch(prebuilt)
        self.assertMirror(running, [8, 9, 4])
        fm.resolve_seq_lens_cpu(running)
        self.assertMirror(running, [10, 11, 4])


class _FakeForwardBatch(SimpleNamespace):
    # Patch E (later in the series) marks the batch after planning it.
    def mark_forward_metadata_ready(self, replan_equivalent=False, planner=None):
        self.planned_by = planner


class TestDraftExtendKeepsMirror(_MirrorCase):
    def test_plus_num_draft_tokens_lands_on_forward_batch(self):
        batch = _batch([1, 2], [10, 20], overlap=True, spec=True)
        seq_lens, seq_lens_cpu = batch.seq_lens, batch.seq_lens_cpu.clone()

        def init_new(b, runner):
            return _FakeForwardBatch(
                seq_lens=b.seq_lens,
                seq_lens_cpu=b.seq_lens_cpu,
                seq_lens_sum=b.seq_lens_sum,
                spec_info=b.spec_info,
                extend_prefix_lens_cpu=list(b.prefix_lens),
                extend_seq_lens_cpu=list(b.extend_lens),
            )

        runner = SimpleNamespace(
            spec_algorithm=SpeculativeAlgorithm.EAGLE,
            attn_backend=mock.Mock(),
        )
        draft_input = EagleDraftInput()
        with mock.patch.object(eagle_info_v2.ForwardBatch, "init_new", init_new):
            fb = draft_input.prepare_for_extend_to_fill_draft_kvcache(
                batch, torch.arange(8), 4, runner, None
            )
        self.assertIs(batch.seq_lens, seq_lens)
        self.assertEqual(batch.seq_lens.tolist(), [10, 20])
        self.assertTrue(torch.equal(batch.seq_lens_cpu, seq_lens_cpu))
        self.assertEqual(batch.seq_lens_sum, 30)
        self.assertMirror(batch, [10, 20])
        self.assertEqual(fb.seq_lens.tolist(), [14, 24])
        self.assertEqual(fb.seq_lens_cpu.tolist(), [14, 24])
        self.assertEqual(fb.seq_lens_sum, 38)
        self.assertEqual(fb.extend_prefix_lens_cpu, [10, 20])
        self.assertEqual(fb.extend_seq_lens_cpu, [4, 4])
        self.assertEqual(batch.forward_mode, ForwardMode.DRAFT_EXTEND_V2)
        runner.attn_backend.init_forward_metadata.assert_called_once_with(fb)


class TestDebugSwitch(_MirrorCase):
    def test_env_var_defaults_off(self):
        self.assertFalse(environ.envs.SGLANG_DEBUG_CHECK_SEQ_LENS_MIRROR.default)

    def test_fires_on_broken_mirror(self):
        batch = _batch([1, 2], [5, 6], overlap=True, spec=False)
        batch.seq_lens = batch.seq_lens + 1  # device side moved alone
        with self.assertRaisesRegex(AssertionError, "mirror broken"):
            check_seq_lens_mirror(batch)
        batch = _batch([1, 2], [5, 6], overlap=True, spec=False)
        batch.seq_lens_sum += 3
        with self.assertRaisesRegex(AssertionError, "SGLANG_DEBUG_CHECK_SEQ_LENS"):
            check_seq_lens_mirror(batch)

    def test_spec_v1_stale_sum_is_not_a_broken_mirror(self):
        # Seen on an H200: non-overlap EAGLE (v1 workers) leaves seq_lens_sum
        # stale between iterations and recomputes it inside its forward.
        v1 = _batch([1], [10], overlap=False, spec=True)
        v1.seq_lens_sum = 6
        check_seq_lens_mirror(v1)
        v1.seq_lens = v1.seq_lens + 1  # the lengths themselves still count
        with self.assertRaisesRegex(AssertionError, "mirror broken"):
            check_seq_lens_mirror(v1)
        v2 = _batch([1], [10], overlap=True, spec=True)
        self.assertTrue(v2.is_spec_v2)
        v2.seq_lens_sum = 6
        with self.assertRaisesRegex(AssertionError, "seq_lens_sum=6"):
            check_seq_lens_mirror(v2)

    def test_silent_on_good_mirror_and_when_off(self):
        batch = _batch([1, 2], [5, 6], overlap=True, spec=False)
        check_seq_lens_mirror(batch)
        batch.seq_lens_cpu = None  # no CPU mirror kept: nothing to compare
        check_seq_lens_mirror(batch)
        broken = _batch([1], [5], overlap=True, spec=False)
        broken.seq_lens = broken.seq_lens + 1
        with mock.patch.object(overlap_utils, "CHECK_SEQ_LENS_MIRROR", False):
            check_seq_lens_mirror(broken)

    def test_run_batch_checks_at_forward_entry(self):
        sched = run_batch_scheduler(mock.Mock())
        batch = _batch([1], [5], overlap=False, spec=False)
        batch.seq_lens = batch.seq_lens + 1
        with self.assertRaisesRegex(AssertionError, "mirror broken"):
            sched.run_batch(batch)
        sched.model_worker.forward_batch_generation.assert_not_called()


if __name__ == "__main__":
    unittest.main()
