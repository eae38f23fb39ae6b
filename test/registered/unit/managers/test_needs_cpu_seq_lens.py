"""Patch D: the host seq_lens pull of spec v2 overlap is optional.

- decide_needs_cpu_seq_lens truth table (two-batch overlap, mixed chunk,
  piecewise CUDA graph on/off, all-Triton, mixed backends, a backend without
  the flag, None slots), where the launch facts leave it to the backends.
- FutureMap with the flag off: device gather kept, seq_lens_cpu / sum None,
  no pinned buffer or copy stream; with it on: values as before.
- The scheduler collects the spec worker's spec_v2_attn_backends (or the
  model runner's backend without spec) and hands the decision to FutureMap;
  DP attention keeps the pull.
- ScheduleBatch filter / merge with and without the host mirror.
- Piecewise CUDA graph: which batches it can replay under EAGLE3, and that
  they carry scheduler-side CPU lengths (why its override is dropped).
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.configs.model_config import AttentionArch  # noqa: E402
from sglang.srt.layers.attention.base_attn_backend import (  # noqa: E402
    AttentionBackend,
)
from sglang.srt.layers.attention.triton_backend import (  # noqa: E402
    TritonAttnBackend,
    TritonMultiStepDraftBackend,
)
from sglang.srt.managers import overlap_utils  # noqa: E402
from sglang.srt.managers.overlap_utils import (  # noqa: E402
    FutureMap,
    decide_needs_cpu_seq_lens,
)
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    CaptureHiddenMode,
    ForwardMode,
)
from sglang.srt.model_executor.model_runner import ModelRunner  # noqa: E402
from sglang.srt.model_executor.piecewise_cuda_graph_runner import (  # noqa: E402
    PiecewiseCudaGraphRunner,
)
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2  # noqa: E402
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (  # noqa: E402
    MultiLayerEagleWorkerV2,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from schedule_batch_fakes import (  # noqa: E402
    POOL,
    fake_req_to_token_pool,
    spec_v2_decode_batch,
)


def _pool():
    return fake_req_to_token_pool(POOL, 16)


def _args(tbo=False, pcg=True, mixed=False, dp_attention=False):
    # An EAGLE3 launch whose attention backend the facts leave open
    # (attention_backend None): the backend objects decide.
    return SimpleNamespace(
        enable_two_batch_overlap=tbo,
        disable_piecewise_cuda_graph=not pcg,
        enable_mixed_chunk=mixed,
        enable_dp_attention=dp_attention,
        speculative_algorithm="EAGLE3",
        speculative_eagle_topk=1,
        attention_backend=None,
        prefill_attention_backend=None,
        decode_attention_backend=None,
        speculative_draft_attention_backend=None,
        speculative_attention_mode="prefill",
    )


def _model_runner(attn_backend=None):
    """A target model runner of an MHA model without sliding-window, local
    or cross attention, without context parallelism."""
    return SimpleNamespace(
        attn_backend=attn_backend,
        model_config=SimpleNamespace(
            attention_arch=AttentionArch.MHA,
            is_local_attention_model=False,
            is_encoder_decoder=False,
        ),
        sliding_window_size=None,
        token_to_kv_pool=None,
        attn_cp_size=1,
    )


def _triton():
    return object.__new__(TritonAttnBackend)


def _triton_draft():
    return object.__new__(TritonMultiStepDraftBackend)


class _NeedsCpu(AttentionBackend):
    def init_forward_metadata(self, forward_batch):
        pass


class _NoFlag:
    """A backend object that predates the flag (not an AttentionBackend)."""


def _batch(slots, lens):
    return spec_v2_decode_batch(slots, lens, algo=SpeculativeAlgorithm.EAGLE3)


class TestDecideNeedsCpuSeqLens(CustomTestCase):
    def test_truth_table(self):
        triton_v2 = [_triton(), _triton_draft(), _triton()]
        cases = [
            # (name, server args, backends, expected)
            ("all triton, pcg on (default)", _args(), triton_v2, False),
            ("all triton, pcg off", _args(pcg=False), triton_v2, False),
            ("two-batch overlap forces", _args(tbo=True), triton_v2, True),
            ("tbo, pcg off", _args(tbo=True, pcg=False), triton_v2, True),
            ("mixed chunk forces", _args(mixed=True), triton_v2, True),
            ("one backend needs it", _args(), [_triton(), _NeedsCpu()], True),
            ("needs it, pcg off", _args(pcg=False), [_NeedsCpu()], True),
            ("missing flag counts as True", _args(), [_triton(), _NoFlag()], True),
            ("None slots skipped", _args(), [_triton(), None, _triton_draft()], False),
            ("None slot beside a needer", _args(), [None, _NeedsCpu()], True),
            ("no backends at all", _args(), [], False),
        ]
        for name, args, backends, expected in cases:
            with self.subTest(name):
                self.assertIs(decide_needs_cpu_seq_lens(args, backends), expected)


class TestFutureMapFlag(CustomTestCase):
    def test_flag_off_keeps_gpu_gather_and_drops_host_mirror(self):
        fm = FutureMap(
            torch.device("cpu"), SpeculativeAlgorithm.EAGLE3, _pool(), False
        )
        batch = _batch([3, 1, 6], [10, 11, 12])
        fm.publish(batch.spec_info.future_indices, torch.tensor([13, 14, 15]))
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens.tolist(), [13, 14, 15])
        self.assertIsNone(batch.seq_lens_cpu)
        self.assertIsNone(batch.seq_lens_sum)
        self.assertFalse(batch.spec_info.future_indices.seq_lens_pending)

    def test_flag_off_creates_no_pinned_buffer_or_stream_even_on_cuda(self):
        with mock.patch.object(overlap_utils, "_is_cuda", True), mock.patch.object(
            torch, "empty", wraps=torch.empty
        ) as empty:
            fm = FutureMap(
                torch.device("cpu"), SpeculativeAlgorithm.EAGLE3, _pool(), False
            )
        self.assertIsNone(fm.new_seq_lens_cpu_pinned)
        self.assertIsNone(fm.seq_lens_copy_stream)
        self.assertFalse(
            any(c.kwargs.get("pin_memory") for c in empty.call_args_list)
        )

    def test_flag_on_values(self):
        fm = FutureMap(torch.device("cpu"), SpeculativeAlgorithm.EAGLE3, _pool(), True)
        batch = _batch([2, 5], [7, 8])
        fm.publish(batch.spec_info.future_indices, torch.tensor([9, 11]))
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens.tolist(), [9, 11])
        self.assertEqual(batch.seq_lens_cpu.tolist(), [9, 11])
        self.assertEqual(batch.seq_lens_sum, 20)


def _eagle_v2_worker(target, draft, extend):
    """An EAGLEWorkerV2 holding only the three backends of its decode step."""
    worker = object.__new__(EAGLEWorkerV2)
    worker._target_worker = SimpleNamespace(
        model_runner=SimpleNamespace(attn_backend=target)
    )
    worker._draft_worker = SimpleNamespace(
        draft_attn_backend=draft, draft_extend_attn_backend=extend
    )
    return worker


class TestSchedulerWiring(CustomTestCase):
    def _scheduler(self, spec, draft_worker=None, target_backend=None):
        sched = object.__new__(Scheduler)
        sched.spec_algorithm = spec
        sched.draft_worker = draft_worker
        sched.tp_worker = SimpleNamespace(model_runner=_model_runner(target_backend))
        sched.server_args = _args()
        return sched

    def test_eagle_v2_worker_lists_target_draft_and_extend(self):
        t, d, e = _triton(), _triton_draft(), _triton()
        worker = _eagle_v2_worker(t, d, e)
        self.assertEqual(worker.spec_v2_attn_backends, (t, d, e))
        sched = self._scheduler(SpeculativeAlgorithm.EAGLE3, worker)
        backends = sched._overlap_attn_backends()
        self.assertEqual(backends, [t, d, e])
        self.assertFalse(decide_needs_cpu_seq_lens(_args(), backends))
        worker._draft_worker.draft_extend_attn_backend = None  # unset slot
        self.assertFalse(decide_needs_cpu_seq_lens(_args(), sched._overlap_attn_backends()))
        worker._target_worker.model_runner.attn_backend = _NeedsCpu()
        self.assertTrue(decide_needs_cpu_seq_lens(_args(), sched._overlap_attn_backends()))

    def test_multi_layer_worker_lists_target_and_every_step(self):
        worker = object.__new__(MultiLayerEagleWorkerV2)
        t, s0, s1 = _triton(), _triton(), _NeedsCpu()
        worker._target_worker = SimpleNamespace(
            model_runner=SimpleNamespace(attn_backend=t)
        )
        worker._draft_worker = SimpleNamespace(draft_extend_attn_backend_list=[s0, s1])
        self.assertEqual(worker.spec_v2_attn_backends, (t, s0, s1))
        self.assertTrue(decide_needs_cpu_seq_lens(_args(), worker.spec_v2_attn_backends))

    def test_worker_without_the_list_keeps_the_pull(self):
        sched = self._scheduler(SpeculativeAlgorithm.EAGLE3, SimpleNamespace())
        self.assertTrue(decide_needs_cpu_seq_lens(_args(), sched._overlap_attn_backends()))

    def test_dp_attention_keeps_the_pull(self):
        # Its eager forwards are padded from the host lengths
        # (prepare_mlp_sync_batch).
        worker = _eagle_v2_worker(_triton(), _triton_draft(), _triton())
        sched = self._scheduler(SpeculativeAlgorithm.EAGLE3, worker)
        backends = sched._overlap_attn_backends()
        self.assertFalse(decide_needs_cpu_seq_lens(_args(), backends))
        self.assertTrue(decide_needs_cpu_seq_lens(_args(dp_attention=True), backends))

    def test_non_spec_uses_the_model_runner_backend(self):
        t = _triton()
        sched = self._scheduler(SpeculativeAlgorithm.NONE, None, t)
        self.assertEqual(sched._overlap_attn_backends(), [t])

    def test_init_overlap_passes_the_decision(self):
        worker = _eagle_v2_worker(_triton(), _triton_draft(), _triton())
        sched = self._scheduler(SpeculativeAlgorithm.EAGLE3, worker)
        sched.device = "cpu"
        sched.forward_stream = None
        sched.enable_overlap = True
        sched.req_to_token_pool = _pool()
        sched.tp_rank = 0
        for pcg, tbo, expected in ((True, False, False), (False, False, False), (True, True, True)):
            with self.subTest(pcg=pcg, tbo=tbo):
                sched.server_args = _args(tbo=tbo, pcg=pcg)
                with mock.patch(
                    "sglang.srt.managers.scheduler.use_mlx", lambda: False
                ):
                    sched.init_overlap()
                self.assertIs(sched.future_map.needs_cpu_seq_lens, expected)


class TestScheduleBatchWithoutHostMirror(CustomTestCase):
    def _none(self, batch):
        batch.seq_lens_cpu = None
        batch.seq_lens_sum = None
        return batch

    def test_filter_same_device_result_and_none_stays_none(self):
        with_cpu, without = _batch([1, 2, 3], [5, 6, 7]), self._none(_batch([1, 2, 3], [5, 6, 7]))
        for b in (with_cpu, without):
            b.reqs[1].done = True
            b.filter_batch()
        self.assertEqual(without.seq_lens.tolist(), with_cpu.seq_lens.tolist())
        self.assertEqual(with_cpu.seq_lens_cpu.tolist(), [5, 7])
        self.assertEqual(with_cpu.seq_lens_sum, 12)
        self.assertIsNone(without.seq_lens_cpu)
        self.assertIsNone(without.seq_lens_sum)

    def test_merge(self):
        a, b = _batch([1], [5]), _batch([2], [6])
        a.merge_batch(b)
        self.assertEqual((a.seq_lens_cpu.tolist(), a.seq_lens_sum), ([5, 6], 11))
        for left_none in (True, False):
            with self.subTest(left_none=left_none):
                a, b = _batch([1], [5]), _batch([2], [6])
                self._none(a if left_none else b)
                a.merge_batch(b)
                self.assertEqual(a.seq_lens.tolist(), [5, 6])
                self.assertIsNone(a.seq_lens_cpu)
                self.assertIsNone(a.seq_lens_sum)


class TestPiecewiseCudaGraphNeedsNoRelayedMirror(CustomTestCase):
    """Which batches can a piecewise replay see under EAGLE3, and where do
    their CPU lengths come from?"""

    def _pcg(self, capture_hidden_mode):
        return SimpleNamespace(
            capture_hidden_mode=capture_hidden_mode, max_num_tokens=4096
        )

    def _fb(self, mode, capture=CaptureHiddenMode.FULL):
        return SimpleNamespace(
            input_embeds=None,
            replace_embeds=None,
            forward_mode=mode,
            capture_hidden_mode=capture,
            input_ids=torch.zeros(8, dtype=torch.int64),
            return_logprob=False,
        )

    def test_target_verify_is_refused(self):
        # The only target forward of a spec v2 decode step that reaches
        # forward_extend: piecewise refuses it whatever else matches.
        pcg = self._pcg(CaptureHiddenMode.FULL)
        fb = self._fb(ForwardMode.TARGET_VERIFY)
        self.assertFalse(PiecewiseCudaGraphRunner.can_run(pcg, fb))
        self.assertTrue(PiecewiseCudaGraphRunner.can_run(pcg, self._fb(ForwardMode.EXTEND)))

    def test_draft_runners_get_no_piecewise_runner(self):
        # Draft decode / draft extend run on draft model runners, which
        # never build a piecewise runner.
        runner = SimpleNamespace(
            server_args=SimpleNamespace(disable_piecewise_cuda_graph=False),
            is_draft_worker=True,
        )
        ModelRunner.init_piecewise_cuda_graphs(runner)
        self.assertIsNone(runner.piecewise_cuda_graph_runner)

    def test_eagle_forces_mixed_chunk_off(self):
        # MIXED batches would carry the running batch's lengths; EAGLE3
        # never builds them (and the decision forces True if it did).
        import inspect

        from sglang.srt.server_args import ServerArgs

        src = inspect.getsource(ServerArgs._handle_speculative_decoding)
        block = src[src.index('if self.speculative_algorithm in ("EAGLE", "EAGLE3"') :]
        block = block[: block.index("\n        if self.speculative_algorithm", 10)] if "\n        if self.speculative_algorithm" in block[10:] else block
        self.assertIn("self.enable_mixed_chunk = False", block)

    def test_prefill_batches_carry_scheduler_lengths_without_the_relay(self):
        # With the flag off, a running decode batch loses its host mirror,
        # but a prefill batch (what piecewise replays) keeps the lengths the
        # scheduler computed: its publish is not relayed, so the resolve
        # never touches it.
        fm = FutureMap(
            torch.device("cpu"), SpeculativeAlgorithm.EAGLE3, _pool(), False
        )
        running = _batch([1, 2], [10, 11])
        fm.publish(running.spec_info.future_indices, torch.tensor([12, 13]))
        prefill = _batch([4, 5], [30, 40])
        prefill.forward_mode = ForwardMode.EXTEND
        fm.publish(prefill.spec_info.future_indices, prefill.seq_lens, relayed=False)
        fm.resolve_seq_lens_cpu(running)
        fm.resolve_seq_lens_cpu(prefill)
        self.assertIsNone(running.seq_lens_cpu)
        self.assertEqual(prefill.seq_lens_cpu.tolist(), [30, 40])
        self.assertEqual(prefill.seq_lens_sum, 70)
        # The decision no longer forces the pull for piecewise graphs.
        self.assertFalse(
            decide_needs_cpu_seq_lens(_args(pcg=True), [_triton(), _triton_draft()])
        )


if __name__ == "__main__":
    unittest.main()
