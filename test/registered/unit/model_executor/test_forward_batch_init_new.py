"""Patch A: ForwardBatch.init_new builds straight from a ScheduleBatch.

ModelWorkerBatch is gone. What get_model_worker_batch used to derive must
still come out of init_new, and the per-forward overrides that workers used
to set on the ModelWorkerBatch now live on the ScheduleBatch as one-shot
fields: init_new consumes each and resets it, so it never leaks into the next
forward of the same (long-lived) batch.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.model_executor import forward_batch_info  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)


def _req(i, grammar=None):
    return SimpleNamespace(
        rid=f"r{i}", lora_id=f"lora{i}", grammar=grammar, dllm_block_offset=0
    )


def _model_runner():
    # Only what init_new reads on a plain (no LoRA / mrope / ngram / SWA) model.
    return SimpleNamespace(
        req_to_token_pool=None,
        token_to_kv_pool=None,
        attn_backend=None,
        device="cpu",
        server_args=SimpleNamespace(
            attention_backend="torch_native", enable_lora=False
        ),
        use_ngram_embedding=False,
        model_is_mrope=False,
        is_hybrid_swa=False,
    )


def _decode_batch(**kwargs):
    seq_lens = torch.tensor([5, 7], dtype=torch.int64)
    fields = dict(
        reqs=[_req(0), _req(1)],
        forward_mode=ForwardMode.DECODE,
        input_ids=torch.tensor([11, 12], dtype=torch.int64),
        req_pool_indices=torch.tensor([1, 2], dtype=torch.int64),
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone(),
        seq_lens_sum=12,
        out_cache_loc=torch.tensor([40, 41], dtype=torch.int64),
        # Stale values on purpose: a decode forward must not see them.
        prefix_lens=[3, 3],
        extend_lens=[2, 4],
        extend_logprob_start_lens=[0, 0],
    )
    fields.update(kwargs)
    return ScheduleBatch(**fields)


def _extend_batch(**kwargs):
    seq_lens = torch.tensor([5, 4], dtype=torch.int64)
    fields = dict(
        reqs=[_req(0), _req(1)],
        forward_mode=ForwardMode.EXTEND,
        input_ids=torch.arange(6, dtype=torch.int64),
        req_pool_indices=torch.tensor([1, 2], dtype=torch.int64),
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone(),
        seq_lens_sum=9,
        out_cache_loc=torch.arange(100, 106, dtype=torch.int64),
        prefix_lens=[2, 1],
        extend_lens=[3, 3],
        extend_num_tokens=6,
        extend_logprob_start_lens=[3, 3],
    )
    fields.update(kwargs)
    return ScheduleBatch(**fields)


class TestForwardBatchInitNew(CustomTestCase):
    def setUp(self):
        # The MoE-EP group is not initialised in a unit test; the padding
        # counter it decides is irrelevant here.
        patcher = mock.patch.object(
            forward_batch_info, "enable_num_token_non_padded", return_value=False
        )
        patcher.start()
        self.addCleanup(patcher.stop)
        self.runner = _model_runner()

    def _init(self, batch):
        return ForwardBatch.init_new(batch, self.runner)

    # --- one-shot overrides -------------------------------------------------

    def test_one_shot_fields_exist_with_defaults(self):
        batch = _decode_batch()
        self.assertIsNone(batch.capture_hidden_mode)
        self.assertIsNone(batch.seq_lens_cpu_cache)
        self.assertFalse(batch.return_hidden_states_before_norm)

    def test_init_new_consumes_each_override_and_resets_it(self):
        batch = _decode_batch()
        override = torch.tensor([9, 9], dtype=torch.int64)
        batch.capture_hidden_mode = CaptureHiddenMode.LAST
        batch.seq_lens_cpu_cache = override
        batch.return_hidden_states_before_norm = True

        fb = self._init(batch)

        self.assertEqual(fb.capture_hidden_mode, CaptureHiddenMode.LAST)
        self.assertIs(fb.seq_lens_cpu, override)
        self.assertTrue(fb.return_hidden_states_before_norm)
        # Reset to the defaults on the ScheduleBatch.
        self.assertIsNone(batch.capture_hidden_mode)
        self.assertIsNone(batch.seq_lens_cpu_cache)
        self.assertFalse(batch.return_hidden_states_before_norm)

        # The next forward of the same batch starts clean.
        fb2 = self._init(batch)
        self.assertEqual(fb2.capture_hidden_mode, CaptureHiddenMode.NULL)
        self.assertIs(fb2.seq_lens_cpu, batch.seq_lens_cpu)
        self.assertFalse(fb2.return_hidden_states_before_norm)

    def test_explicit_override_beats_derivation(self):
        batch = _decode_batch(return_hidden_states=True)
        batch.capture_hidden_mode = CaptureHiddenMode.NULL
        self.assertEqual(self._init(batch).capture_hidden_mode, CaptureHiddenMode.NULL)

    def test_without_cache_uses_batch_seq_lens_cpu(self):
        batch = _decode_batch()
        fb = self._init(batch)
        self.assertIs(fb.seq_lens_cpu, batch.seq_lens_cpu)
        self.assertEqual(fb.seq_lens_sum, 12)

    # --- capture mode derivation ---------------------------------------------

    def test_return_hidden_states_derives_full(self):
        spec = SimpleNamespace(capture_hidden_mode=CaptureHiddenMode.LAST)
        batch = _decode_batch(return_hidden_states=True, spec_info=spec)
        self.assertEqual(self._init(batch).capture_hidden_mode, CaptureHiddenMode.FULL)

    def test_spec_info_mode_is_taken(self):
        for mode in (CaptureHiddenMode.LAST, CaptureHiddenMode.FULL):
            spec = SimpleNamespace(capture_hidden_mode=mode)
            batch = _decode_batch(spec_info=spec)
            self.assertEqual(self._init(batch).capture_hidden_mode, mode)

    def test_spec_info_without_mode_derives_null(self):
        batch = _decode_batch(spec_info=SimpleNamespace())
        self.assertEqual(self._init(batch).capture_hidden_mode, CaptureHiddenMode.NULL)

    def test_no_spec_info_derives_null(self):
        batch = _decode_batch()
        self.assertEqual(self._init(batch).capture_hidden_mode, CaptureHiddenMode.NULL)

    # --- values get_model_worker_batch used to derive -------------------------

    def test_decode_has_no_extend_lengths(self):
        fb = self._init(_decode_batch())
        self.assertIsNone(fb.extend_seq_lens_cpu)
        self.assertIsNone(fb.extend_prefix_lens_cpu)
        self.assertIsNone(fb.extend_logprob_start_lens_cpu)
        self.assertTrue(torch.equal(fb.positions, torch.tensor([4, 6])))

    def test_extend_lengths_come_from_schedule_batch(self):
        batch = _extend_batch()
        fb = self._init(batch)
        self.assertEqual(fb.extend_seq_lens_cpu, [3, 3])
        self.assertEqual(fb.extend_prefix_lens_cpu, [2, 1])
        self.assertEqual(fb.extend_logprob_start_lens_cpu, [3, 3])
        self.assertEqual(fb.extend_num_tokens, 6)
        self.assertEqual(fb.extend_seq_lens.tolist(), [3, 3])
        self.assertEqual(fb.extend_prefix_lens.tolist(), [2, 1])
        self.assertEqual(fb.positions.tolist(), [2, 3, 4, 1, 2, 3])
        self.assertEqual(fb.extend_start_loc.tolist(), [0, 3])

    def test_per_request_lists_come_from_reqs(self):
        fb = self._init(_decode_batch())
        self.assertEqual(fb.lora_ids, ["lora0", "lora1"])
        self.assertEqual(fb.rids, ["r0", "r1"])

    def test_grammars_follow_current_reqs(self):
        grammar = object()
        info = SimpleNamespace(grammars="stale")
        batch = _decode_batch(
            reqs=[_req(0, grammar), _req(1)], sampling_info=info, has_grammar=True
        )
        fb = self._init(batch)
        self.assertIs(fb.sampling_info, info)
        self.assertEqual(info.grammars, [grammar, None])

        batch.has_grammar = False
        self._init(batch)
        self.assertIsNone(info.grammars)


if __name__ == "__main__":
    unittest.main()
