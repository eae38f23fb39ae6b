"""Patch D: spec v2 draft paths without the host seq_lens mirror.

- EAGLE draft's tree-mask seq_lens_sum: None -> bs * context length when the
  mask is not preallocated, 0 when it is; the given sum otherwise.
- TritonMultiStepDraftBackend's eager path passes whole kv_indices rows when
  seq_lens_sum is None (kernels read up to kv_indptr only).
- Draft extend (eagle_info_v2) without the mirror: prefix lengths stay on the
  device; on the graph path nothing is pulled, off it the host lengths are
  pulled once and equal those of the mirrored batch.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention.triton_backend import (  # noqa: E402
    TritonMultiStepDraftBackend,
)
from sglang.srt.model_executor import forward_batch_info  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative import eagle_info_v2  # noqa: E402
from sglang.srt.speculative.eagle_info import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.eagle_utils import tree_mask_seq_lens_sum  # noqa: E402


def _runner(context_len=4096):
    return SimpleNamespace(model_config=SimpleNamespace(context_len=context_len))


class TestTreeMaskSeqLensSum(CustomTestCase):
    def test_fallbacks(self):
        seq_lens = torch.tensor([10, 20, 30])
        given = SimpleNamespace(seq_lens=seq_lens, seq_lens_sum=60, spec_info=None)
        missing = SimpleNamespace(seq_lens=seq_lens, seq_lens_sum=None, spec_info=None)
        buf = torch.empty(8)
        self.assertEqual(tree_mask_seq_lens_sum(given, None, _runner()), 60)
        self.assertEqual(tree_mask_seq_lens_sum(given, buf, _runner()), 60)
        self.assertEqual(tree_mask_seq_lens_sum(missing, None, _runner()), 3 * 4096)
        self.assertEqual(tree_mask_seq_lens_sum(missing, buf, _runner()), 0)
        # The bound covers the exact sum a mirror would give.
        self.assertGreaterEqual(
            tree_mask_seq_lens_sum(missing, None, _runner()), int(seq_lens.sum())
        )
        # The draft input's bound, where prepare_for_decode set it, is tighter.
        missing.spec_info = SimpleNamespace(seq_lens_upper_bound=40)
        self.assertEqual(tree_mask_seq_lens_sum(missing, None, _runner()), 3 * 40)


class TestTritonMultiStepEagerSlices(CustomTestCase):
    def _run(self, seq_lens_sum):
        backend = object.__new__(TritonMultiStepDraftBackend)
        backend.topk, backend.speculative_num_steps = 2, 3
        backend.kv_indptr = torch.zeros((3, 16), dtype=torch.int32)
        seen = []
        fb = SimpleNamespace(
            batch_size=2,
            seq_lens_sum=seq_lens_sum,
            spec_info=SimpleNamespace(),
            req_pool_indices=None,
            req_to_token_pool=SimpleNamespace(req_to_token=None),
            seq_lens=None,
            positions=None,
        )
        buf = torch.arange(3 * 100).view(3, 100)
        with mock.patch(
            "sglang.srt.layers.attention.triton_backend.generate_draft_decode_kv_indices"
        ):
            backend.pool_len = backend.page_size = 1
            backend.common_template(
                fb, buf, lambda i, f: seen.append(f.spec_info.kv_indices.numel())
            )
        return seen

    def test_trimmed_with_sum_whole_rows_without(self):
        self.assertEqual(self._run(10), [10 * 2 + 4 * 1, 10 * 2 + 4 * 2])
        self.assertEqual(self._run(None), [100, 100])


class TestDraftExtendWithoutMirror(CustomTestCase):
    def _batch(self, with_cpu):
        seq = torch.tensor([7, 12])
        return SimpleNamespace(
            seq_lens=seq,
            seq_lens_cpu=seq.clone() if with_cpu else None,
            seq_lens_sum=19 if with_cpu else None,
            forward_mode=ForwardMode.DECODE,
            # the verify input of this forward, with the bound it carries
            spec_info=SimpleNamespace(seq_lens_upper_bound=20),
        )

    def _run(self, with_cpu, graph):
        batch = self._batch(with_cpu)
        captured = {}

        def fake_init_new(b, runner):
            captured["prefix_lens"] = b.prefix_lens
            return SimpleNamespace(
                seq_lens=b.seq_lens,
                seq_lens_cpu=b.seq_lens_cpu,
                seq_lens_sum=b.seq_lens_sum,
                extend_prefix_lens_cpu=(
                    b.prefix_lens if isinstance(b.prefix_lens, list) else None
                ),
                # Patch E marks the batch after the eager plan; harmless here.
                mark_forward_metadata_ready=lambda *a, **k: None,
            )

        pulls = []

        def counting_cpu(t, *a, **k):  # device-to-host copies on this path
            pulls.append(t)
            return t.clone()

        planned = []
        runner = SimpleNamespace(
            spec_algorithm=SimpleNamespace(is_standalone=lambda: False),
            attn_backend=SimpleNamespace(init_forward_metadata=planned.append),
        )
        graph_runner = SimpleNamespace(can_run=lambda fb: graph)
        with mock.patch.object(
            forward_batch_info.ForwardBatch, "init_new", staticmethod(fake_init_new)
        ), mock.patch.object(torch.Tensor, "cpu", counting_cpu):
            fb = EagleDraftInput().prepare_for_extend_to_fill_draft_kvcache(
                batch, torch.zeros(6, dtype=torch.int64), 3, runner, graph_runner
            )
        return batch, fb, captured, planned, len(pulls)

    def test_graph_path_pulls_nothing(self):
        batch, fb, captured, planned, pulls = self._run(with_cpu=False, graph=True)
        self.assertIsInstance(captured["prefix_lens"], torch.Tensor)
        self.assertEqual(captured["prefix_lens"].tolist(), [7, 12])
        self.assertEqual(fb.seq_lens.tolist(), [10, 15])
        self.assertIsNone(fb.seq_lens_cpu)
        self.assertIsNone(fb.seq_lens_sum)
        self.assertEqual(pulls, 0)
        self.assertEqual(planned, [])
        # the draft-extend input takes over the forward's bound
        self.assertEqual(batch.spec_info.seq_lens_upper_bound, 20)

    def test_eager_path_matches_the_mirrored_batch(self):
        _, with_mirror, cap_a, _, _ = self._run(with_cpu=True, graph=False)
        _, without, _, planned, pulls = self._run(with_cpu=False, graph=False)
        self.assertEqual(cap_a["prefix_lens"], [7, 12])
        self.assertEqual(pulls, 1)
        self.assertEqual(planned, [without])
        self.assertEqual(without.extend_prefix_lens_cpu, with_mirror.extend_prefix_lens_cpu)
        self.assertEqual(without.seq_lens_cpu.tolist(), with_mirror.seq_lens_cpu.tolist())
        self.assertEqual(without.seq_lens_sum, with_mirror.seq_lens_sum)
        self.assertEqual(without.seq_lens.tolist(), with_mirror.seq_lens.tolist())


if __name__ == "__main__":
    unittest.main()
