"""Patch B: which attention backends can serve the EAGLE v2 overlap plan stream.

With SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1, EAGLE v2 verify calls the target
backend's `update_verify_buffers_to_fill_after_draft` on every step. A backend
must either implement it or be refused at startup, never crash mid-serving.
"""

import copy
import importlib
import unittest
from types import SimpleNamespace

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention.base_attn_backend import (  # noqa: E402
    OVERLAP_PLAN_STREAM_ENV,
    AttentionBackend,
    check_overlap_plan_stream_support,
    supports_overlap_plan_stream,
)
from sglang.srt.layers.attention.trtllm_mha_backend import (  # noqa: E402
    TRTLLMHAAttnBackend,
    TRTLLMMHAMetadata,
)

from attention_backend_classes import (  # noqa: E402  (helper beside this file)
    attention_backend_classes_in_source,
    import_backend_class,
)

HOOK = "update_verify_buffers_to_fill_after_draft"


class TestTrtllmMhaVerifyHook(CustomTestCase):
    def _backend_with_verify_state(self):
        backend = object.__new__(TRTLLMHAAttnBackend)
        bs, pages = 4, 8
        backend.target_verify_metadata = {
            "cache_seqlens": torch.arange(bs, dtype=torch.int32) + 7,
            "cu_seqlens_q": torch.arange(bs + 1, dtype=torch.int32) * 4,
            "cu_seqlens_k": torch.tensor([0, 8, 17, 27, 38], dtype=torch.int32),
            "page_table": torch.arange(bs * pages, dtype=torch.int32).view(bs, pages),
        }
        backend.forward_metadata = TRTLLMMHAMetadata(
            cache_seqlens_int32=backend.target_verify_metadata["cache_seqlens"],
            max_seq_len_q=4,
            max_seq_len_k=11,
            cu_seqlens_q=backend.target_verify_metadata["cu_seqlens_q"],
            cu_seqlens_k=backend.target_verify_metadata["cu_seqlens_k"],
            page_table=backend.target_verify_metadata["page_table"],
        )
        return backend

    def test_hook_is_a_noop_on_verify_buffers(self):
        spec_info = SimpleNamespace(
            draft_token=torch.tensor([5, 6, 7, 8]),
            positions=torch.tensor([10, 11, 12, 13]),
            custom_mask=None,
        )
        for cuda_graph_bs in (4, None):
            with self.subTest(cuda_graph_bs=cuda_graph_bs):
                backend = self._backend_with_verify_state()
                before = copy.deepcopy(vars(backend))
                metadata = backend.forward_metadata
                self.assertIsNone(
                    backend.update_verify_buffers_to_fill_after_draft(
                        spec_info, cuda_graph_bs
                    )
                )
                self.assertEqual(set(vars(backend)), set(before))
                self.assertIs(backend.forward_metadata, metadata)
                for key, tensor in backend.target_verify_metadata.items():
                    self.assertTrue(torch.equal(tensor, before["target_verify_metadata"][key]), key)
                self.assertTrue(
                    torch.equal(metadata.page_table, before["forward_metadata"].page_table)
                )
                self.assertTrue(
                    torch.equal(
                        metadata.cache_seqlens_int32,
                        before["forward_metadata"].cache_seqlens_int32,
                    )
                )

    def test_trtllm_mha_serves_the_plan_stream(self):
        self.assertTrue(supports_overlap_plan_stream(TRTLLMHAAttnBackend))
        check_overlap_plan_stream_support(object.__new__(TRTLLMHAAttnBackend))


class TestEveryBackendServesOrIsRefused(CustomTestCase):
    def test_every_attention_backend_class(self):
        classes = attention_backend_classes_in_source()
        # The walk must see the backends this release is known to have.
        names = {name for _, name in classes}
        self.assertTrue(
            {"TritonAttnBackend", "FlashInferAttnBackend", "TRTLLMHAAttnBackend",
             "TorchNativeAttnBackend", "AscendAttnBackend"} <= names,
            names,
        )
        serving, refused = set(), set()
        for module_name, class_name in classes:
            with self.subTest(backend=class_name):
                cls = import_backend_class(module_name, class_name)
                self.assertTrue(issubclass(cls, AttentionBackend))
                backend = object.__new__(cls)
                if HOOK in _own_hooks(cls):
                    check_overlap_plan_stream_support(backend)  # must not raise
                    serving.add(class_name)
                    continue
                with self.assertRaises(ValueError) as ctx:
                    check_overlap_plan_stream_support(backend)
                message = str(ctx.exception)
                self.assertIn(class_name, message)
                self.assertIn(OVERLAP_PLAN_STREAM_ENV, message)
                refused.add(class_name)
        # The backends that implement the hook in 0.5.12.post1, plus trtllm_mha.
        self.assertTrue(
            {"TritonAttnBackend", "AiterAttnBackend", "AscendAttnBackend",
             "AscendHybridLinearAttnBackend", "TRTLLMHAAttnBackend"} <= serving,
            serving,
        )
        self.assertIn("FlashInferAttnBackend", refused)
        self.assertIn("FlashAttentionBackend", refused)


def _own_hooks(cls):
    """Hook names some class between cls and AttentionBackend defines itself."""
    found = set()
    for klass in cls.__mro__:
        if klass is AttentionBackend:
            break
        if HOOK in vars(klass):
            found.add(HOOK)
    return found


class TestEagleV2WorkersRefuseAtStartup(CustomTestCase):
    """The v2 workers check the target backend before loading the draft model."""

    def _init_worker(self, worker_module, worker_cls_name, draft_cls_name, backend_cls):
        import contextlib
        from unittest import mock

        from sglang.srt.environ import envs

        module = importlib.import_module(worker_module)
        drafts_built = []

        class DraftStub:
            def __init__(self, *args, **kwargs):
                drafts_built.append(args)

        target = SimpleNamespace(
            get_memory_pool=lambda: (None, None),
            model_runner=SimpleNamespace(
                attn_backend=object.__new__(backend_cls),
                model_config=SimpleNamespace(context_len=128),
            ),
        )
        server_args = SimpleNamespace(
            speculative_eagle_topk=1, speculative_num_steps=3,
            speculative_num_draft_tokens=4, device="cpu", page_size=1,
            speculative_algorithm="EAGLE3", speculative_adaptive=False,
            context_length=None,
        )
        worker_cls = getattr(module, worker_cls_name)
        with envs.SGLANG_ENABLE_OVERLAP_PLAN_STREAM.override(True), \
                mock.patch.object(module, draft_cls_name, DraftStub), \
                mock.patch.object(module, "_get_plan_stream",
                                  lambda device: (object(), contextlib.nullcontext())):
            worker = object.__new__(worker_cls)
            error = None
            try:
                worker_cls.__init__(worker, server_args, 0, 0, None, 0, 0, 0, 0, target)
            except ValueError as e:
                error = e
        return error, drafts_built

    def test_workers(self):
        from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

        workers = [
            ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2", "EagleDraftWorker"),
            ("sglang.srt.speculative.multi_layer_eagle_worker_v2",
             "MultiLayerEagleWorkerV2", "MultiLayerEagleDraftWorker"),
            # its own __init__, not EAGLEWorkerV2's: it must refuse as well
            ("sglang.srt.speculative.standalone_worker_v2",
             "StandaloneWorkerV2", "StandaloneDraftWorker"),
        ]
        for worker in workers:
            with self.subTest(worker=worker[1]):
                error, drafts = self._init_worker(*worker, FlashInferAttnBackend)
                self.assertIsNotNone(error)
                self.assertIn("FlashInferAttnBackend", str(error))
                self.assertIn(OVERLAP_PLAN_STREAM_ENV, str(error))
                self.assertEqual(drafts, [], "refused before the draft model loads")

                error, drafts = self._init_worker(*worker, TritonAttnBackend)
                self.assertIsNone(error)
                self.assertEqual(len(drafts), 1)


if __name__ == "__main__":
    unittest.main()
