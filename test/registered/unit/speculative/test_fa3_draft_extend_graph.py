"""The spec v2 draft extend captures a CUDA graph on FA3 as it does on Triton.

- fa3_draft_extend_graph_supported admits FlashAttentionBackend at FA3, MHA,
  topk 1, and nothing else (FA4, MLA, topk > 1, a device subclass, Triton).
- EagleDraftWorker.init_cuda_graphs builds the draft-extend graph runner for
  such a backend on CUDA; for the ones it refuses it keeps the eager path,
  and Triton keeps its graph.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention.flashattention_backend import (  # noqa: E402
    FlashAttentionBackend,
)
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend  # noqa: E402
from sglang.srt.speculative import eagle_worker_v2  # noqa: E402
from sglang.srt.speculative.eagle_worker_v2 import (  # noqa: E402
    EagleDraftWorker,
    fa3_draft_extend_graph_supported,
)


class _DeviceFlashAttentionBackend(FlashAttentionBackend):
    """Stands for a device port (MUSA, XPU) that subclasses FA3."""


def _fa(cls=FlashAttentionBackend, ver=3, use_mla=False):
    backend = object.__new__(cls)
    backend.fa_impl_ver = ver
    backend.use_mla = use_mla
    return backend


class TestSupported(CustomTestCase):
    def test_fa3_mha_topk1_only(self):
        self.assertTrue(fa3_draft_extend_graph_supported(_fa(), topk=1))
        refused = {
            "topk 4": (_fa(), 4),
            "fa4": (_fa(ver=4), 1),
            "mla": (_fa(use_mla=True), 1),
            "device subclass": (_fa(cls=_DeviceFlashAttentionBackend), 1),
            "triton": (object.__new__(TritonAttnBackend), 1),
            "none": (None, 1),
        }
        for name, (backend, topk) in refused.items():
            with self.subTest(name):
                self.assertFalse(fa3_draft_extend_graph_supported(backend, topk))


class _Runner:
    """A draft-extend graph runner that records the worker it was built for."""

    def __init__(self, worker):
        self.worker = worker


class TestInitCudaGraphs(CustomTestCase):
    def _init(self, backend, topk=1):
        worker = object.__new__(EagleDraftWorker)
        worker.server_args = SimpleNamespace(
            disable_cuda_graph=False, model_impl="auto"
        )
        worker.speculative_num_steps = 1  # no draft-decode graph to build
        worker.topk = topk
        worker.draft_extend_attn_backend = backend
        worker.target_worker = SimpleNamespace(device="cuda")
        worker.device, worker.gpu_id = "cuda", 0
        with mock.patch.multiple(
            eagle_worker_v2,
            _is_cuda=True,
            _is_npu=False,
            _is_hip=False,
            EAGLEDraftExtendCudaGraphRunner=_Runner,
            get_available_gpu_memory=lambda *a, **k: 80.0,
        ):
            worker.init_cuda_graphs()
        return worker

    def test_fa3_captures_the_draft_extend_graph(self):
        worker = self._init(_fa())
        self.assertIsInstance(worker.cuda_graph_runner_for_draft_extend, _Runner)
        self.assertIs(worker.cuda_graph_runner_for_draft_extend.worker, worker)

    def test_triton_still_captures(self):
        worker = self._init(object.__new__(TritonAttnBackend))
        self.assertIsInstance(worker.cuda_graph_runner_for_draft_extend, _Runner)

    def test_refused_backends_stay_eager(self):
        for name, backend, topk in (
            ("fa3 topk 4", _fa(), 4),
            ("fa4", _fa(ver=4), 1),
            ("fa3 mla", _fa(use_mla=True), 1),
        ):
            with self.subTest(name):
                worker = self._init(backend, topk)
                self.assertIsNone(worker.cuda_graph_runner_for_draft_extend)


if __name__ == "__main__":
    unittest.main()
