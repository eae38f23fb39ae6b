"""Patch P3: FutureMap's pinned host copy of the relayed seq_lens.

On CUDA, `resolve_seq_lens_cpu` gates a private copy stream on
the publish events of the batch, copies the relay buffer into a pinned host buffer
non-blocking, synchronizes that stream only, and picks the batch's rows by
`ScheduleBatch.req_pool_indices_cpu`. Elsewhere it keeps a plain `.cpu()`.
The CUDA stream/event objects are replaced by recording fakes here (no GPU),
so the order of the calls and the values the batch ends up with are checked;
the real pinned memory and stream are not exercised on CPU.
`req_pool_indices_cpu` must stay in step with `req_pool_indices` through every
ScheduleBatch transition that sets them.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.managers import schedule_batch  # noqa: E402
from sglang.srt.managers.overlap_utils import FutureMap  # noqa: E402
from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from schedule_batch_fakes import (  # noqa: E402
    POOL,
    fake_req_to_token_pool,
    spec_v2_decode_batch,
)
from stream_fakes import use_fake_streams  # noqa: E402


def _pool():
    return fake_req_to_token_pool(POOL, 16)


def _batch(slots, lens, with_cpu_indices=True):
    return spec_v2_decode_batch(
        slots, lens, algo=SpeculativeAlgorithm.EAGLE, with_cpu_indices=with_cpu_indices
    )


class _RecordingHostBuffer:
    """The pinned host buffer: records how it is filled, indexes like one."""

    def __init__(self, n, device_module, log, copies):
        self.data = torch.full((n,), -1, dtype=torch.int64)
        self.device_module, self.log, self.copies = device_module, log, copies

    def copy_(self, src, non_blocking=False):
        self.copies.append((self.device_module.active.name, non_blocking, src))
        self.log.append("copy_")
        self.data.copy_(src)
        return self

    def __getitem__(self, idx):
        return self.data[idx]


def _cuda_like_future_map():
    """A CPU FutureMap wired like the CUDA one (pinned buffer + copy stream)."""
    fm = FutureMap(torch.device("cpu"), SpeculativeAlgorithm.EAGLE, _pool())
    dm = use_fake_streams(fm)
    fm.seq_lens_copy_stream = dm.Stream("copy")

    copies = []
    fm.new_seq_lens_cpu_pinned = _RecordingHostBuffer(fm.buffer_len, dm, dm.log, copies)
    return fm, dm.log, copies


class TestHostCopyOffCuda(CustomTestCase):
    def test_cpu_future_map_has_no_pinned_buffer_or_stream(self):
        fm = FutureMap(torch.device("cpu"), SpeculativeAlgorithm.EAGLE, _pool())
        self.assertIsNone(fm.new_seq_lens_cpu_pinned)
        self.assertIsNone(fm.seq_lens_copy_stream)

    def test_plain_cpu_pull_values(self):
        fm = FutureMap(torch.device("cpu"), SpeculativeAlgorithm.EAGLE, _pool())
        batch = _batch([3, 1, 6], [10, 11, 12])
        fm.publish(batch.spec_info.future_indices, torch.tensor([13, 14, 15]))
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens.tolist(), [13, 14, 15])
        self.assertEqual(batch.seq_lens_cpu.tolist(), [13, 14, 15])
        self.assertEqual(batch.seq_lens_cpu.device.type, "cpu")
        self.assertEqual(batch.seq_lens_sum, 42)


class TestPinnedCopyStream(CustomTestCase):
    def test_private_stream_gated_on_publish_and_synced_alone(self):
        fm, log, copies = _cuda_like_future_map()
        # Rows of other slots hold other values: indexing must pick ours.
        fm.new_seq_lens_buf[:] = torch.arange(100, 100 + fm.buffer_len)
        batch = _batch([5, 2, 7], [10, 20, 30])
        fm.publish(batch.spec_info.future_indices, torch.tensor([12, 21, 33]))
        log.clear()
        fm.resolve_seq_lens_cpu(batch)

        self.assertEqual(batch.seq_lens.tolist(), [12, 21, 33])
        self.assertEqual(batch.seq_lens_cpu.tolist(), [12, 21, 33])
        self.assertEqual(batch.seq_lens_sum, 66)
        # Non-blocking copy of the relay buffer, issued on the copy stream.
        self.assertEqual(len(copies), 1)
        stream_name, non_blocking, src = copies[0]
        self.assertEqual((stream_name, non_blocking), ("copy", True))
        self.assertIs(src, fm.new_seq_lens_buf)
        # Schedule stream waits for the device gather; the copy stream waits
        # on the publish, copies, and only the copy stream is synchronized.
        self.assertEqual(
            log,
            [
                "schedule.wait_event",
                "copy.wait_event",
                "enter copy",
                "copy_",
                "exit copy",
                "copy.synchronize",
            ],
        )
        self.assertNotIn("schedule.synchronize", log)

    def test_copy_stream_waits_for_the_batchs_own_publish(self):
        # A later publish of another batch on the schedule stream (a disagg
        # prebuilt) must not stand in for the running batch's verify.
        fm, _, _ = _cuda_like_future_map()
        dm = fm.device_module
        running = _batch([1, 2], [10, 20])
        dm.label = "verify"
        with dm.stream(dm.forward_stream):
            fm.publish(running.spec_info.future_indices, torch.tensor([13, 24]))
        prebuilt = _batch([5], [7])
        dm.label = "prebuilt"
        fm.publish(prebuilt.spec_info.future_indices, torch.tensor([7]), relayed=False)
        dm.waits.clear()

        fm.resolve_seq_lens_cpu(running)

        self.assertEqual(
            dm.waits, [("schedule", ("forward", "verify")), ("copy", ("forward", "verify"))]
        )
        self.assertEqual(running.seq_lens_cpu.tolist(), [13, 24])

    def test_result_does_not_alias_the_pinned_buffer(self):
        fm, _, _ = _cuda_like_future_map()
        batch = _batch([1, 4], [5, 6])
        fm.publish(batch.spec_info.future_indices, torch.tensor([7, 8]))
        fm.resolve_seq_lens_cpu(batch)
        # A later pull overwrites the pinned buffer; the batch keeps its values.
        other = _batch([1, 4], [7, 8])
        fm.publish(other.spec_info.future_indices, torch.tensor([40, 50]))
        fm.resolve_seq_lens_cpu(other)
        self.assertEqual(batch.seq_lens_cpu.tolist(), [7, 8])
        self.assertEqual(other.seq_lens_cpu.tolist(), [40, 50])

    def test_filtered_and_merged_batch_reads_its_current_slots(self):
        fm, _, _ = _cuda_like_future_map()
        running = _batch([1, 3, 5], [10, 11, 12])
        fm.publish(running.spec_info.future_indices, torch.tensor([13, 14, 15]))
        fm.resolve_seq_lens_cpu(running)
        running.reqs[1].done = True
        running.filter_batch()
        self.assertEqual(running.req_pool_indices_cpu.tolist(), [1, 5])
        prefill = _batch([6], [4])
        fm.publish(prefill.spec_info.future_indices, prefill.seq_lens, relayed=False)
        running.merge_batch(prefill)
        self.assertEqual(running.req_pool_indices_cpu.tolist(), [1, 5, 6])
        fm.publish(running.spec_info.future_indices, torch.tensor([16, 17, 6]))
        fm.resolve_seq_lens_cpu(running)
        self.assertEqual(running.seq_lens_cpu.tolist(), [16, 17, 6])
        self.assertEqual(running.seq_lens.tolist(), [16, 17, 6])

    def test_missing_host_indices_fall_back_to_plain_cpu(self):
        fm, log, copies = _cuda_like_future_map()
        batch = _batch([2, 3], [5, 6], with_cpu_indices=False)
        fm.publish(batch.spec_info.future_indices, torch.tensor([7, 9]))
        fm.resolve_seq_lens_cpu(batch)
        self.assertEqual(batch.seq_lens_cpu.tolist(), [7, 9])
        self.assertEqual(copies, [])


class TestReqPoolIndicesCpuInStep(CustomTestCase):
    def assertInStep(self, batch):
        self.assertEqual(
            batch.req_pool_indices_cpu.tolist(), batch.req_pool_indices.tolist()
        )
        self.assertEqual(batch.req_pool_indices_cpu.device.type, "cpu")

    def test_filter(self):
        batch = _batch([4, 1, 7, 2], [5, 6, 7, 8])
        batch.reqs[0].done = batch.reqs[2].done = True
        batch.filter_batch()
        self.assertInStep(batch)
        self.assertEqual(batch.req_pool_indices_cpu.tolist(), [1, 2])
        batch.filter_batch(keep_indices=[1])
        self.assertInStep(batch)

    def test_merge(self):
        a, b = _batch([4, 1], [5, 6]), _batch([7], [8])
        a.merge_batch(b)
        self.assertInStep(a)
        self.assertEqual(a.req_pool_indices_cpu.tolist(), [4, 1, 7])

    def test_merge_with_a_side_lacking_the_host_copy(self):
        a, b = _batch([4, 1], [5, 6]), _batch([7], [8], with_cpu_indices=False)
        a.merge_batch(b)
        self.assertIsNone(a.req_pool_indices_cpu)

    def test_idle(self):
        batch = _batch([4, 1], [5, 6])
        with mock.patch.object(
            schedule_batch.SamplingBatchInfo, "from_schedule_batch", lambda *a: None
        ):
            batch.prepare_for_idle()
        self.assertInStep(batch)
        self.assertEqual(batch.req_pool_indices_cpu.numel(), 0)

    def test_prepare_for_extend(self):
        slots = [6, 3]
        batch = ScheduleBatch(
            reqs=[],
            forward_mode=ForwardMode.IDLE,
            device="cpu",
        )

        def fake_alloc_for_extend(b):
            return (
                torch.zeros(b.extend_num_tokens, dtype=torch.int64),
                torch.tensor(slots, dtype=torch.int64),
                slots,
            )

        captured = {}

        def stop_after_fields(self_):
            captured["cpu"] = self_.req_pool_indices_cpu
            captured["dev"] = self_.req_pool_indices
            raise _Stop

        class _Stop(Exception):
            pass

        # Run prepare_for_extend up to where its fields are set, on a batch
        # of two fake requests; the tail (sampling info, mamba) is cut off.
        reqs = []
        for n in (3, 4):
            r = mock.MagicMock()
            r.fill_ids = list(range(n))
            r.prefix_indices = torch.empty(0, dtype=torch.int64)
            r.extend_input_len = n
            r.origin_input_ids = list(range(n))
            r.output_ids = []
            r.input_embeds = None
            r.multimodal_inputs = None
            r.return_logprob = False
            r.extend_batch_idx = 0
            r.is_retracted = False
            r.retracted_stain = False
            reqs.append(r)
        batch.reqs = reqs
        batch.model_config = SimpleNamespace(
            is_encoder_decoder=False, is_matryoshka=False, vocab_size=32
        )
        server_args = SimpleNamespace(
            enable_mamba_extra_buffer=lambda: False, enable_mis=False
        )
        with mock.patch.object(
            schedule_batch, "alloc_for_extend", fake_alloc_for_extend
        ), mock.patch.object(
            schedule_batch, "get_global_server_args", lambda: server_args
        ), mock.patch.object(
            schedule_batch.SamplingBatchInfo,
            "from_schedule_batch",
            lambda *a, **k: stop_after_fields(batch),
        ):
            try:
                batch.prepare_for_extend()
            except _Stop:
                pass
        self.assertEqual(captured["cpu"].tolist(), slots)
        self.assertEqual(captured["dev"].tolist(), slots)


if __name__ == "__main__":
    unittest.main()
