"""The scheduler's per-iteration request broadcast to the other TP ranks.

Rank 0 reads the tokenizer's requests and every TP rank must schedule the
same ones, so each scheduler iteration broadcasts rank 0's list. Through the
TP group's shared-memory message queue, where the group has one, the other
ranks get rank 0's lists in order, payloads larger than a ring chunk
included; without one, through gloo as before. A reader waiting for the
next list sleeps once the spin window is over instead of holding a core.
"""

import functools
import os
import pickle
import tempfile
import threading
import time
import unittest
from dataclasses import dataclass
from types import SimpleNamespace

import torch.distributed as dist
import torch.multiprocessing as mp

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=30, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.distributed.device_communicators import shm_broadcast  # noqa: E402
from sglang.srt.distributed.device_communicators.shm_broadcast import (  # noqa: E402
    MessageQueue,
)
from sglang.srt.distributed.parallel_state import GroupCoordinator  # noqa: E402
from sglang.srt.managers.scheduler import broadcast_reqs_to_tp_ranks  # noqa: E402

CHUNK_BYTES = 1 << 16  # a small ring: the large list below overflows it
CHUNKS = 3  # fewer than the lists sent: the ring wraps


@dataclass
class FakeReq:
    rid: str
    input_ids: list


def _lists_rank0_sends():
    return [
        [],
        [FakeReq("a", list(range(256))), FakeReq("b", [7] * 300)],
        [FakeReq("big", list(range(CHUNK_BYTES)))],  # pickles past one chunk
        [],
        *[[FakeReq(f"r{i}", [i])] for i in range(2 * CHUNKS)],
    ]


def _group(rank, pg, with_queue):
    """The attributes of a TP GroupCoordinator that the broadcast reads."""
    group = SimpleNamespace(
        world_size=2,
        rank=rank,
        rank_in_group=rank,
        ranks=[0, 1],
        cpu_group=pg,
        mq_broadcaster=(
            MessageQueue.create_from_process_group(pg, CHUNK_BYTES, CHUNKS)
            if with_queue
            else None
        ),
    )
    group.broadcast_object = functools.partial(GroupCoordinator.broadcast_object, group)
    return group


def _rank_main(rank, init_file, out_dir, with_queue):
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=2
    )
    try:
        group = _group(rank, dist.group.WORLD, with_queue)
        got = [
            broadcast_reqs_to_tp_ranks(reqs if rank == 0 else None, group)
            for reqs in _lists_rank0_sends()
        ]
        with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
            pickle.dump(got, f)
    finally:
        dist.destroy_process_group()


LATE_S = 1.0  # how late rank 1 comes to the broadcasts below


def _late_reader_main(rank, init_file, out_dir, with_queue):
    """Rank 1 comes LATE_S late to two broadcasts (fewer than the ring's
    blocks); rank 0 records how long its two sends took."""
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=2
    )
    try:
        group = _group(rank, dist.group.WORLD, with_queue)
        dist.barrier()
        if rank == 1:
            time.sleep(LATE_S)
        t0 = time.monotonic()
        got = [
            broadcast_reqs_to_tp_ranks(reqs if rank == 0 else None, group)
            for reqs in ([], [FakeReq("a", [1, 2])])
        ]
        took = time.monotonic() - t0
        with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
            pickle.dump((got, took), f)
        dist.barrier()  # rank 0 keeps the queue until rank 1 has read
    finally:
        dist.destroy_process_group()


class TestBroadcastReqsToTpRanks(CustomTestCase):
    def _run(self, with_queue, main=_rank_main):
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(
                main,
                args=(os.path.join(tmp, "init"), tmp, with_queue),
                nprocs=2,
                join=True,
            )
            got = []
            for rank in (0, 1):
                with open(os.path.join(tmp, f"rank{rank}.pkl"), "rb") as f:
                    got.append(pickle.load(f))
        return got

    def test_shared_memory_queue_gives_every_rank_rank0s_lists_in_order(self):
        rank0, rank1 = self._run(with_queue=True)
        self.assertEqual(rank0, _lists_rank0_sends())
        self.assertEqual(rank1, _lists_rank0_sends())

    def test_without_a_queue_gloo_gives_the_same_lists(self):
        rank0, rank1 = self._run(with_queue=False)
        self.assertEqual(rank1, _lists_rank0_sends())
        self.assertEqual(rank0, rank1)

    def test_rank0_goes_on_without_waiting_for_a_late_rank(self):
        (sent, took), (got, _) = self._run(with_queue=True, main=_late_reader_main)
        self.assertEqual(got, sent)
        self.assertLess(took, LATE_S / 2)
        # through gloo, rank 0 waits at each broadcast until rank 1 joins it
        (sent, took), (got, _) = self._run(with_queue=False, main=_late_reader_main)
        self.assertEqual(got, sent)
        self.assertGreater(took, LATE_S * 0.8)


class TestWaitingReader(CustomTestCase):
    def test_a_waiting_reader_sleeps_past_the_spin_window(self):
        writer = MessageQueue(
            n_reader=1,
            n_local_reader=1,
            local_reader_ranks=[1],
            max_chunk_bytes=1024,
            max_chunks=2,
        )
        reader = MessageQueue.create_from_handle(writer.export_handle(), 1)
        ready = threading.Thread(target=writer.wait_until_ready)
        ready.start()
        reader.wait_until_ready()
        ready.join()

        wait_s = 0.4
        late = threading.Timer(wait_s, writer.enqueue, args=(["late"],))
        wall0, cpu0 = time.monotonic(), time.thread_time()
        late.start()
        got = reader.dequeue()
        wall, cpu = time.monotonic() - wall0, time.thread_time() - cpu0
        late.join()

        self.assertEqual(got, ["late"])
        self.assertGreaterEqual(wall, wait_s * 0.9)
        # a reader yielding in a tight loop holds its core for the whole
        # wait; sleeping past the window leaves it a small share of it
        self.assertLess(cpu, 0.3 * wall)
        self.assertLess(shm_broadcast.READ_SPIN_S, wait_s / 10)


if __name__ == "__main__":
    unittest.main()
