"""The scheduler's per-iteration request broadcast to the other TP ranks.

Rank 0 reads the tokenizer's requests and every TP rank must schedule the
same ones, so each scheduler iteration broadcasts rank 0's list. Through the
TP group's shared-memory message queue where every rank of the group is on
this node, the other ranks get rank 0's lists in order, payloads larger
than a ring block included, and rank 0 does not wait for them; a rank that
exits ends the others at their next wait, as gloo does. A group spanning
nodes (a remote reader), elastic EP, DP attention or a group without a
queue take gloo, as in base. The start-up line says which and why.

Two ranks are two forked processes joined by a gloo group; nothing here
asserts how long anything took (HANG_GUARD_S only ends a hung test).
"""

import contextlib
import multiprocessing
import os
import threading
import traceback
import unittest
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing import shared_memory
from tempfile import TemporaryDirectory
from types import SimpleNamespace
from unittest import mock

import torch.distributed as dist

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.distributed import parallel_state  # noqa: E402
from sglang.srt.distributed.device_communicators import shm_broadcast  # noqa: E402
from sglang.srt.distributed.device_communicators.shm_broadcast import (  # noqa: E402
    MessageQueue,
)
from sglang.srt.managers import scheduler  # noqa: E402

CHUNK_BYTES = 1 << 12  # a small ring: the large list below overflows a block
CHUNKS = 3  # fewer than the lists sent: the ring wraps
HANG_GUARD_S = 30  # ends a test whose ranks hang; no assertion on time

_fork = multiprocessing.get_context("fork")


@dataclass
class FakeReq:
    rid: str
    input_ids: list


def _lists_rank0_sends():
    return [
        [],
        [FakeReq("a", list(range(64))), FakeReq("b", [7] * 30)],
        [FakeReq("big", list(range(CHUNK_BYTES)))],  # pickles past one block
        [],
        *[[FakeReq(f"r{i}", [i])] for i in range(2 * CHUNKS)],
    ]


def _args(**kw):
    return SimpleNamespace(
        **{"enable_dp_attention": False, "elastic_ep_backend": None, **kw}
    )


def _tp_group(rank, pg, with_queue=True):
    """The attributes of a TP GroupCoordinator that the broadcast reads."""
    return SimpleNamespace(
        world_size=2,
        rank=rank,
        ranks=[0, 1],
        cpu_group=pg,
        mq_broadcaster=(
            MessageQueue.create_from_process_group(pg, CHUNK_BYTES, CHUNKS)
            if with_queue
            else None
        ),
    )


def _start_scheduler_broadcast(rank, group):
    """Scheduler.init_request_broadcast on a bare scheduler: the queue it
    chose (None: gloo) and the line TP rank 0 logged."""
    sched = object.__new__(scheduler.Scheduler)
    sched.tp_group, sched.tp_rank, sched.server_args = group, rank, _args()
    with mock.patch.object(scheduler.logger, "info") as info:
        sched.init_request_broadcast()
    lines = [c.args[0] % c.args[1:] for c in info.call_args_list]
    return sched.reqs_broadcast_queue, lines


def _broadcast(rank, group, queue, reqs):
    return scheduler.broadcast_reqs_to_tp_ranks(
        reqs if rank == 0 else None, group, queue
    )


def _unlink_ring(name):
    """A forked rank ends with os._exit, which runs no ShmRingBuffer.__del__."""
    try:
        shared_memory.SharedMemory(name=name).unlink()
    except FileNotFoundError:
        pass


def _child(main, rank, init_file, conn, args):
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=2,
            timeout=timedelta(seconds=HANG_GUARD_S),
        )
        conn.send(main(rank, dist.group.WORLD, *args))
    except BaseException:
        conn.send(("child failed", traceback.format_exc()))


def _run_ranks(main, *args):
    """main(rank, pg, *args) on ranks 0 and 1, each a forked process; what
    each returned (None for a rank that exited without returning)."""
    with TemporaryDirectory() as tmp:
        procs, conns = [], []
        for rank in (0, 1):
            recv_end, send_end = _fork.Pipe(duplex=False)
            proc = _fork.Process(
                target=_child,
                args=(main, rank, os.path.join(tmp, "init"), send_end, args),
            )
            proc.start()
            send_end.close()
            procs.append(proc)
            conns.append(recv_end)
        try:
            got = []
            for rank, conn in enumerate(conns):
                if not conn.poll(HANG_GUARD_S):
                    raise AssertionError(f"rank {rank} hung")
                try:
                    got.append(conn.recv())
                except EOFError:
                    got.append(None)
        finally:
            for proc in procs:
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
    for result in got:
        if isinstance(result, tuple) and result[0] == "child failed":
            raise AssertionError(result[1])
    return got


def _queue_main(rank, pg, rank0_sent):
    group = _tp_group(rank, pg)
    queue, lines = _start_scheduler_broadcast(rank, group)
    lists = _lists_rank0_sends()
    ahead = CHUNKS - 1  # fewer lists than the ring has blocks
    got = []
    if rank == 0:
        got += [_broadcast(rank, group, queue, reqs) for reqs in lists[:ahead]]
        rank0_sent.set()  # rank 1 has read none of them yet
    elif not rank0_sent.wait(HANG_GUARD_S):
        raise AssertionError("rank 0 did not send ahead of rank 1")
    got += [_broadcast(rank, group, queue, reqs) for reqs in lists[len(got):]]
    dist.barrier()  # rank 0 keeps the ring until rank 1 has read
    if rank == 0:
        _unlink_ring(group.mq_broadcaster.buffer.shared_memory.name)
    return queue is group.mq_broadcaster, lines, got


def _spans_nodes_main(rank, pg):
    # the reader is on another node: it becomes the queue's remote reader
    with mock.patch.object(
        parallel_state, "in_the_same_node_as", lambda pg, source_rank=0: [True, False]
    ), mock.patch.object(shm_broadcast, "get_local_ip_auto", lambda _: "127.0.0.1"):
        group = _tp_group(rank, pg)
    assert group.mq_broadcaster.handle.local_reader_ranks == []
    queue, lines = _start_scheduler_broadcast(rank, group)
    got = [_broadcast(rank, group, queue, reqs) for reqs in _lists_rank0_sends()]
    return queue, lines, got


def _blind_rank1_main(rank, pg):
    # rank 1 cannot open a pidfd (a kernel before 5.3); rank 0 can
    group = _tp_group(rank, pg)
    blind = mock.patch.object(
        shm_broadcast.os, "pidfd_open", side_effect=OSError(38, "ENOSYS")
    )
    with blind if rank == 1 else contextlib.nullcontext():
        queue, lines = _start_scheduler_broadcast(rank, group)
    got = [_broadcast(rank, group, queue, reqs) for reqs in _lists_rank0_sends()]
    dist.barrier()
    if rank == 0:
        _unlink_ring(group.mq_broadcaster.buffer.shared_memory.name)
    return queue, lines, got


def _on_first_wait(then):
    """Patch os.sched_yield (the queue's wait loops yield at first) so that
    the first wait of this process calls then()."""
    real, fired = os.sched_yield, []

    def sched_yield():
        if not fired:
            fired.append(1)
            then()
        real()

    return mock.patch.object(shm_broadcast.os, "sched_yield", sched_yield)


def _peer_exits_main(rank, pg, survivor, waiting):
    group = _tp_group(rank, pg)
    queue, _ = _start_scheduler_broadcast(rank, group)
    assert queue is group.mq_broadcaster
    if rank != survivor:
        if not waiting.wait(HANG_GUARD_S):
            raise AssertionError("the survivor never waited")
        os._exit(1)  # no clean-up, no goodbye: as a crashed rank
    name = queue.buffer.shared_memory.name
    try:
        with _on_first_wait(waiting.set):
            if rank == 0:  # the writer waits once the ring is full
                for i in range(CHUNKS + 1):
                    _broadcast(rank, group, queue, [FakeReq(f"r{i}", [i])])
            else:  # the reader waits for rank 0's next list
                _broadcast(rank, group, queue, None)
        return "returned"
    except shm_broadcast.PeerExitedError as e:
        where = [frame.name for frame in traceback.extract_tb(e.__traceback__)]
        return type(e).__name__, str(e), where
    finally:
        _unlink_ring(name)


class TestBroadcastReqsToTpRanks(CustomTestCase):
    def test_queue_gives_every_rank_rank0s_lists_in_order(self):
        rank0, rank1 = _run_ranks(_queue_main, _fork.Event())
        for used_queue, _, got in (rank0, rank1):
            self.assertTrue(used_queue)
            self.assertEqual(got, _lists_rank0_sends())
        self.assertEqual(
            rank0[1], ["sglpatch: request broadcast over the TP shared-memory queue"]
        )
        self.assertEqual(rank1[1], [])

    def test_a_group_spanning_nodes_takes_gloo(self):
        rank0, rank1 = _run_ranks(_spans_nodes_main)
        for queue, _, got in (rank0, rank1):
            self.assertIsNone(queue)
            self.assertEqual(got, _lists_rank0_sends())
        self.assertEqual(
            rank0[1], ["sglpatch: request broadcast over gloo: the TP group spans nodes"]
        )

    def test_ranks_take_gloo_together_when_one_cannot_watch_the_others(self):
        rank0, rank1 = _run_ranks(_blind_rank1_main)
        for queue, _, got in (rank0, rank1):
            self.assertIsNone(queue)
            self.assertEqual(got, _lists_rank0_sends())
        (line,) = rank0[1]
        self.assertTrue(
            line.startswith(
                "sglpatch: request broadcast over gloo: the TP ranks cannot "
                "watch each other's processes (no pidfd for process "
            ),
            line,
        )

    def test_reader_raises_when_rank0_exits_while_it_waits(self):
        rank0, rank1 = _run_ranks(_peer_exits_main, 1, _fork.Event())
        self.assertIsNone(rank0)
        self.assertEqual(rank1[0], "PeerExitedError")
        self.assertIn("has exited", rank1[1])
        self.assertIn("acquire_read", rank1[2])

    def test_writer_raises_when_a_reader_exits_while_it_waits(self):
        rank0, rank1 = _run_ranks(_peer_exits_main, 0, _fork.Event())
        self.assertIsNone(rank1)
        self.assertEqual(rank0[0], "PeerExitedError")
        self.assertIn("has exited", rank0[1])
        self.assertIn("acquire_write", rank0[2])


def _writer_with_remote_readers(n_reader, n_local_reader):
    return MessageQueue(
        n_reader=n_reader,
        n_local_reader=n_local_reader,
        local_reader_ranks=list(range(1, n_local_reader + 1)),
        max_chunk_bytes=CHUNK_BYTES,
        max_chunks=CHUNKS,
        connect_ip="127.0.0.1",
    )


class TestRequestBroadcastPath(CustomTestCase):
    """The path chosen before any collective: no process group needed."""

    def _path(self, world_size, queue, **args):
        group = SimpleNamespace(world_size=world_size, mq_broadcaster=queue)
        group.cpu_group = None  # a collective here would fail
        return scheduler.setup_request_broadcast(group, _args(**args))

    def test_remote_readers_take_gloo(self):
        # --tp 16 --nnodes 2: rank 0's node holds 7 readers, 8 are remote
        # (here: 4 ranks, 1 local reader, 2 remote)
        queue, why = self._path(4, _writer_with_remote_readers(3, 1))
        self.assertIsNone(queue)
        self.assertEqual(why, "request broadcast over gloo: the TP group spans nodes")

    def test_only_remote_readers_take_gloo(self):
        queue, why = self._path(2, _writer_with_remote_readers(1, 0))
        self.assertIsNone(queue)
        self.assertIn("spans nodes", why)

    def test_elastic_ep_dp_attention_and_no_queue_take_gloo(self):
        local = SimpleNamespace(handle=SimpleNamespace(local_reader_ranks=[1]))
        for queue, args, reason in (
            (local, {"elastic_ep_backend": "mooncake"}, "elastic EP"),
            (local, {"enable_dp_attention": True}, "DP attention"),
            (None, {}, "SGLANG_USE_MESSAGE_QUEUE_BROADCASTER=0"),
        ):
            chosen, why = self._path(2, queue, **args)
            self.assertIsNone(chosen)
            self.assertTrue(why.startswith("request broadcast over gloo: "), why)
            self.assertIn(reason, why)
        self.assertEqual(self._path(1, None), (None, "no request broadcast: one TP rank"))

    def test_start_up_line_from_tp_rank_0_only(self):
        writer = _writer_with_remote_readers(1, 0)
        group = SimpleNamespace(world_size=2, mq_broadcaster=writer, cpu_group=None)
        self.assertEqual(
            _start_scheduler_broadcast(0, group),
            (None, ["sglpatch: request broadcast over gloo: the TP group spans nodes"]),
        )
        self.assertEqual(_start_scheduler_broadcast(1, group), (None, []))


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

        # the list comes at the reader's first sleep: it spun (yielded)
        # through the window, then slept READ_BACKOFF_S
        slept, yields = [], []
        real_yield = os.sched_yield

        def sleep(s):
            slept.append(s)
            if len(slept) == 1:
                writer.enqueue(["late"])

        def sched_yield():
            yields.append(1)
            real_yield()

        with mock.patch.object(shm_broadcast.time, "sleep", sleep), mock.patch.object(
            shm_broadcast.os, "sched_yield", sched_yield
        ):
            got = reader.dequeue()

        self.assertEqual(got, ["late"])
        self.assertEqual(slept, [shm_broadcast.READ_BACKOFF_S])
        self.assertGreater(len(yields), 0)


if __name__ == "__main__":
    unittest.main()
