"""FutureMap: a resolve waits for the publish of its own batch's rows.

Each publish records a new event on its stream and the batch's FutureIndices
keeps it; `resolve_seq_lens_cpu` (and the pinned host copy) wait on exactly
those events. The case that needs it: a disaggregated decode server's
`process_prebuilt` publishes a new batch's known lengths on the schedule
stream while the running batch's verify is still writing its rows on the
forward stream; the running batch's resolve in the same iteration must wait
for that verify, not for the prebuilt publish (a shared event re-recorded by
every publish did the latter, reading lengths one verify behind on device
and host alike). Streams and events are recording fakes (no GPU); every
event remembers the stream and the step of its last record.
"""

import unittest

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.managers.overlap_utils import FutureMap  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from schedule_batch_fakes import (  # noqa: E402
    POOL,
    fake_req_to_token_pool,
    spec_v2_decode_batch,
)
from stream_fakes import use_fake_streams  # noqa: E402


def _batch(slots, lens):
    return spec_v2_decode_batch(slots, lens, algo=SpeculativeAlgorithm.EAGLE3)


def _relay():
    fm = FutureMap(
        torch.device("cpu"), SpeculativeAlgorithm.EAGLE3, fake_req_to_token_pool(POOL, 16)
    )
    return fm, use_fake_streams(fm)


def _publish(fm, dm, batch, lens, *, stream, label, relayed=True):
    """Publish `lens` for `batch` as the step `label` running on `stream`."""
    dm.label = label
    with dm.stream(getattr(dm, f"{stream}_stream")):
        fm.publish(batch.spec_info.future_indices, torch.tensor(lens), relayed=relayed)
    dm.label = None


def _verify_then_known_lengths(stream, label):
    """The running batch (slots 1, 2) publishes its verified lengths
    [11, 21] on the forward stream; then another batch (slot 5, length 7)
    publishes lengths the schedule already knew, as `label` on `stream`.
    Returns the relay, its fake device module (waits cleared) and both."""
    fm, dm = _relay()
    running = _batch([1, 2], [10, 20])
    _publish(fm, dm, running, [11, 21], stream="forward", label="verify")
    other = _batch([5], [7])
    _publish(fm, dm, other, [7], stream=stream, label=label, relayed=False)
    dm.waits.clear()
    return fm, dm, running, other


class TestResolveWaitsForItsOwnPublish(CustomTestCase):
    def test_disagg_prebuilt_publish_does_not_stand_in_for_the_verify(self):
        # In the iteration after the verify, process_prebuilt fills the relay
        # for a new disaggregated batch on the schedule stream.
        fm, dm, running, _ = _verify_then_known_lengths("schedule", "prebuilt")

        fm.resolve_seq_lens_cpu(running)

        self.assertEqual(dm.waits, [("schedule", ("forward", "verify"))])
        self.assertEqual(running.seq_lens_cpu.tolist(), [11, 21])

    def test_a_prefill_publish_does_not_delay_a_decode_resolve(self):
        fm, dm, running, _ = _verify_then_known_lengths("forward", "prefill")

        fm.resolve_seq_lens_cpu(running)

        # only the verify: the prefill forward launched after it is not waited for
        self.assertEqual(dm.waits, [("schedule", ("forward", "verify"))])

    def test_merged_batch_waits_for_both_sides(self):
        fm, dm, running, prebuilt = _verify_then_known_lengths("schedule", "prebuilt")
        # merged unresolved (a path that merges first): resolved as a whole
        running.merge_batch(prebuilt)

        fm.resolve_seq_lens_cpu(running)

        self.assertEqual(
            sorted(dm.waits),
            [("schedule", ("forward", "verify")), ("schedule", ("schedule", "prebuilt"))],
        )
        self.assertEqual(running.seq_lens_cpu.tolist(), [11, 21, 7])

if __name__ == "__main__":
    unittest.main()
