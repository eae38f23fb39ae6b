"""Stand-ins for the objects a ScheduleBatch holds, shared by the managers tests.

CPU tensors stand in for device ones. Imported as a sibling module, so the
test files still run both under pytest and as `python test_x.py`.
"""

import contextlib
import itertools
from types import SimpleNamespace

import torch

POOL = 8


class FakeReq:
    def __init__(self, slot, seq_len=1):
        self.req_pool_idx = slot
        self.origin_input_ids = list(range(seq_len - 1))
        self.output_ids = [1]
        self.kv_committed_len = seq_len
        self.kv_allocated_len = seq_len
        self.decode_batch_idx = 0
        self.done = False
        self.return_logprob = self.stream = False
        self.grammar = None

    def finished(self):
        return self.done

    def set_extend_input_len(self, n):
        self.extend_input_len = n


class FakeAllocator:
    page_size = 1

    def __init__(self):
        self.next = itertools.count(100)

    def alloc(self, n):
        return torch.tensor([next(self.next) for _ in range(n)], dtype=torch.int64)


class FakeTreeCache:
    page_size = 1

    def __init__(self):
        self.token_to_kv_pool_allocator = FakeAllocator()

    def supports_swa(self):
        return False

    def evictable_size(self):
        return 0


class FakeSamplingInfo:
    penalizer_orchestrator = SimpleNamespace(is_required=False)

    def filter_batch(self, *a):
        pass

    def merge_batch(self, *a):
        pass


def fake_req_to_token_pool(size=POOL, width=64):
    """ReqToTokenPool allocates size + 1 rows (row 0 is the padding row)."""
    pool = SimpleNamespace(
        size=size, req_to_token=torch.zeros((size + 1, width), dtype=torch.int32)
    )
    pool.write = lambda idx, val: pool.req_to_token.__setitem__(idx, val)
    return pool


def spec_v2_decode_batch(slots, lens, *, algo, with_cpu_indices=True):
    """An overlap spec-v2 decode ScheduleBatch whose next lengths come from
    the FutureMap relay (its spec_info carries the slots as future indices).
    Call after maybe_stub_sgl_kernel(): it imports the scheduler's modules."""
    from sglang.srt.managers.overlap_utils import FutureIndices
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    t = torch.tensor(lens, dtype=torch.int64)
    # the host copy of the slots exists from 0005 on; the earlier patches'
    # tests build the same batch without it
    extra = {}
    if "req_pool_indices_cpu" in ScheduleBatch.__dataclass_fields__:
        extra["req_pool_indices_cpu"] = (
            torch.tensor(slots, dtype=torch.int64) if with_cpu_indices else None
        )
    batch = ScheduleBatch(
        reqs=[FakeReq(s) for s in slots],
        model_config=SimpleNamespace(is_encoder_decoder=False, vocab_size=32),
        forward_mode=ForwardMode.DECODE,
        enable_overlap=True,
        spec_algorithm=algo,
        device="cpu",
        req_pool_indices=torch.tensor(slots, dtype=torch.int64),
        seq_lens=t.clone(),
        seq_lens_cpu=t.clone(),
        orig_seq_lens=t.clone().to(torch.int32),
        seq_lens_sum=int(t.sum()),
        output_ids=torch.zeros(len(slots), dtype=torch.int64),
        sampling_info=FakeSamplingInfo(),
        **extra,
    )
    batch.spec_info = EagleDraftInput()
    batch.spec_info.future_indices = FutureIndices(batch.req_pool_indices)
    return batch


def run_batch_scheduler(model_worker, future_map=None, overlap=False):
    """A Scheduler holding only what `run_batch` reads (CPU, no streams:
    the forward-stream context is a no-op and events are None)."""
    from sglang.srt.managers.scheduler import Scheduler

    sched = object.__new__(Scheduler)
    sched.model_worker = model_worker
    sched.future_map = future_map
    sched.enable_overlap = overlap
    sched.forward_ct = 0
    sched.is_generation = True
    sched.enable_pdmux = False
    sched.forward_sleep_time = None
    sched._profile_batch_predicate = lambda batch: None
    sched.server_args = SimpleNamespace(enable_dp_attention=False)
    sched.forward_stream_ctx = contextlib.nullcontext()
    sched.forward_stream = SimpleNamespace(wait_stream=lambda stream: None)
    sched.schedule_stream = None
    sched.device_module = SimpleNamespace(Event=lambda: None)
    sched.batch_record_buf = [None] * 2
    sched.batch_record_ct = 0
    return sched
