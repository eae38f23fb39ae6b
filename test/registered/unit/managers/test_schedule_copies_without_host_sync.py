"""The schedule stream's copies of host lists to the GPU make no host sync.

Under the overlap schedule the schedule stream waits for the forward stream
at the top of every iteration (the write-after-read barrier), so a copy that
waits for the schedule stream waits for the whole in-flight forward: the
host then builds and launches the prefill only after the GPU has drained,
and the step loses its overlap. torch.tensor(values, device=cuda) is such a
copy (pageable memory, then a stream sync); so, per CUDA's documentation,
may be a non_blocking copy from pageable memory, which the driver may have
to stage after a stream sync. Each host-to-device copy of the preparation
must be a non_blocking copy from pinned memory, and no op may need the host
to learn a size from the GPU (a boolean-mask index).

No GPU here: the device is "cuda" by name, every tensor stays on the CPU,
and torch.tensor, torch.full and Tensor.to record what they were asked to
do. The tests run write_cache_indices, alloc_for_extend (page size 1 and
paged), SamplingBatchInfo.from_schedule_batch, the penalizers' preparation
and min-new-tokens' penalty, and the decode preparations that feed the
penalizers their last tokens (spec v2 and the plain overlap schedule), and
check their values.
"""

import unittest
from contextlib import ExitStack
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=2, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.mem_cache import common as mem_common  # noqa: E402
from sglang.srt.sampling import sampling_batch_info  # noqa: E402
from sglang.srt.sampling.penaltylib.frequency_penalty import (  # noqa: E402
    BatchedFrequencyPenalizer,
)
from sglang.srt.sampling.penaltylib.min_new_tokens import (  # noqa: E402
    BatchedMinNewTokensPenalizer,
)
from sglang.srt.sampling.penaltylib.presence_penalty import (  # noqa: E402
    BatchedPresencePenalizer,
)
from sglang.srt.sampling.penaltylib.repetition_penalty import (  # noqa: E402
    BatchedRepetitionPenalizer,
)
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.speculative.eagle_info_v2 import EagleDraftInputV2Mixin  # noqa: E402

DEVICE = "cuda"


def _on_device(device):
    return device is not None and torch.device(device).type != "cpu"


class _Copies:
    """Records, while active, every host-to-device copy: ("blocking", what)
    for one the host waits for, ("async", pinned) for a non_blocking one."""

    def __init__(self):
        self.log = []
        self._pinned = set()
        self._stack = ExitStack()

    def __enter__(self):
        real_tensor, real_full, real_to = torch.tensor, torch.full, torch.Tensor.to
        copies = self

        def tensor(data, *args, device=None, pin_memory=False, **kwargs):
            t = real_tensor(data, *args, **kwargs)
            if _on_device(device):
                copies.log.append(("blocking", "torch.tensor(..., device=)"))
            elif pin_memory:
                copies._pinned.add(id(t))
            return t

        def full(size, fill_value, *args, device=None, **kwargs):
            # A fill kernel on the device: no copy at all.
            return real_full(size, fill_value, *args, **kwargs)

        def factory(real):
            # zeros, ones, full_like: made on the device, no copy
            return lambda *args, device=None, **kwargs: real(*args, **kwargs)

        real_getitem, real_setitem = torch.Tensor.__getitem__, torch.Tensor.__setitem__

        def mask_index(index):
            return isinstance(index, torch.Tensor) and index.dtype == torch.bool

        def getitem(self, index):
            if mask_index(index):
                copies.log.append(("blocking", "boolean-mask index"))
            return real_getitem(self, index)

        def setitem(self, index, value):
            if mask_index(index):
                copies.log.append(("blocking", "boolean-mask index"))
            return real_setitem(self, index, value)

        def to(self, *args, **kwargs):
            target = kwargs.get("device", args[0] if args else None)
            if isinstance(target, (str, torch.device)) and _on_device(target):
                if kwargs.get("non_blocking", False):
                    copies.log.append(("async", id(self) in copies._pinned))
                else:
                    copies.log.append(("blocking", "Tensor.to(device)"))
                rest = {k: v for k, v in kwargs.items() if k == "dtype"}
                return real_to(self, **rest) if rest else self
            return real_to(self, *args, **kwargs)

        self._stack.enter_context(mock.patch.object(torch, "tensor", tensor))
        self._stack.enter_context(mock.patch.object(torch, "full", full))
        for name in ("zeros", "ones", "full_like"):
            self._stack.enter_context(
                mock.patch.object(torch, name, factory(getattr(torch, name)))
            )
        self._stack.enter_context(mock.patch.object(torch.Tensor, "__getitem__", getitem))
        self._stack.enter_context(mock.patch.object(torch.Tensor, "__setitem__", setitem))
        self._stack.enter_context(mock.patch.object(torch.Tensor, "to", to))
        self._stack.enter_context(
            mock.patch("sglang.srt.utils.common.is_pin_memory_available", return_value=True)
        )
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def assert_no_host_sync(self, case, copies=True):
        if copies:
            case.assertTrue(self.log, "no copy was made")
        blocking = [what for kind, what in self.log if kind == "blocking"]
        case.assertEqual(blocking, [], "copies the host waits for")
        case.assertTrue(
            all(pinned for kind, pinned in self.log if kind == "async"),
            "a non_blocking copy from pageable memory",
        )


class _Kernel:
    """write_req_to_token_pool_triton[grid](...): records its arguments."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args: self.calls.append(args)


def _server_args():
    return SimpleNamespace(
        attention_backend="triton",
        enable_deterministic_inference=False,
        enable_custom_logit_processor=False,
    )


class TestHostListToDevice(CustomTestCase):
    def test_on_the_cpu_it_is_the_list_as_a_tensor(self):
        from sglang.srt.utils.common import host_list_to_device

        # no pinning where there is no GPU: pin_memory would fail here
        t = host_list_to_device([3, 1, 2], torch.int64, "cpu")
        self.assertEqual((t.tolist(), t.dtype, t.device.type), ([3, 1, 2], torch.int64, "cpu"))
        self.assertEqual(host_list_to_device([], torch.float, "cpu").shape, (0,))

    def test_with_pinned_memory_the_copy_is_queued(self):
        from sglang.srt.utils.common import host_list_to_device

        with _Copies() as copies:
            t = host_list_to_device([4, 5], torch.int32, DEVICE)
        self.assertEqual(copies.log, [("async", True)])
        self.assertEqual((t.tolist(), t.dtype), ([4, 5], torch.int32))

    def test_without_pinned_memory_it_copies_as_before(self):
        # No CUDA (an Intel GPU, an NPU): nothing is pinned, and a
        # non_blocking copy from pageable memory is not one every device
        # stages safely; the copy blocks, as torch.tensor(..., device=) did.
        from sglang.srt.utils.common import host_list_to_device

        with _Copies() as copies, mock.patch(
            "sglang.srt.utils.common.is_pin_memory_available", return_value=False
        ):
            t = host_list_to_device([7], torch.int64, "xpu")
        self.assertEqual(copies.log, [("blocking", "Tensor.to(device)")])
        self.assertEqual(t.tolist(), [7])


class TestWriteCacheIndices(CustomTestCase):
    def test_the_prefix_pointers_reach_the_kernel_without_a_host_sync(self):
        prefixes = [torch.arange(3), torch.arange(5, 7), torch.empty(0, dtype=torch.int64)]
        pool = SimpleNamespace(device=DEVICE, req_to_token=torch.zeros(4, 16, dtype=torch.int32))
        kernel = _Kernel()
        lens = torch.tensor([3, 2, 0])
        with mock.patch.object(mem_common, "write_req_to_token_pool_triton", kernel), \
                mock.patch.object(mem_common, "get_global_server_args", _server_args), \
                _Copies() as copies:
            mem_common.write_cache_indices(
                torch.arange(6), torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]),
                lens, lens, lens + 2, lens + 2, torch.full((3,), 2), torch.full((3,), 2),
                prefixes, pool,
            )
        copies.assert_no_host_sync(self)
        (args,) = kernel.calls
        pointers = args[2]
        self.assertEqual(pointers.dtype, torch.uint64)
        self.assertEqual(pointers.tolist(), [t.data_ptr() for t in prefixes])


class TestAllocForExtend(CustomTestCase):
    def _batch(self, page_size):
        reqs = [
            SimpleNamespace(prefix_indices=torch.tensor([8, 9, 10])),
            SimpleNamespace(prefix_indices=torch.empty(0, dtype=torch.int64)),
        ]
        return SimpleNamespace(
            maybe_evict_swa=lambda: None,
            reqs=reqs,
            prefix_lens=[3, 0],
            extend_lens=[2, 4],
            extend_num_tokens=6,
            device=DEVICE,
            seq_lens=torch.tensor([5, 4]),
            seq_lens_cpu=torch.tensor([5, 4]),
            req_to_token_pool=SimpleNamespace(
                device=DEVICE, req_to_token=torch.zeros(4, 16, dtype=torch.int32)
            ),
            tree_cache=SimpleNamespace(page_size=page_size),
        )

    def _run(self, batch):
        paged = {}

        def alloc_paged(**kwargs):
            paged.update(kwargs)
            return torch.arange(6)

        kernel = _Kernel()
        with mock.patch.object(mem_common, "alloc_req_slots", return_value=[2, 3]), \
                mock.patch.object(mem_common, "alloc_token_slots", return_value=torch.arange(6)), \
                mock.patch.object(mem_common, "alloc_paged_token_slots_extend", alloc_paged), \
                mock.patch.object(mem_common, "write_req_to_token_pool_triton", kernel), \
                mock.patch.object(mem_common, "get_global_server_args", _server_args), \
                _Copies() as copies:
            out_cache_loc, req_pool_indices_device, req_pool_indices = (
                mem_common.alloc_for_extend(batch)
            )
        (args,) = kernel.calls
        self.assertEqual(req_pool_indices, [2, 3])
        self.assertEqual(req_pool_indices_device.tolist(), [2, 3])
        self.assertEqual(args[1].tolist(), [2, 3])  # req_pool_indices
        self.assertEqual(args[3].tolist(), [3, 0])  # prefix_lens
        self.assertEqual(args[5].tolist(), [2, 4])  # extend_lens
        self.assertEqual(out_cache_loc.tolist(), list(range(6)))
        return copies, paged

    def test_page_size_one(self):
        copies, paged = self._run(self._batch(page_size=1))
        copies.assert_no_host_sync(self)
        self.assertEqual(paged, {})

    def test_paged_last_loc_of_an_empty_prefix_needs_no_copy(self):
        copies, paged = self._run(self._batch(page_size=4))
        copies.assert_no_host_sync(self)
        self.assertEqual(paged["last_loc"].tolist(), [10, -1])
        self.assertEqual(paged["prefix_lens"].tolist(), [3, 0])


class TestSamplingBatchInfo(CustomTestCase):
    def _info(self, deterministic):
        reqs = [
            SimpleNamespace(
                sampling_params=SamplingParams(
                    temperature=t, top_p=p, top_k=k, min_p=m, sampling_seed=seed
                ),
                custom_logit_processor=None,
            )
            for t, p, k, m, seed in [(0.5, 0.9, 20, 0.0, 7), (1.0, 1.0, 1, 0.1, None)]
        ]
        batch = SimpleNamespace(reqs=reqs, device=DEVICE)
        args = _server_args()
        args.enable_deterministic_inference = deterministic
        orchestrator = mock.patch(
            "sglang.srt.sampling.penaltylib.BatchedPenalizerOrchestrator"
        )
        with mock.patch.object(sampling_batch_info, "get_global_server_args", lambda: args), \
                orchestrator, _Copies() as copies:
            info = SamplingBatchInfo.from_schedule_batch(batch, vocab_size=32)
        return copies, info

    def test_the_sampling_tensors_are_copied_without_a_host_sync(self):
        copies, info = self._info(deterministic=False)
        copies.assert_no_host_sync(self)
        self.assertEqual(info.temperatures.shape, (2, 1))
        self.assertEqual(info.temperatures.flatten().tolist(), [0.5, 1.0])
        self.assertEqual(info.top_ks.tolist(), [20, 1])
        self.assertEqual(info.top_ks.dtype, torch.int32)
        self.assertAlmostEqual(info.top_ps.tolist()[0], 0.9, places=6)
        self.assertAlmostEqual(info.min_ps.tolist()[1], 0.1, places=6)
        self.assertIsNone(info.sampling_seed)

    def test_the_deterministic_seeds_too(self):
        copies, info = self._info(deterministic=True)
        copies.assert_no_host_sync(self)
        self.assertEqual(info.sampling_seed.tolist(), [7, 42])
        self.assertEqual(info.sampling_seed.dtype, torch.int64)


class _Orchestrator:
    """What a penalizer reads of its orchestrator."""

    def __init__(self, reqs, vocab_size=8):
        self._reqs, self.vocab_size, self.device = reqs, vocab_size, DEVICE

    def reqs(self):
        return self._reqs


def _penalized_reqs():
    def req(freq, pres, rep, min_new, stops, eos):
        return SimpleNamespace(
            sampling_params=SimpleNamespace(
                frequency_penalty=freq, presence_penalty=pres, repetition_penalty=rep,
                min_new_tokens=min_new, stop_token_ids=stops,
            ),
            tokenizer=SimpleNamespace(additional_stop_token_ids=None, eos_token_id=eos),
        )

    return [req(0.5, 0.25, 1.2, 3, {5, 6}, 7), req(0.0, 0.0, 1.0, 0, None, 7)]


class TestPenalties(CustomTestCase):
    def test_the_penalizers_prepare_without_a_host_sync(self):
        orchestrator = _Orchestrator(_penalized_reqs())
        made = {}
        with _Copies() as copies:
            for cls in (BatchedFrequencyPenalizer, BatchedPresencePenalizer,
                        BatchedRepetitionPenalizer, BatchedMinNewTokensPenalizer):
                made[cls] = cls(orchestrator)
                made[cls].prepare()
        copies.assert_no_host_sync(self)
        self.assertEqual(made[BatchedFrequencyPenalizer].frequency_penalties.tolist(),
                         [[0.5], [0.0]])
        self.assertEqual(made[BatchedPresencePenalizer].presence_penalties.tolist(),
                         [[0.25], [0.0]])
        reps = made[BatchedRepetitionPenalizer].repetition_penalties.flatten().tolist()
        self.assertAlmostEqual(reps[0], 1.2, places=6)
        self.assertEqual(reps[1], 1.0)
        min_new = made[BatchedMinNewTokensPenalizer]
        self.assertEqual(min_new.min_new_tokens.tolist(), [[3], [0]])
        stops = min_new.stop_token_penalties
        self.assertEqual(stops.shape, (2, 8))
        self.assertEqual([i for i, v in enumerate(stops[0].tolist()) if v != 0], [5, 6, 7])
        self.assertEqual([i for i, v in enumerate(stops[1].tolist()) if v != 0], [7])
        self.assertTrue(all(v == float("-inf") for v in stops[0, 5:8].tolist()))

    def test_min_new_tokens_penalizes_without_a_mask_index(self):
        orchestrator = _Orchestrator(_penalized_reqs())  # penalizers hold a weakref
        penalizer = BatchedMinNewTokensPenalizer(orchestrator)
        with _Copies():  # on the CPU
            penalizer.prepare()
        penalizer.len_output_tokens = torch.tensor([[1], [1]], dtype=torch.int32)
        for dtype in (torch.float32, torch.bfloat16):
            logits = (torch.arange(16, dtype=torch.float32).view(2, 8) - 4.5).to(dtype)
            expected = logits.clone()
            expected[0, 5:8] = float("-inf")  # 1 of 3 new tokens: stops barred
            with _Copies() as copies:
                penalizer.apply(logits)
            copies.assert_no_host_sync(self, copies=False)
            self.assertEqual(logits.dtype, dtype)
            self.assertTrue(torch.equal(logits, expected), dtype)


class _Stop(Exception):
    pass


def _decode_batch(**fields):
    reqs = [
        SimpleNamespace(output_ids=[11, 12], origin_input_ids=[1, 2]),
        SimpleNamespace(output_ids=[], origin_input_ids=[3, 4]),
    ]
    fed = []

    def cumulate_output_tokens(output_ids):
        fed.append(output_ids.tolist())
        raise _Stop  # the rest of the preparation is not under test here

    orchestrator = SimpleNamespace(is_required=True, cumulate_output_tokens=cumulate_output_tokens)
    batch = SimpleNamespace(reqs=reqs, device=DEVICE, maybe_evict_swa=lambda: None,
                            batch_size=lambda: len(reqs),
                            sampling_info=SimpleNamespace(penalizer_orchestrator=orchestrator),
                            **fields)
    return batch, fed


class TestDecodePenaltyTokens(CustomTestCase):
    def test_spec_v2_feeds_the_last_tokens_without_a_host_sync(self):
        batch, fed = _decode_batch()
        with _Copies() as copies, self.assertRaises(_Stop):
            EagleDraftInputV2Mixin.prepare_for_decode(SimpleNamespace(), batch)
        copies.assert_no_host_sync(self)
        self.assertEqual(fed, [[12, 4]])

    def test_the_plain_overlap_schedule_too(self):
        batch, fed = _decode_batch(
            is_spec_v2=False, enable_overlap=True,
            spec_algorithm=SimpleNamespace(is_none=lambda: True),
        )
        with _Copies() as copies, self.assertRaises(_Stop):
            ScheduleBatch.prepare_for_decode(batch)
        copies.assert_no_host_sync(self)
        self.assertEqual(fed, [[12, 4]])


if __name__ == "__main__":
    unittest.main()
