"""With the overlap plan stream, the draft-extend prep waits for the verify.

SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1 moves the draft extend's batch
preparation onto a separate plan stream. That preparation reads the verify's
outputs (the accepted token ids become the draft extend's input ids; the
hidden states and lengths follow them), which the compute stream writes, so
the plan stream must wait for the compute stream before it starts. Both spec
v2 draft workers (EAGLE, multi-layer EAGLE) are checked with recording
streams (no GPU); the preparation stops the forward once it was reached.
"""

import contextlib
import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.speculative.eagle_info import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker  # noqa: E402
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (  # noqa: E402
    MultiLayerEagleDraftWorker,
)


class _Reached(Exception):
    pass


class _PlanStream:
    def __init__(self, log):
        self.log = log

    def wait_stream(self, other):
        self.log.append(("plan.wait_stream", other))


def _worker(cls, log):
    worker = cls.__new__(cls)
    worker.device = "cpu"
    worker.plan_stream = _PlanStream(log)

    @contextlib.contextmanager
    def plan_ctx():
        log.append("enter plan")
        yield
        log.append("exit plan")

    worker.plan_stream_ctx = plan_ctx()
    worker.speculative_num_steps = 3
    worker.speculative_num_draft_tokens = 4
    worker.draft_runner = worker.cuda_graph_runner_for_draft_extend = None
    worker.draft_runner_list = [None]
    return worker


class TestDraftExtendPrepWaitsForTheVerify(CustomTestCase):
    def test_plan_stream_waits_for_the_compute_stream_before_the_prep(self):
        for cls in (EagleDraftWorker, MultiLayerEagleDraftWorker):
            with self.subTest(worker=cls.__name__):
                log = []
                worker = _worker(cls, log)
                compute = torch.get_device_module("cpu").current_stream()
                result = SimpleNamespace(
                    logits_output=SimpleNamespace(hidden_states=torch.zeros(2, 4)),
                    accept_lens=torch.tensor([2, 3]),
                    next_token_ids=torch.arange(8),
                )
                batch = SimpleNamespace(seq_lens=torch.tensor([10, 20]))

                def prep(*args, **kwargs):
                    log.append("prep")
                    raise _Reached

                with mock.patch.object(
                    EagleDraftInput, "prepare_for_extend_to_fill_draft_kvcache", prep
                ), self.assertRaises(_Reached):
                    worker._draft_extend_for_decode(batch, result)
                self.assertIn("prep", log)
                waits = [i for i, c in enumerate(log) if isinstance(c, tuple)]
                self.assertEqual(len(waits), 1)
                self.assertIs(log[waits[0]][1], compute)
                self.assertLess(log.index("enter plan"), waits[0])
                self.assertLess(waits[0], log.index("prep"))

    def test_without_a_plan_stream_nothing_waits(self):
        log = []
        worker = _worker(EagleDraftWorker, log)
        worker.plan_stream = None
        worker.plan_stream_ctx = contextlib.nullcontext()
        result = SimpleNamespace(
            logits_output=SimpleNamespace(hidden_states=torch.zeros(1, 4)),
            accept_lens=torch.tensor([1]),
            next_token_ids=torch.arange(4),
        )

        def prep(*args, **kwargs):
            raise _Reached

        with mock.patch.object(
            EagleDraftInput, "prepare_for_extend_to_fill_draft_kvcache", prep
        ), self.assertRaises(_Reached):
            worker._draft_extend_for_decode(
                SimpleNamespace(seq_lens=torch.tensor([5])), result
            )
        self.assertEqual(log, [])


if __name__ == "__main__":
    unittest.main()
