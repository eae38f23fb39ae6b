"""Patch E: the batch-carried attention plan marker.

A pre-planner records on the ForwardBatch that attention metadata is planned
(``mark_forward_metadata_ready``); the forward path asks the batch
(``needs_forward_metadata_init``) instead of trusting a
``skip_attn_backend_init`` flag threaded through six layers. Covers the marker
contract, the deprecated shim, the planner record, the stale-plan detector,
the ModelRunner decision points, and where the old flag may still appear.
"""

import inspect
import os
import re
import unittest
import warnings
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

import sglang  # noqa: E402
from sglang.srt.model_executor import forward_batch_info  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    ForwardBatch,
    ForwardMode,
    check_stale_attn_plan,
)
from sglang.srt.model_executor.model_runner import ModelRunner  # noqa: E402


def _make_batch(bs=2, num_tokens=None, mode=ForwardMode.DECODE) -> ForwardBatch:
    num_tokens = bs if num_tokens is None else num_tokens
    return ForwardBatch(
        forward_mode=mode,
        batch_size=bs,
        input_ids=torch.zeros(num_tokens, dtype=torch.long),
        req_pool_indices=torch.arange(bs),
        seq_lens=torch.full((bs,), 5, dtype=torch.int32),
        out_cache_loc=torch.arange(num_tokens),
        seq_lens_sum=5 * bs,
        positions=torch.zeros(num_tokens, dtype=torch.long),
    )


@dataclass
class _Meta:
    bs: int
    seq_lens: torch.Tensor
    note: Optional[str] = None


class _FakeBackend:
    """Stands in for an attention backend: plans a dataclass of the batch."""

    def __init__(self, skew=0):
        self.calls = 0
        self.skew = skew
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        self.calls += 1
        self.forward_metadata = _Meta(
            bs=forward_batch.batch_size,
            seq_lens=forward_batch.seq_lens.clone() + self.skew,
        )


@dataclass
class _IndptrMeta:
    kv_indptr: torch.Tensor


class _InPlaceBackend:
    """Plans like triton: into a persistent buffer, the metadata a view of it."""

    def __init__(self):
        self.calls = 0
        self.kv_indptr = torch.zeros(9, dtype=torch.int64)
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        self.calls += 1
        bs = forward_batch.batch_size
        self.kv_indptr[1 : bs + 1] = torch.cumsum(forward_batch.seq_lens, dim=0)
        self.forward_metadata = _IndptrMeta(kv_indptr=self.kv_indptr[: bs + 1])


class TestForwardMetadataPlanRecord(CustomTestCase):
    def test_fresh_batch_needs_planning(self):
        fb = _make_batch()
        self.assertFalse(fb.forward_metadata_ready)
        self.assertIsNone(fb.forward_metadata_planned_bs)
        self.assertIsNone(fb.forward_metadata_planned_num_tokens)
        self.assertFalse(fb.forward_metadata_replan_equivalent)
        self.assertTrue(fb.needs_forward_metadata_init())

    def test_mark_records_shapes_and_skips_planning(self):
        fb = _make_batch(bs=3, num_tokens=7)
        fb.mark_forward_metadata_ready()
        self.assertTrue(fb.forward_metadata_ready)
        self.assertEqual(fb.forward_metadata_planned_bs, 3)
        self.assertEqual(fb.forward_metadata_planned_num_tokens, 7)
        self.assertFalse(fb.forward_metadata_replan_equivalent)
        self.assertFalse(fb.needs_forward_metadata_init())

    def test_reshape_without_opt_in_keeps_skipping(self):
        fb = _make_batch(bs=2)
        fb.mark_forward_metadata_ready()
        fb.batch_size = 4  # DP padding grows the batch after the plan
        fb.input_ids = torch.zeros(4, dtype=torch.long)
        self.assertFalse(fb.needs_forward_metadata_init())

    def test_reshape_with_opt_in_replans(self):
        fb = _make_batch(bs=2, num_tokens=2)
        fb.mark_forward_metadata_ready(replan_equivalent=True)
        self.assertFalse(fb.needs_forward_metadata_init())
        fb.batch_size = 4  # bs drift
        self.assertTrue(fb.needs_forward_metadata_init())
        fb.batch_size = 2
        self.assertFalse(fb.needs_forward_metadata_init())
        fb.input_ids = torch.zeros(6, dtype=torch.long)  # token drift
        self.assertTrue(fb.needs_forward_metadata_init())

    def test_remark_re_snapshots(self):
        fb = _make_batch(bs=2)
        fb.mark_forward_metadata_ready(replan_equivalent=True)
        fb.batch_size = 4
        fb.input_ids = torch.zeros(4, dtype=torch.long)
        self.assertTrue(fb.needs_forward_metadata_init())
        fb.mark_forward_metadata_ready(replan_equivalent=True)
        self.assertFalse(fb.needs_forward_metadata_init())
        self.assertEqual(fb.forward_metadata_planned_bs, 4)
        self.assertEqual(fb.forward_metadata_planned_num_tokens, 4)
        # Re-marking without the opt-in drops it.
        fb.mark_forward_metadata_ready()
        self.assertFalse(fb.forward_metadata_replan_equivalent)


class TestDeprecatedSkipShim(CustomTestCase):
    def setUp(self):
        forward_batch_info._skip_attn_backend_init_warned = False

    def tearDown(self):
        forward_batch_info._skip_attn_backend_init_warned = False

    def test_none_is_silent_noop(self):
        fb = _make_batch()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fb.apply_deprecated_skip_attn_backend_init(None)
        self.assertEqual(caught, [])
        self.assertFalse(fb.forward_metadata_ready)
        self.assertTrue(fb.needs_forward_metadata_init())
        self.assertFalse(forward_batch_info._skip_attn_backend_init_warned)

    def test_true_marks_and_warns(self):
        fb = _make_batch(bs=3)
        with self.assertWarns(DeprecationWarning):
            fb.apply_deprecated_skip_attn_backend_init(True)
        self.assertTrue(fb.forward_metadata_ready)
        self.assertEqual(fb.forward_metadata_planned_bs, 3)
        self.assertFalse(fb.needs_forward_metadata_init())

    def test_false_warns_and_does_not_mark(self):
        fb = _make_batch()
        with self.assertWarns(DeprecationWarning):
            fb.apply_deprecated_skip_attn_backend_init(False)
        self.assertFalse(fb.forward_metadata_ready)
        self.assertTrue(fb.needs_forward_metadata_init())

    def test_warns_once_per_process(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _make_batch().apply_deprecated_skip_attn_backend_init(True)
            _make_batch().apply_deprecated_skip_attn_backend_init(False)
            second = _make_batch()
            second.apply_deprecated_skip_attn_backend_init(True)
        deprecations = [w for w in caught if w.category is DeprecationWarning]
        self.assertEqual(len(deprecations), 1)
        self.assertIn("skip_attn_backend_init", str(deprecations[0].message))
        # Marking still works after the warning was spent.
        self.assertTrue(second.forward_metadata_ready)

    def test_upstream_method_signature(self):
        # upstream 0.5.13: ForwardBatch.apply_deprecated_skip_attn_backend_init(
        #     self, skip_attn_backend_init: Optional[bool]) -> None
        params = list(
            inspect.signature(ForwardBatch.apply_deprecated_skip_attn_backend_init).parameters
        )
        self.assertEqual(params, ["self", "skip_attn_backend_init"])
        self.assertFalse(hasattr(forward_batch_info, "apply_deprecated_skip_attn_backend_init"))

    def test_warning_points_at_the_caller_of_the_entry(self):
        runner = object.__new__(ModelRunner)
        runner.forward_pass_id = 0
        runner.msprobe_debugger = None

        def fake_raw(forward_batch, *args, **kwargs):
            raise KeyboardInterrupt  # stop right after the shim

        runner._forward_raw = fake_raw
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with self.assertRaises(KeyboardInterrupt):
                runner.forward(_make_batch(), skip_attn_backend_init=True)
        (w,) = [w for w in caught if w.category is DeprecationWarning]
        self.assertEqual(w.filename, __file__)

    def test_public_entry_routes_through_shim(self):
        # ModelRunner.forward keeps the argument, optional and deprecated.
        runner = object.__new__(ModelRunner)
        fb = _make_batch()
        seen = {}

        class _Stop(Exception):
            pass

        def fake_raw(forward_batch, *args, **kwargs):
            seen["ready"] = forward_batch.forward_metadata_ready
            seen["args"] = args
            raise _Stop

        runner.forward_pass_id = 0
        runner.msprobe_debugger = None
        runner._forward_raw = fake_raw
        with self.assertWarns(DeprecationWarning), self.assertRaises(_Stop):
            runner.forward(fb, skip_attn_backend_init=True)
        self.assertTrue(seen["ready"])
        # The flag is not threaded further down.
        self.assertFalse(any(a is True for a in seen["args"][:1]))


class TestPlannerRecord(CustomTestCase):
    def test_no_planner_or_unmarked_is_noop(self):
        backend_a, backend_b = _FakeBackend(), _FakeBackend()
        fb = _make_batch()
        fb.assert_replan_backend(backend_a)  # unmarked
        fb.mark_forward_metadata_ready(replan_equivalent=True)  # no planner
        self.assertIsNone(fb.forward_metadata_planner)
        fb.assert_replan_backend(backend_b)

    def test_same_backend_passes(self):
        backend = _FakeBackend()
        fb = _make_batch()
        fb.mark_forward_metadata_ready(replan_equivalent=True, planner=backend)
        self.assertIs(fb.forward_metadata_planner, backend)
        fb.assert_replan_backend(backend)

    def test_other_backend_raises(self):
        planner, other = _FakeBackend(), _FakeBackend()
        fb = _make_batch()
        fb.mark_forward_metadata_ready(replan_equivalent=True, planner=planner)
        with self.assertRaises(AssertionError):
            fb.assert_replan_backend(other)

    def test_replan_through_forward_decode_checks_planner(self):
        # An opted-in batch that drifted is re-planned by ModelRunner; if the
        # runner's backend is not the recorded planner, that is a bug.
        planner = _FakeBackend()
        runner = _fake_runner(_FakeBackend())
        fb = _make_batch(bs=2)
        fb.mark_forward_metadata_ready(replan_equivalent=True, planner=planner)
        fb.batch_size = 4
        with self.assertRaises(AssertionError):
            runner.forward_decode(fb)
        self.assertEqual(runner.attn_backend.calls, 0)


def _fake_runner(backend):
    runner = object.__new__(ModelRunner)
    runner.attn_backend = backend
    runner.server_args = SimpleNamespace(enable_pdmux=False)
    runner.support_pp = False
    runner.device_timer = None
    runner.is_generation = True
    runner.piecewise_cuda_graph_runner = None
    runner.model = SimpleNamespace(
        forward=lambda input_ids, positions, forward_batch, **kw: (
            "logits",
            backend.forward_metadata,
        )
    )
    return runner


class TestModelRunnerDecisionPoints(CustomTestCase):
    def setUp(self):
        forward_batch_info.stale_attn_plan_check_enabled.cache_clear()

    def tearDown(self):
        forward_batch_info.stale_attn_plan_check_enabled.cache_clear()

    def _run(self, mode, fb):
        runner = _fake_runner(_FakeBackend())
        if mode == "decode":
            out = runner.forward_decode(fb)
        else:
            out, can_run_graph = runner.forward_extend(fb)
            self.assertFalse(can_run_graph)
        return runner.attn_backend, out

    def test_unmarked_batch_is_planned(self):
        for mode in ("decode", "extend"):
            with self.subTest(mode=mode):
                fb = _make_batch(bs=3, mode=ForwardMode.DECODE)
                backend, (_, meta_seen) = self._run(mode, fb)
                self.assertEqual(backend.calls, 1)
                self.assertEqual(backend.forward_metadata.bs, 3)
                # The model ran on the metadata just planned for this batch.
                self.assertIs(meta_seen, backend.forward_metadata)
                # The forward path does not mark: only pre-planners do.
                self.assertFalse(fb.forward_metadata_ready)

    def test_marked_batch_is_not_replanned(self):
        for mode in ("decode", "extend"):
            with self.subTest(mode=mode):
                fb = _make_batch(bs=3)
                fb.mark_forward_metadata_ready()
                fb.batch_size = 5  # drift, but no opt-in
                backend, (_, meta_seen) = self._run(mode, fb)
                self.assertEqual(backend.calls, 0)
                self.assertIsNone(meta_seen)
                self.assertTrue(fb.forward_metadata_ready)

    def test_opted_in_drifted_batch_is_replanned(self):
        for mode in ("decode", "extend"):
            with self.subTest(mode=mode):
                fb = _make_batch(bs=2)
                fb.mark_forward_metadata_ready(replan_equivalent=True)
                fb.batch_size = 4
                fb.seq_lens = torch.full((4,), 5, dtype=torch.int32)
                self.assertTrue(fb.needs_forward_metadata_init())
                backend, (_, meta_seen) = self._run(mode, fb)
                self.assertEqual(backend.calls, 1)
                self.assertEqual(meta_seen.bs, 4)

    def test_opted_in_undrifted_batch_is_not_replanned(self):
        fb = _make_batch(bs=2)
        fb.mark_forward_metadata_ready(replan_equivalent=True)
        backend, _ = self._run("decode", fb)
        self.assertEqual(backend.calls, 0)


class TestStalePlanDetector(CustomTestCase):
    def setUp(self):
        forward_batch_info.stale_attn_plan_check_enabled.cache_clear()

    def tearDown(self):
        forward_batch_info.stale_attn_plan_check_enabled.cache_clear()

    def _marked(self, planner, fb=None):
        fb = fb or _make_batch(bs=2)
        planner.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready(planner=planner)
        return fb

    def test_off_by_default(self):
        with mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop("SGLANG_DEBUG_STALE_ATTN_PLAN", None)
            self.assertFalse(forward_batch_info.stale_attn_plan_check_enabled())
        # Off: a stale marked batch runs on its carried plan, no re-plan.
        planner = _FakeBackend()
        fb = self._marked(planner)
        fb.seq_lens = fb.seq_lens + 1  # plan is now stale
        runner = _fake_runner(planner)
        runner.forward_decode(fb)
        self.assertEqual(planner.calls, 1)

    def test_identical_replan_is_silent_and_keeps_carried_plan(self):
        planner = _FakeBackend()
        fb = self._marked(planner)
        carried = planner.forward_metadata
        check_stale_attn_plan(fb)
        self.assertEqual(planner.calls, 2)  # it did re-plan, into scratch
        self.assertIs(planner.forward_metadata, carried)

    def test_stale_plan_raises(self):
        planner = _FakeBackend()
        fb = self._marked(planner)
        fb.seq_lens = fb.seq_lens + 1  # batch changed after the plan
        with self.assertRaises(AssertionError) as cm:
            check_stale_attn_plan(fb)
        self.assertIn("seq_lens", str(cm.exception))
        self.assertIsInstance(cm.exception, forward_batch_info.StaleAttentionPlanError)

    def test_stale_plan_in_a_persistent_buffer_is_reported_not_repaired(self):
        planner = _InPlaceBackend()
        fb = self._marked(planner)
        planned = planner.kv_indptr.clone()
        carried = planner.forward_metadata
        fb.seq_lens = fb.seq_lens + 1  # batch changed after the plan
        with self.assertRaises(forward_batch_info.StaleAttentionPlanError) as cm:
            check_stale_attn_plan(fb)
        self.assertIn("kv_indptr", str(cm.exception))
        # The re-plan wrote the same buffer; the carried values are back, so
        # switching the detector on does not change what the forward reads.
        self.assertEqual(planner.calls, 2)
        self.assertTrue(torch.equal(planner.kv_indptr, planned))
        self.assertIs(planner.forward_metadata, carried)

    def test_identical_replan_in_a_persistent_buffer_is_silent(self):
        planner = _InPlaceBackend()
        fb = self._marked(planner)
        planned = planner.kv_indptr.clone()
        check_stale_attn_plan(fb)
        self.assertEqual(planner.calls, 2)
        self.assertTrue(torch.equal(planner.kv_indptr, planned))

    def test_plans_holding_named_tuples_are_frozen_too(self):
        from collections import namedtuple

        Indptr = namedtuple("Indptr", ["kv", "qo"])
        buf = torch.tensor([0, 2, 5])
        saved = {}
        frozen = forward_batch_info._frozen(Indptr(kv=buf, qo=3), saved)
        self.assertIsInstance(frozen, Indptr)
        buf[1] = 9  # a re-plan writes the buffer in place
        self.assertEqual(frozen.kv.tolist(), [0, 2, 5])
        self.assertEqual(frozen.qo, 3)

    def test_switch_on_wires_into_forward_path(self):
        planner = _FakeBackend()
        fb = self._marked(planner)
        runner = _fake_runner(planner)
        with mock.patch.dict(os.environ, {"SGLANG_DEBUG_STALE_ATTN_PLAN": "1"}):
            forward_batch_info.stale_attn_plan_check_enabled.cache_clear()
            # Identical re-plan: silent, and the model still sees the carried plan.
            carried = planner.forward_metadata
            _, meta_seen = runner.forward_decode(fb)
            self.assertIs(meta_seen, carried)
            # Stale at the plan's first forward: fails loudly instead of
            # running on the wrong metadata (decode and extend alike).
            for forward in (runner.forward_decode, runner.forward_extend):
                stale = self._marked(planner)
                stale.seq_lens = stale.seq_lens + 1
                with self.assertRaises(AssertionError):
                    forward(stale)

    def test_each_plan_is_checked_at_its_first_forward_only(self):
        # A multi-step draft advances the batch in place between its steps
        # (positions += 1); re-planning at step k > 0 differs by design.
        planner = _FakeBackend()
        fb = self._marked(planner)
        check_stale_attn_plan(fb)  # first forward: checked, identical
        self.assertEqual(planner.calls, 2)
        fb.seq_lens = fb.seq_lens + 1  # the loop moved the batch on
        check_stale_attn_plan(fb)  # later step of the same plan: not re-planned
        self.assertEqual(planner.calls, 2)
        fb.mark_forward_metadata_ready(planner=planner)  # a new plan (stale)
        with self.assertRaises(forward_batch_info.StaleAttentionPlanError):
            check_stale_attn_plan(fb)

    def test_workspaces_and_unwritten_kv_tail_are_not_compared(self):
        # Seen on an H200 with triton: attn_logits (a float workspace) and
        # the slack after kv_indptr[-1] in kv_indices are uninitialized, so
        # two plans of the same batch differ there. They are not the plan.
        import dataclasses

        @dataclasses.dataclass
        class Meta:
            kv_indptr: torch.Tensor
            kv_indices: torch.Tensor
            attn_logits: torch.Tensor

        def plan(tail, logits, first_index=0):
            return Meta(
                kv_indptr=torch.tensor([0, 2, 5]),
                kv_indices=torch.tensor([first_index, 1, 2, 3, 4, tail, tail]),
                attn_logits=torch.full((2, 4), logits),
            )

        diff = forward_batch_info._plan_diff
        self.assertIsNone(diff(plan(-7, 0.5), plan(99, float("nan")), "m"))
        self.assertIn("kv_indices", diff(plan(-7, 0.5), plan(-7, 0.5, 9), "m"))
        shorter = plan(0, 0.5)
        shorter.attn_logits = torch.zeros(1, 4)
        self.assertIn("attn_logits", diff(plan(0, 0.5), shorter, "m"))

    def test_unrecorded_planner_is_not_checked(self):
        planner = _FakeBackend()
        fb = _make_batch()
        planner.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()  # no planner recorded
        fb.seq_lens = fb.seq_lens + 1
        check_stale_attn_plan(fb)
        self.assertEqual(planner.calls, 1)


class TestSkipFlagSourceFootprint(CustomTestCase):
    def test_flag_only_in_shim_and_public_entries(self):
        root = os.path.dirname(sglang.__file__)
        allowed = {
            "srt/model_executor/forward_batch_info.py",  # the shim
            "srt/model_executor/model_runner.py",  # ModelRunner.forward
            "srt/managers/tp_worker.py",  # forward_batch_generation
            "srt/hardware_backend/mlx/tp_worker.py",  # mlx
        }
        found = {}
        for dirpath, _, files in os.walk(root):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                if "skip_attn_backend_init" in text:
                    found[os.path.relpath(path, root).replace(os.sep, "/")] = text
        self.assertEqual(set(found) - allowed, set())
        # In model_runner the flag lives only in forward()'s signature and the
        # shim call, not in _forward_raw / forward_decode / forward_extend.
        mr = found["srt/model_executor/model_runner.py"]
        for fn in ("_forward_raw", "forward_decode", "forward_extend"):
            body = re.search(rf"\n    def {fn}\(.*?(?=\n    def )", mr, re.S)
            self.assertIsNotNone(body, fn)
            self.assertNotIn("skip_attn_backend_init", body.group(0), fn)
        self.assertIn(
            "skip_attn_backend_init: Optional[bool] = None",
            found["srt/managers/tp_worker.py"],
        )


if __name__ == "__main__":
    unittest.main()
