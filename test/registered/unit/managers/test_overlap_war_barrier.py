"""The overlap loops order schedule-stream work after the in-flight forward.

Under the overlap schedule, iteration N+1 prepares its batch on the schedule
stream while forward N still runs on the forward stream, and that preparation
writes GPU buffers forward N reads: req_to_token rows of slots freed and
reused, and the FutureMap rows a finished request's last forward still
relays into. Each overlap loop (plain, disaggregated decode, disaggregated
prefill) makes the schedule stream wait for the forward stream at the top of
every iteration, and the disaggregated decode seeds a prebuilt batch's relay
rows only after such a wait. Where the barrier is off (off CUDA by default)
the schedule orders itself on the host instead: the seed waits for the
forward stream, and resolving a spec v2 batch's relayed lengths waits for
its publish, where 0.5.12.post1 waited on verify_done. Streams and events
are recording fakes (no GPU); the loops run two iterations and stop.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.disaggregation import decode as disagg_decode  # noqa: E402
from sglang.srt.managers import scheduler as scheduler_module  # noqa: E402
from sglang.srt.managers.overlap_utils import FutureMap  # noqa: E402
from sglang.srt.managers.scheduler import (  # noqa: E402
    Scheduler,
    host_orders_schedule,
    war_barrier_enabled,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

BARRIER = "schedule.wait_stream(forward)"
HOST_WAIT = "forward.synchronize()"


class _Stop(Exception):
    pass


class _Stream:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def wait_stream(self, other):
        self.log.append(f"{self.name}.wait_stream({other.name})")

    def wait_event(self, event):
        self.log.append(f"{self.name}.wait_event({event.name})")

    def synchronize(self):
        self.log.append(f"{self.name}.synchronize()")


def _scheduler(log, iterations=2):
    """A partial scheduler whose loop hooks log their calls; recv_requests
    ends the loop after `iterations` iterations."""
    sched = Scheduler.__new__(Scheduler)
    sched.schedule_stream = _Stream("schedule", log)
    sched.forward_stream = _Stream("forward", log)
    sched._war_barrier_enabled = True
    sched._engine_paused = False
    sched.last_batch = None
    sched.is_generation = True
    sched.waiting_queue = []
    calls = iter(range(iterations))

    def recv_requests():
        if next(calls, None) is None:
            raise _Stop
        log.append("recv")
        return []

    sched.recv_requests = recv_requests
    for name in (
        "process_input_requests",
        "process_decode_queue",
        "on_idle",
        "launch_batch_sample_if_needed",
        "process_disagg_prefill_inflight_queue",
    ):
        setattr(sched, name, lambda *a, _n=name, **k: log.append(_n))
    for name in (
        "get_next_batch_to_run",
        "get_next_disagg_decode_batch_to_run",
        "get_next_disagg_prefill_batch_to_run",
    ):
        setattr(sched, name, lambda *a, _n=name, **k: log.append(_n))
    sched.is_disable_overlap_for_batch = lambda batch: False
    sched.disagg_prefill_bootstrap_queue = SimpleNamespace(pop_bootstrapped=list)
    return sched


class TestOverlapLoopsWaitForTheForward(CustomTestCase):
    def _run(self, loop_name):
        log = []
        sched = _scheduler(log)
        with self.assertRaises(_Stop):
            getattr(sched, loop_name)()
        return log

    def test_each_iteration_waits_before_it_schedules(self):
        for loop_name, schedule in (
            ("event_loop_overlap", "get_next_batch_to_run"),
            ("event_loop_overlap_disagg_decode", "get_next_disagg_decode_batch_to_run"),
            ("event_loop_overlap_disagg_prefill", "get_next_disagg_prefill_batch_to_run"),
        ):
            with self.subTest(loop=loop_name):
                log = self._run(loop_name)
                self.assertEqual(log.count(schedule), 2)
                barriers = [i for i, c in enumerate(log) if c == BARRIER]
                schedules = [i for i, c in enumerate(log) if c == schedule]
                # One wait per iteration, each before that iteration's
                # requests and batch preparation.
                self.assertEqual(len(barriers), 3)  # the third stops in recv
                for barrier, sched_at in zip(barriers, schedules):
                    self.assertLess(barrier, sched_at)
                self.assertLess(barriers[1], schedules[1])
                self.assertGreater(barriers[1], schedules[0])
                self.assertEqual(log[0], BARRIER)

    def test_disabled_barrier_issues_no_wait(self):
        log = []
        sched = _scheduler(log)
        sched._war_barrier_enabled = False
        with self.assertRaises(_Stop):
            sched.event_loop_overlap()
        self.assertNotIn(BARRIER, log)

    def test_partial_scheduler_has_no_barrier(self):
        # Schedulers built without run_event_loop (tests, tools) keep working.
        sched = Scheduler.__new__(Scheduler)
        sched._apply_war_barrier()  # no schedule_stream: must not touch it


class TestPrebuiltSeedWaitsForTheForward(CustomTestCase):
    def _seed(self, barrier, host_orders, spec=SpeculativeAlgorithm.EAGLE3):
        """The calls of get_new_prebuilt_batch for one waiting request."""
        log = []
        sched = _scheduler(log)
        sched._war_barrier_enabled = barrier
        sched._host_orders_schedule = host_orders
        req = SimpleNamespace(
            init_next_round_input=lambda tree_cache: None, kv_committed_len=None
        )
        sched.grammar_manager = SimpleNamespace(has_waiting_grammars=lambda: False)
        sched.waiting_queue = [req]
        sched.enable_priority_scheduling = False
        sched.running_batch = SimpleNamespace(batch_size=lambda: 0)
        sched.req_to_token_pool = SimpleNamespace(size=8)
        sched.max_running_requests = 8
        sched.server_args = SimpleNamespace(
            disaggregation_decode_enable_radix_cache=False
        )
        sched.tree_cache = sched.token_to_kv_pool_allocator = None
        sched.model_config = sched.enable_overlap = None
        sched.spec_algorithm = spec
        sched.future_map = object()
        batch = SimpleNamespace(
            prepare_for_prebuilt=lambda: log.append("prepare_for_prebuilt"),
            process_prebuilt=lambda args, fmap: log.append("process_prebuilt"),
        )
        with mock.patch.object(
            disagg_decode.ScheduleBatch, "init_new", return_value=batch
        ), mock.patch.object(disagg_decode, "set_time_batch"):
            self.assertIs(sched.get_new_prebuilt_batch(), batch)
        return log

    def test_process_prebuilt_runs_after_a_wait(self):
        log = self._seed(barrier=True, host_orders=False)
        self.assertIn(BARRIER, log)
        self.assertLess(log.index(BARRIER), log.index("process_prebuilt"))
        self.assertNotIn(HOST_WAIT, log)

    def test_without_the_barrier_the_seed_waits_on_the_host(self):
        log = self._seed(barrier=False, host_orders=True)
        self.assertNotIn(BARRIER, log)
        self.assertEqual(log.count(HOST_WAIT), 1)
        self.assertLess(log.index(HOST_WAIT), log.index("process_prebuilt"))

    def test_a_batch_that_seeds_no_relay_row_does_not_wait(self):
        log = self._seed(
            barrier=False, host_orders=True, spec=SpeculativeAlgorithm.NONE
        )
        self.assertNotIn(HOST_WAIT, log)
        self.assertIn("process_prebuilt", log)

    def test_without_overlap_the_seed_does_not_wait(self):
        log = self._seed(barrier=False, host_orders=False)
        self.assertNotIn(BARRIER, log)
        self.assertNotIn(HOST_WAIT, log)


class TestWhenTheBarrierIsOn(CustomTestCase):
    def test_truth_table(self):
        eagle = SpeculativeAlgorithm.EAGLE3
        for overlap, algo, cuda, forced, expected in (
            (True, SpeculativeAlgorithm.NONE, True, False, True),
            (True, eagle, True, False, True),
            (False, eagle, True, False, False),  # no overlap: one stream
            (True, SpeculativeAlgorithm.DFLASH, True, False, False),
            (True, eagle, False, False, False),  # off CUDA by default
            (True, eagle, False, True, True),  # SGLANG_ENABLE_WAR_BARRIER
        ):
            _check_on_device(self, war_barrier_enabled, overlap, algo, cuda, forced,
                             expected)


def _check_on_device(test, decide, overlap, algo, cuda, forced, expected):
    """decide(overlap, algo) on CUDA or not, with SGLANG_ENABLE_WAR_BARRIER set
    or not."""
    with test.subTest(overlap=overlap, algo=algo, cuda=cuda, forced=forced):
        env = {"SGLANG_ENABLE_WAR_BARRIER": "1"} if forced else {}
        with mock.patch.object(
            scheduler_module, "is_cuda", return_value=cuda
        ), mock.patch.dict("os.environ", env):
            test.assertEqual(decide(overlap, algo), expected)


class TestWhereTheHostOrdersTheSchedule(CustomTestCase):
    def test_truth_table(self):
        eagle = SpeculativeAlgorithm.EAGLE3
        for overlap, algo, cuda, forced, expected in (
            (True, eagle, True, False, False),  # the barrier orders it
            (True, SpeculativeAlgorithm.NONE, True, False, False),
            (True, eagle, False, False, True),  # off CUDA by default
            (True, SpeculativeAlgorithm.NONE, False, False, True),
            (True, eagle, False, True, False),  # SGLANG_ENABLE_WAR_BARRIER
            (False, eagle, False, False, False),  # no overlap: one stream
            (True, SpeculativeAlgorithm.DFLASH, False, False, False),
        ):
            _check_on_device(self, host_orders_schedule, overlap, algo, cuda, forced,
                             expected)

    def test_the_event_loop_tells_the_relay(self):
        for cuda in (True, False):
            with self.subTest(cuda=cuda):
                log = []
                sched = Scheduler.__new__(Scheduler)
                sched.device, sched.enable_overlap = "cuda", True
                sched.spec_algorithm = SpeculativeAlgorithm.EAGLE3
                sched.future_map = SimpleNamespace()
                sched.device_module = SimpleNamespace(
                    Stream=lambda priority: _Stream("schedule", log),
                    StreamContext=lambda stream: mock.MagicMock(),
                )
                with mock.patch.object(
                    scheduler_module, "is_cuda", return_value=cuda
                ), mock.patch.object(
                    scheduler_module, "use_mlx", return_value=False
                ), mock.patch.object(
                    scheduler_module, "dispatch_event_loop"
                ) as dispatch:
                    sched.run_event_loop()
                dispatch.assert_called_once_with(sched)
                self.assertEqual(sched._war_barrier_enabled, cuda)
                self.assertEqual(sched._host_orders_schedule, not cuda)
                self.assertEqual(sched.future_map.host_waits_for_publish, not cuda)


class TestPreemptionWaitsForTheVerify(CustomTestCase):
    def _schedule(self, host_orders):
        """The calls of a prefill schedule whose one waiting request finds the
        running batch full and tries to preempt it."""
        log = []
        sched = Scheduler.__new__(Scheduler)
        sched._host_orders_schedule = host_orders
        sched.grammar_manager = SimpleNamespace(has_waiting_grammars=lambda: False)
        sched.enable_hierarchical_cache = sched.is_hybrid_swa = False
        sched.enable_priority_preemption = True
        sched.running_batch = SimpleNamespace(batch_is_full=False, reqs=[None] * 4)
        sched.waiting_queue = [SimpleNamespace(rid="new")]
        sched.chunked_req = None
        sched.get_num_allocatable_reqs = lambda running_bs: 0
        sched.policy = SimpleNamespace(calc_priority=lambda *args: None)
        sched.chunked_prefill_size = 256
        sched.enable_dynamic_chunking = sched.is_mixed_chunk = False
        sched.enable_lora = False
        sched.disaggregation_mode = scheduler_module.DisaggregationMode.NULL
        for name in ("page_size", "tree_cache", "token_to_kv_pool_allocator",
                     "new_token_ratio", "max_prefill_tokens", "max_prefill_bs",
                     "priority_scheduling_preemption_threshold",
                     "max_running_requests", "dllm_config"):
            setattr(sched, name, None)
        sched.server_args = SimpleNamespace(prefill_max_requests=None)
        sched.resolve_seq_lens_cpu = lambda batch: log.append(
            "resolve running" if batch is sched.running_batch else "resolve other")
        adder = SimpleNamespace(
            can_run_list=[], new_chunked_req=None,
            preempt_to_schedule=lambda req, args: log.append("preempt") and False,
        )
        with mock.patch.object(scheduler_module, "PrefillAdder", return_value=adder):
            self.assertIsNone(sched._get_new_batch_prefill_raw(None))
        return log

    def test_off_cuda_the_running_batch_is_resolved_before_preemption(self):
        self.assertEqual(self._schedule(host_orders=True), ["resolve running", "preempt"])

    def test_with_the_barrier_preemption_is_unchanged(self):
        self.assertEqual(self._schedule(host_orders=False), ["preempt"])


class _Event:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def synchronize(self):
        self.log.append(f"{self.name}.synchronize()")


class TestResolveWaitsForThePublishOnTheHost(CustomTestCase):
    def _resolve(self, host_waits, needs_cpu_seq_lens):
        log = []
        fmap = object.__new__(FutureMap)
        stream = _Stream("schedule", log)
        fmap.device_module = SimpleNamespace(current_stream=lambda: stream)
        fmap.new_seq_lens_buf = torch.tensor([0, 7, 9, 4])
        fmap.needs_cpu_seq_lens = needs_cpu_seq_lens
        fmap.seq_lens_copy_stream = None
        fmap.host_waits_for_publish = host_waits
        fi = SimpleNamespace(
            seq_lens_pending=True,
            indices=torch.tensor([2, 1]),
            publish_events=[_Event("publish", log)],
        )
        batch = SimpleNamespace(
            spec_info=SimpleNamespace(future_indices=fi), req_pool_indices_cpu=None
        )
        fmap.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens.tolist(), [9, 7])
        return log, batch

    def test_off_cuda_the_resolve_waits_for_the_verify(self):
        # With the pull skipped (Triton) as with it kept.
        for needs in (False, True):
            with self.subTest(needs_cpu_seq_lens=needs):
                log, batch = self._resolve(host_waits=True, needs_cpu_seq_lens=needs)
                self.assertEqual(log, ["publish.synchronize()"])
                if needs:
                    self.assertEqual(batch.seq_lens_cpu.tolist(), [9, 7])
                else:
                    self.assertIsNone(batch.seq_lens_cpu)

    def test_with_the_barrier_the_resolve_only_waits_on_the_stream(self):
        log, batch = self._resolve(host_waits=False, needs_cpu_seq_lens=False)
        self.assertEqual(log, ["schedule.wait_event(publish)"])
        self.assertIsNone(batch.seq_lens_cpu)


if __name__ == "__main__":
    unittest.main()
