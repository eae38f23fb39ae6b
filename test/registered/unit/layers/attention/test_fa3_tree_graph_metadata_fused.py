"""FA3's spec v1 graph replays at EAGLE topk > 1 (a draft tree) set their
metadata with fused kernels, in the plain case only.

- fa3_fuses_tree_metadata: True only for FlashAttentionBackend itself at
  FA3, MHA, topk > 1, a power-of-two page size, without local,
  sliding-window or cross attention and without context parallelism.
- The target-verify replay: the prefix half is one normal_decode_set_metadata
  call (unshifted), the draft-token half one verify_tree_expand_set_metadata
  call; the spec v1 draft-extend replay is one normal_decode_set_metadata
  call and a cumsum. The torch operations they replace never run, and every
  other backend runs only those.
- Run in Triton's interpreter on the CPU, each replay writes what the torch
  operations wrote into every buffer of the graph's metadata, to the last
  element (padded requests of the graph batch, a draft-token count that is
  not a power of two, the tree mask's entry 0 set and unset, page sizes 1
  and 4), and the draft-token half is what it means: each draft token's row
  holds its request's draft-token slots, those it attends to first.
- The capture of a verify graph compiles the draft-token kernel (Triton's
  warmup: no launch), so the first verify does not.
- Per replay, the fused paths launch a few kernels where the torch paths
  launched dozens (the torch operations that launch one, counted, and the
  Triton kernels, stubbed out and counted).
"""

import random
import unittest
from types import SimpleNamespace
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.layers.attention import flashattention_backend as fa3_module  # noqa: E402
from sglang.srt.layers.attention.flashattention_backend import (  # noqa: E402
    FlashAttentionBackend,
    fa3_fuses_tree_metadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

CONTEXT = 40
POOL_ROWS = 6
TOPK = 4
STEPS = 3
MAX_BS = 5  # buffers wider than any graph batch here: their tails must stay
SENTINEL = -7

VERIFY, DRAFT_EXTEND = ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND
FUSED = (
    "_fused_metadata_kernel_ps1_no_swa",
    "_fused_metadata_kernel_general",
    "_verify_tree_expand_kernel",
)
TORCH_PATHS = ("_verify_tree_metadata_torch", "_draft_extend_metadata_torch")
FUSED_PATHS = ("normal_decode_set_metadata", "verify_tree_expand_set_metadata")

PLAIN = dict(
    fa_impl_ver=3,
    use_mla=False,
    has_local_attention=False,
    has_swa=False,
    use_sliding_window_kv_pool=False,
    is_encoder_decoder=False,
    attn_cp_size=1,
)


class FlashAttentionBackendOnMusa(FlashAttentionBackend):
    """Stands for MusaFlashAttentionBackend (not importable without MUSA)."""


def bare_backend(
    page_size=1,
    req_to_token=None,
    cls=FlashAttentionBackend,
    topk=TOPK,
    draft_tokens=8,
    steps=STEPS,
    step_id=0,
    **overrides,
):
    """A FlashAttentionBackend with the attributes its graph state, capture
    and replays read, on the CPU, before any graph buffer."""
    b = object.__new__(cls)
    b.__dict__.update(PLAIN)
    b.__dict__.update(overrides)
    b.device = "cpu"
    b.max_context_len = CONTEXT
    b.page_size = page_size
    b.topk = topk
    b.speculative_num_steps = steps
    b.speculative_num_draft_tokens = draft_tokens
    b.speculative_step_id = step_id
    b.draft_extend_graph_only = False
    b._get_scheduler_metadata = None
    b.attention_chunk_size = 16
    b.token_to_kv_pool = None
    b.req_to_token = req_to_token
    b.fuses_tree_metadata = fa3_fuses_tree_metadata(b)
    return b


def tree_backend(
    page_size=1,
    draft_tokens=8,
    cls=FlashAttentionBackend,
    req_to_token=None,
    topk=TOPK,
    **overrides,
):
    """bare_backend with its graph buffers from its own
    init_cuda_graph_state; page tables and draft-token lengths start at a
    sentinel, so a write the torch path did not make shows."""
    b = bare_backend(page_size, req_to_token, cls, topk, draft_tokens, **overrides)
    b.init_cuda_graph_state(MAX_BS, MAX_BS * draft_tokens)
    if topk > 1:
        b.target_verify_metadata_topk_normal["page_table"].fill_(SENTINEL)
        b.target_verify_metadata_topk_expand["page_table"].fill_(SENTINEL)
        b.target_verify_metadata_topk_expand["cache_seqlens"].fill_(SENTINEL)
    b.draft_extend_metadata["page_table"].fill_(SENTINEL)
    return b


def random_batch(rng, bs, raw_bs, draft_tokens, mask0):
    """A graph batch of bs as the graph runners pad it: raw_bs requests, the
    rest with length 1 and a stale pool row; and the spec input of the raw
    batch (its tree mask, FULL_MASK, of the raw requests only)."""
    n = draft_tokens
    lens = [rng.randint(1, CONTEXT - n) for _ in range(raw_bs)] + [1] * (bs - raw_bs)
    rows = [rng.randrange(POOL_ROWS) for _ in range(bs)]
    mask_len = sum(n * (s + n) for s in lens[:raw_bs])
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    custom_mask = torch.rand(mask_len, generator=g) < 0.5
    custom_mask[0] = mask0
    accept = [rng.randint(1, STEPS + 1) for _ in range(raw_bs)]
    return SimpleNamespace(
        bs=bs,
        raw_bs=raw_bs,
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        seq_lens_cpu=torch.tensor(lens, dtype=torch.int64),
        req_pool_indices=torch.tensor(rows, dtype=torch.int64),
        verify=SimpleNamespace(
            custom_mask=custom_mask,
            positions=torch.zeros(raw_bs * n, dtype=torch.int64),
        ),
        draft_extend=SimpleNamespace(
            num_accept_tokens=torch.tensor(
                accept + [STEPS + 1] * (bs - raw_bs), dtype=torch.int32
            ),
            num_accept_tokens_cpu=accept,
        ),
    )


def pool(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(POOL_ROWS * CONTEXT, generator=g).to(torch.int32).view(
        POOL_ROWS, CONTEXT
    )


class _NoLaunch:
    """A Triton kernel that compiles and launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None

    def warmup(self, *args, **kwargs):
        pass


def capture(b, bs, mode, kernel=None):
    """The graph runner's capture of bs (its fill values); the draft-token
    kernel, which the capture compiles, is a stand-in (kernel)."""
    n = b.speculative_num_draft_tokens
    spec_info = SimpleNamespace(
        custom_mask=torch.ones((MAX_BS + MAX_BS * n) * n, dtype=torch.bool)
    )
    num_tokens = bs * (n if mode == VERIFY else STEPS + 1)
    with mock.patch.object(
        fa3_module, "_verify_tree_expand_kernel", kernel or _NoLaunch()
    ):
        b.init_forward_metadata_capture_cuda_graph(
            bs,
            num_tokens,
            torch.zeros(bs, dtype=torch.int64),
            torch.ones(bs, dtype=torch.int32),
            None,
            mode,
            spec_info,
        )


def replay(b, batch, mode):
    b.init_forward_metadata_replay_cuda_graph(
        batch.bs,
        batch.req_pool_indices,
        batch.seq_lens,
        int(batch.seq_lens.sum()),
        None,
        mode,
        batch.verify if mode == VERIFY else batch.draft_extend,
        batch.seq_lens_cpu,
    )


def graph_buffers(b, mode):
    """Every tensor a replay of mode may write: the backing buffers, and the
    per-batch-size query lengths the draft extend's capture made."""
    if mode == VERIFY:
        dicts = (b.target_verify_metadata_topk_normal, b.target_verify_metadata_topk_expand)
        out = {
            f"{i}.{k}": v
            for i, d in enumerate(dicts)
            for k, v in d.items()
            if isinstance(k, str)
        }
    else:
        out = {
            k: v for k, v in b.draft_extend_metadata.items() if isinstance(k, str)
        }
        for bs, md in b.draft_extend_metadata.items():
            if isinstance(bs, int):
                out[f"{bs}.cu_seqlens_q"] = md.cu_seqlens_q
    return out


class _Interpreted:
    """A fused kernel as Triton's interpreter runs it, on the CPU's tensors,
    to patch into the backend's module; its launches are counted."""

    def __init__(self, name, launches):
        from triton.runtime.interpreter import InterpretedFunction

        self.kernel = InterpretedFunction(getattr(fa3_module, name).fn)
        self.name, self.launches = name, launches

    def __getitem__(self, grid):
        self.launches.append(self.name)
        return self.kernel[grid]


def interpreted_kernels(launches):
    return {name: _Interpreted(name, launches) for name in FUSED}


# (page size, draft tokens, graph batch, raw batch, tree mask entry 0)
CASES = (
    (1, 8, 4, 3, True),
    (1, 3, 4, 4, False),
    (1, 5, 3, 1, False),
    (4, 6, 4, 2, True),
    (4, 2, 2, 2, False),
    (4, 8, 1, 1, True),
)


def run_both(case, mode, seed):
    """The torch path's and the fused path's graph buffers after the same
    capture and replay; the fused one in Triton's interpreter."""
    page_size, n, bs, raw_bs, mask0 = case
    batch = random_batch(random.Random(seed), bs, raw_bs, n, mask0)
    r2t = pool(seed)
    torch_b = tree_backend(page_size, n, req_to_token=r2t)
    torch_b.fuses_tree_metadata = False
    fused_b = tree_backend(page_size, n, req_to_token=r2t)
    assert fused_b.fuses_tree_metadata
    launches = {}
    for b in (torch_b, fused_b):
        launches[b] = []
        with mock.patch.multiple(fa3_module, **interpreted_kernels(launches[b])):
            capture(b, bs, mode)
            replay(b, batch, mode)
    # the torch path launched none of them, the fused path its kernels once
    assert launches[torch_b] == [], launches[torch_b]
    normal = FUSED[0] if page_size == 1 else FUSED[1]
    want = [normal, FUSED[2]] if mode == VERIFY else [normal]
    assert launches[fused_b] == want, launches[fused_b]
    return batch, torch_b, fused_b


class TestGate(CustomTestCase):
    def test_plain_fa3_at_topk_above_one_fuses(self):
        for page_size in (1, 4, 16):
            with self.subTest(page_size=page_size):
                self.assertTrue(tree_backend(page_size).fuses_tree_metadata)

    def test_every_other_case_keeps_the_torch_path(self):
        for name, change in VARIANTS.items():
            with self.subTest(name):
                self.assertFalse(tree_backend(**change).fuses_tree_metadata)


VARIANTS = {
    "topk 1": dict(topk=1),
    "fa4": dict(fa_impl_ver=4),
    "mla": dict(use_mla=True),
    "local attention": dict(has_local_attention=True),
    "sliding window layers": dict(has_swa=True),
    "swa kv pool": dict(use_sliding_window_kv_pool=True),
    "encoder-decoder": dict(is_encoder_decoder=True),
    "context parallel": dict(attn_cp_size=2),
    "device subclass": dict(cls=FlashAttentionBackendOnMusa),
    "page size 3": dict(page_size=3),
}


class TestReplaysInTritonsInterpreter(CustomTestCase):
    def setUp(self):
        try:
            import triton.runtime.interpreter  # noqa: F401
        except ImportError:
            self.skipTest("no triton")

    def test_verify_writes_what_the_torch_operations_wrote(self):
        for seed, case in enumerate(CASES):
            with self.subTest(case=case):
                batch, torch_b, fused_b = run_both(case, VERIFY, seed)
                want, got = graph_buffers(torch_b, VERIFY), graph_buffers(fused_b, VERIFY)
                self.assertEqual(want.keys(), got.keys())
                for name in want:
                    self.assertTrue(torch.equal(want[name], got[name]), name)
                self.assertEqual(
                    fused_b.forward_metadata.max_seq_len_k,
                    torch_b.forward_metadata.max_seq_len_k,
                )
                # the prefix table is written only up to the longest request
                page_size = case[0]
                pages = -(-int(batch.seq_lens_cpu.max()) // page_size)
                table = fused_b.target_verify_metadata_topk_normal["page_table"]
                self.assertTrue(bool((table[:, pages:] == SENTINEL).all()))
                self.assertFalse(bool((table[: batch.bs, :pages] == SENTINEL).any()))

    def test_the_draft_token_half_is_the_tree(self):
        # independent of the torch path: row b * n + i is draft token i of
        # request b; its first entries are the slots of the draft tokens it
        # attends to, in draft order, then the rest; a padded request's rows
        # all take entry 0 of the mask
        for seed, case in enumerate(CASES):
            with self.subTest(case=case):
                _, n, bs, raw_bs, mask0 = case
                batch, _, fused_b = run_both(case, VERIFY, 100 + seed)
                half = fused_b.forward_metadata_spec_decode_expand
                lens = batch.seq_lens.tolist()
                start = 0
                counts = []
                for req in range(bs):
                    s = lens[req]
                    slots = fused_b.req_to_token[batch.req_pool_indices[req], s : s + n]
                    for i in range(n):
                        if req < raw_bs:
                            row = start + i * (s + n) + s
                            attends = batch.verify.custom_mask[row : row + n].tolist()
                        else:
                            attends = [mask0] * n
                        first = [slots[j] for j in range(n) if attends[j]]
                        rest = [slots[j] for j in range(n) if not attends[j]]
                        want = torch.stack(first + rest)
                        self.assertTrue(torch.equal(half.page_table[req * n + i], want))
                        counts.append(len(first))
                    if req < raw_bs:
                        start += n * (s + n)
                self.assertEqual(half.cache_seqlens_int32.tolist(), counts)
                self.assertEqual(
                    half.cu_seqlens_k.tolist(),
                    [0] + torch.tensor(counts).cumsum(0).tolist(),
                )

    def test_draft_extend_writes_what_the_torch_operations_wrote(self):
        for seed, case in enumerate(CASES[:4]):
            with self.subTest(case=case):
                batch, torch_b, fused_b = run_both(case, DRAFT_EXTEND, seed)
                want = graph_buffers(torch_b, DRAFT_EXTEND)
                got = graph_buffers(fused_b, DRAFT_EXTEND)
                self.assertEqual(want.keys(), got.keys())
                for name in want:
                    self.assertTrue(torch.equal(want[name], got[name]), name)
                for attr in ("max_seq_len_k", "max_seq_len_q"):
                    self.assertEqual(
                        getattr(fused_b.forward_metadata, attr),
                        getattr(torch_b.forward_metadata, attr),
                    )


def raises(name):
    def call(*args, **kwargs):
        raise AssertionError(f"{name} called")

    return call


class TestCallsAndFallbacks(CustomTestCase):
    BATCH = dict(bs=4, raw_bs=3, draft_tokens=5, mask0=False)

    def _replay(self, b, mode, batch):
        capture(b, batch.bs, mode)
        replay(b, batch, mode)

    def test_each_fused_replay_calls_each_kernel_once(self):
        n = self.BATCH["draft_tokens"]
        batch = random_batch(random.Random(0), **self.BATCH)
        for mode, want in ((VERIFY, (1, 1)), (DRAFT_EXTEND, (1, 0))):
            for page_size in (1, 4):
                with self.subTest(mode=mode.name, page_size=page_size):
                    b = tree_backend(page_size, n, req_to_token=pool(0))
                    capture(b, batch.bs, mode)
                    normal, expand = [], []
                    with mock.patch.multiple(
                        fa3_module,
                        normal_decode_set_metadata=lambda *a: normal.append(a),
                        verify_tree_expand_set_metadata=lambda *a, **k: expand.append(a),
                    ), mock.patch.multiple(
                        FlashAttentionBackend,
                        **{name: raises(name) for name in TORCH_PATHS},
                    ):
                        replay(b, batch, mode)
                    self.assertEqual((len(normal), len(expand)), want)
                    md = b.forward_metadata
                    (seqlens, cu_k, table, r2t, rows, strided, pages, lens, shift,
                     ps) = normal[0]
                    self.assertIs(seqlens, md.cache_seqlens_int32)
                    self.assertIs(cu_k, md.cu_seqlens_k)
                    self.assertIs(table, md.page_table)
                    self.assertIs(r2t, b.req_to_token)
                    self.assertEqual((shift, ps), (0, page_size))
                    longest = int(batch.seq_lens_cpu.max())
                    self.assertEqual(md.max_seq_len_k, longest)
                    self.assertEqual(pages, -(-longest // page_size))
                    self.assertEqual(lens.tolist(), batch.seq_lens.tolist())
                    self.assertEqual(rows.tolist(), batch.req_pool_indices.tolist())
                    if mode == VERIFY:
                        half = b.forward_metadata_spec_decode_expand
                        (e_table, e_lens, e_cu, _, _, _, mask, num_valid,
                         draft) = expand[0]
                        self.assertIs(e_table, half.page_table)
                        self.assertIs(e_lens, half.cache_seqlens_int32)
                        self.assertIs(e_cu, half.cu_seqlens_k)
                        self.assertIs(mask, batch.verify.custom_mask)
                        self.assertEqual((num_valid, draft), (batch.raw_bs * n * n, n))

    def test_every_other_backend_runs_only_the_torch_operations(self):
        batch = random_batch(random.Random(1), **self.BATCH)
        n = self.BATCH["draft_tokens"]
        for name, change in VARIANTS.items():
            if change.get("topk") == 1:
                modes = (DRAFT_EXTEND,)  # its verify has one half: not this
            else:
                modes = (VERIFY, DRAFT_EXTEND)
            for mode in modes:
                with self.subTest(name, mode=mode.name):
                    b = tree_backend(draft_tokens=n, req_to_token=pool(1), **change)
                    ran = []
                    with mock.patch.multiple(
                        fa3_module, **{f: raises(f) for f in FUSED_PATHS + FUSED}
                    ), mock.patch.multiple(
                        FlashAttentionBackend,
                        _verify_tree_metadata_torch=lambda *a: ran.append("verify"),
                        _draft_extend_metadata_torch=lambda *a: ran.append("extend"),
                        _init_sliding_window_attn_spec_metadata=lambda *a: None,
                    ):
                        self._replay(b, mode, batch)
                    self.assertEqual(
                        ran, ["verify" if mode == VERIFY else "extend"]
                    )

    def test_capture_compiles_the_draft_token_kernel_and_launches_nothing(self):
        for name, change in {"plain": {}, **VARIANTS}.items():
            if change.get("topk") == 1:
                continue
            with self.subTest(name):
                kernel = mock.MagicMock()
                kernel.__getitem__.side_effect = raises("a launch")
                b = tree_backend(draft_tokens=5, req_to_token=pool(2), **change)
                for bs in (4, 2, 1):
                    capture(b, bs, VERIFY, kernel)
                if name != "plain":
                    kernel.warmup.assert_not_called()
                    continue
                self.assertEqual(kernel.warmup.call_count, 3)
                for bs, call in zip((4, 2, 1), kernel.warmup.call_args_list):
                    self.assertEqual(call.kwargs["grid"], (bs,))
                    self.assertEqual(call.kwargs["NUM_DRAFT"], 5)
                    # the replay's own buffers, so the same specialization
                    self.assertEqual(
                        call.args[7].untyped_storage().data_ptr(),
                        b.target_verify_metadata_topk_expand["page_table"]
                        .untyped_storage()
                        .data_ptr(),
                    )


# views and the host mirror's maximum, which launch no kernel on a GPU
NO_LAUNCH = {
    "aten.slice", "aten.view", "aten.unsqueeze", "aten.expand", "aten.detach",
    "aten.alias", "aten.max", "aten._local_scalar_dense",
}


class _CountLaunches(TorchDispatchMode):
    """The torch operations that launch a kernel on a GPU."""

    def __init__(self):
        super().__init__()
        self.launches = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name not in NO_LAUNCH:
            self.launches.append(name)
        return func(*args, **(kwargs or {}))


class _CountedKernel(_NoLaunch):
    def __init__(self, launches, name):
        self.launches, self.name = launches, name

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append(self.name)


class TestLaunchesPerReplay(CustomTestCase):
    """A stand-in for the GPU's kernel launches on the CPU: the torch
    operations each replay issues that launch one, and the Triton kernels
    (stubbed out, counted)."""

    def _launches(self, mode, fused):
        batch = random_batch(random.Random(3), 4, 3, 8, True)
        b = tree_backend(1, 8, req_to_token=pool(3))
        b.fuses_tree_metadata = fused
        capture(b, batch.bs, mode)
        args = (
            batch.bs, batch.req_pool_indices, batch.seq_lens,
            int(batch.seq_lens.sum()), None, mode,
            batch.verify if mode == VERIFY else batch.draft_extend,
            batch.seq_lens_cpu,
        )
        counter = _CountLaunches()
        kernels = {name: _CountedKernel(counter.launches, name) for name in FUSED}
        with mock.patch.multiple(fa3_module, **kernels), counter:
            b.init_forward_metadata_replay_cuda_graph(*args)
        return counter.launches

    def test_the_fused_replays_launch_a_few_kernels(self):
        # the verify: a cumsum and two Triton kernels, where the torch path
        # launched about thirty; the draft extend: a cumsum and one kernel
        for mode, fused_at_most, torch_at_least in (
            (VERIFY, 3, 25),
            (DRAFT_EXTEND, 2, 8),
        ):
            with self.subTest(mode.name):
                fused = self._launches(mode, True)
                old = self._launches(mode, False)
                self.assertLessEqual(len(fused), fused_at_most, fused)
                self.assertGreaterEqual(len(old), torch_at_least, old)


if __name__ == "__main__":
    unittest.main()
