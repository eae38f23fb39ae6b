"""Patch E: every pre-plan site leaves the batch marked.

Attention-suite style: the mock draft/model runner asserts, at forward time,
that the batch it receives is marked as planned, so a pre-plan site that
forgets ``mark_forward_metadata_ready`` fails here instead of silently
re-planning (the EAGLE draft CUDA-graph capture regression upstream's review
caught).
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative import eagle_draft_cuda_graph_runner  # noqa: E402
from sglang.srt.speculative import eagle_worker_v2  # noqa: E402
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (  # noqa: E402
    EAGLEDraftCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

VOCAB, HIDDEN = 16, 8


class _PlanningBackend:
    """Multi-step draft backend stand-in: counts plans of each kind."""

    def __init__(self, num_steps):
        self.plans = 0
        self.capture_plans = 0
        self.attn_backends = [object() for _ in range(num_steps)]

    def init_forward_metadata(self, forward_batch):
        self.plans += 1

    def init_forward_metadata_capture_cuda_graph(self, forward_batch):
        self.capture_plans += 1


class _MarkCheckingRunner:
    """Draft model runner stand-in: refuses an unmarked batch, like a real
    runner would silently re-plan it."""

    def __init__(self, test):
        self.test = test
        self.calls = 0

    def forward(self, forward_batch, **kwargs):
        self.test.assertNotIn("skip_attn_backend_init", kwargs)
        self.test.assertTrue(
            forward_batch.forward_metadata_ready,
            "pre-plan site forgot mark_forward_metadata_ready()",
        )
        self.test.assertFalse(forward_batch.needs_forward_metadata_init())
        self.calls += 1
        n = forward_batch.input_ids.shape[0]
        logits = torch.arange(n * VOCAB, dtype=torch.float32).reshape(n, VOCAB)
        return SimpleNamespace(
            logits_output=SimpleNamespace(
                next_token_logits=logits, hidden_states=torch.zeros(n, HIDDEN)
            )
        )


class TestEagleDraftCudaGraphCaptureMarks(CustomTestCase):
    def _runner(self, num_steps, draft_forward):
        bs_max, topk = 4, 1
        r = object.__new__(EAGLEDraftCudaGraphRunner)
        r.buffers = SimpleNamespace(
            req_pool_indices=torch.zeros(bs_max, dtype=torch.int64),
            seq_lens=torch.full((bs_max,), 3, dtype=torch.int64),
            seq_lens_cpu=torch.full((bs_max,), 3, dtype=torch.int64),
            extend_seq_lens=torch.ones(bs_max, dtype=torch.int32),
            out_cache_loc=torch.zeros(bs_max * topk * num_steps, dtype=torch.int64),
            positions=torch.zeros(bs_max * topk, dtype=torch.int64),
            mrope_positions=torch.zeros(3, bs_max * topk, dtype=torch.int64),
            hidden_states=torch.zeros(bs_max, HIDDEN),
            topk_p=torch.zeros(bs_max, topk),
            topk_index=torch.zeros(bs_max, topk, dtype=torch.int64),
            input_ids=torch.zeros(bs_max * topk, dtype=torch.int64),
        )
        r.extend_seq_lens_cpu = [1] * bs_max
        r.num_tokens_per_bs = topk
        r.speculative_num_steps = num_steps
        r.stream = None
        r.require_mlp_tp_gather = False
        r.require_attn_tp_gather = False
        r.model_runner = SimpleNamespace(
            spec_algorithm=SpeculativeAlgorithm.EAGLE,
            req_to_token_pool=None,
            token_to_kv_pool=None,
        )
        r.draft_attn_backend = _PlanningBackend(num_steps)
        r.eagle_worker = SimpleNamespace(
            draft_forward=draft_forward, speculative_num_steps=num_steps
        )
        r.deepep_adapter = SimpleNamespace(capture=lambda **kw: None)
        r._create_graph = lambda: SimpleNamespace(pool=lambda: None)
        r._capture_init = lambda run_once: run_once()
        r._capture_graph = lambda graph, pool, stream, run_once: run_once()
        return r

    def test_capture_batch_is_marked_before_draft_forward(self):
        # The real (v2) draft_forward runs inside capture; its per-step draft
        # runner refuses an unmarked batch.
        num_steps = 3
        worker = _draft_worker(self, num_steps)
        r = self._runner(num_steps=num_steps, draft_forward=worker.draft_forward)
        with mock.patch.object(
            eagle_draft_cuda_graph_runner, "set_global_graph_memory_pool"
        ), mock.patch.object(
            eagle_draft_cuda_graph_runner, "get_global_graph_memory_pool"
        ):
            graph, out = r.capture_one_batch_size(2, forward=None)
        parent_list, top_scores_index, draft_tokens = out
        self.assertEqual(tuple(draft_tokens.shape), (2, num_steps))
        # Warm-up + capture: two draft_forward runs, (num_steps - 1) forwards each.
        self.assertEqual(worker.draft_runner.calls, 2 * (num_steps - 1))
        self.assertEqual(r.draft_attn_backend.capture_plans, 1)
        self.assertEqual(r.draft_attn_backend.plans, 0)  # no eager re-plan


def _draft_worker(test, num_steps, topk=1):
    w = object.__new__(EagleDraftWorker)
    w.topk = topk
    w.speculative_num_steps = num_steps
    w.speculative_num_draft_tokens = num_steps + 1
    w.hot_token_id = None
    w.cuda_graph_runner = None
    w.req_to_token_pool = None
    w.tree_mask_mode = None
    w.draft_attn_backend = _PlanningBackend(num_steps)
    w.draft_runner = _MarkCheckingRunner(test)
    w.target_worker = SimpleNamespace(
        model_runner=SimpleNamespace(
            attn_backend=SimpleNamespace(
                get_verify_buffers_to_fill_after_draft=lambda: (None, None)
            )
        )
    )
    return w


class TestEagleV2DraftMarks(CustomTestCase):
    def _batch(self, bs, topk, num_steps):
        spec_info = EagleDraftInput(
            topk_p=torch.full((bs, topk), 0.5),
            topk_index=torch.arange(bs * topk).reshape(bs, topk),
            hidden_states=torch.zeros(bs, HIDDEN),
        )
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=bs,
            input_ids=torch.zeros(bs * topk, dtype=torch.int64),
            req_pool_indices=torch.arange(bs),
            seq_lens=torch.full((bs,), 4, dtype=torch.int64),
            out_cache_loc=torch.arange(bs * topk * num_steps),
            seq_lens_sum=4 * bs,
            positions=torch.full((bs * topk,), 3, dtype=torch.int64),
            spec_info=spec_info,
        )

    def _worker(self, num_steps, topk=1):
        return _draft_worker(self, num_steps, topk)

    def test_eager_draft_marks_before_multi_step_forward(self):
        num_steps, bs = 3, 2
        w = self._worker(num_steps)
        fb = self._batch(bs, 1, num_steps)
        mwb = SimpleNamespace(
            spec_info=SimpleNamespace(
                prepare_for_v2_draft=lambda *args: (fb, False),
                bonus_tokens=torch.zeros(bs, dtype=torch.int64),
                seq_lens_upper_bound=40,  # set by prepare_for_decode
            ),
            forward_mode=ForwardMode.DECODE,
            seq_lens=fb.seq_lens,
            seq_lens_sum=fb.seq_lens_sum,
        )
        built = {}

        def fake_build_tree(*args):
            built["draft_tokens"] = args[3]
            n = num_steps + 1
            return (None, None, None, None, None, torch.zeros(bs * n))

        with mock.patch.object(
            eagle_worker_v2, "build_tree_kernel_efficient", side_effect=fake_build_tree
        ):
            verify_input = w.draft(mwb)

        # Planned once, by the multi-step draft backend, then every step
        # forward ran on the marked batch (the runner asserts it).
        self.assertEqual(w.draft_attn_backend.plans, 1)
        self.assertEqual(w.draft_runner.calls, num_steps - 1)
        self.assertTrue(fb.forward_metadata_ready)
        self.assertIs(fb.forward_metadata_planner, w.draft_attn_backend)
        self.assertFalse(fb.forward_metadata_replan_equivalent)
        self.assertEqual(tuple(built["draft_tokens"].shape), (bs, num_steps))
        self.assertEqual(verify_input.spec_steps, num_steps)
        # the verify input carries the forward's bound on to the target
        self.assertEqual(verify_input.seq_lens_upper_bound, 40)

    def test_one_step_draft_does_not_plan_or_forward(self):
        w = self._worker(num_steps=1)
        fb = self._batch(2, 1, 1)
        mwb = SimpleNamespace(
            spec_info=SimpleNamespace(
                prepare_for_v2_draft=lambda *args: (fb, False),
                bonus_tokens=torch.zeros(2, dtype=torch.int64),
                seq_lens_upper_bound=None,  # a batch with the host mirror
            ),
            forward_mode=ForwardMode.DECODE,
            seq_lens=fb.seq_lens,
            seq_lens_sum=fb.seq_lens_sum,
        )
        with mock.patch.object(
            eagle_worker_v2,
            "build_tree_kernel_efficient",
            return_value=(None,) * 5 + (torch.zeros(2),),
        ):
            w.draft(mwb)
        self.assertEqual(w.draft_attn_backend.plans, 0)
        self.assertEqual(w.draft_runner.calls, 0)
        self.assertFalse(fb.forward_metadata_ready)


if __name__ == "__main__":
    unittest.main()
