"""The spec v2 draft extend captures a CUDA graph on FA3 as it does on Triton.

- fa3_draft_extend_graph_supported admits FlashAttentionBackend itself at FA3
  with plain causal MHA (no MLA, sliding-window, local or cross attention) at
  topk 1; fa3_draft_extend_graph_gate admits an EAGLE or EAGLE3 draft at topk 1
  whose draft-extend backend and target backend are both
  FlashAttentionBackend itself at FA3 with plain causal MHA, without FR-Spec;
  it refuses every other case with a reason.
- EagleDraftWorker.init_cuda_graphs builds the draft-extend graph runner for
  an admitted FA3 backend on CUDA and keeps Triton's graph; it builds none
  for a refused one (STANDALONE, FR-Spec, MTP of a hybrid-linear target, a
  sliding-window draft, FA4, MLA, topk 4), nor for any backend while
  SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH is set, and says why in one line.
- The FA3 backend handed to the graph runner allocates only the
  draft-extend graph buffers, and its draft-extend capture and replay fill
  the same metadata as with every buffer allocated.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch
from triton.runtime.interpreter import InterpretedFunction

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=8, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.layers.attention import flashattention_backend as fa3_module  # noqa: E402
from sglang.srt.layers.attention.flashattention_backend import (  # noqa: E402
    FlashAttentionBackend,
)
from sglang.srt.layers.attention.hybrid_linear_attn_backend import (  # noqa: E402
    HybridLinearAttnBackend,
)
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative import eagle_worker_v2  # noqa: E402
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (  # noqa: E402
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.eagle_worker_v2 import (  # noqa: E402
    EagleDraftWorker,
    draft_extend_graph_status,
    fa3_draft_extend_graph_gate,
    fa3_draft_extend_graph_supported,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

EAGLE = SpeculativeAlgorithm.EAGLE
EAGLE3 = SpeculativeAlgorithm.EAGLE3
STANDALONE = SpeculativeAlgorithm.STANDALONE


class _DeviceFlashAttentionBackend(FlashAttentionBackend):
    """Stands for a device port (MUSA, XPU) that subclasses FA3."""


def _fa(cls=FlashAttentionBackend, **overrides):
    backend = object.__new__(cls)
    attrs = dict(
        fa_impl_ver=3,
        use_mla=False,
        has_swa=False,
        use_sliding_window_kv_pool=False,
        has_local_attention=False,
        is_encoder_decoder=False,
        attn_cp_size=1,
    )
    attrs.update(overrides)
    for name, value in attrs.items():
        setattr(backend, name, value)
    return backend


def _hybrid_linear_target():
    """The target backend of a hybrid-linear model (Qwen3-Next and the like):
    its full-attention layers on FA3 inside HybridLinearAttnBackend."""
    backend = object.__new__(HybridLinearAttnBackend)
    backend.full_attn_backend = _fa()
    return backend


def _worker(
    backend, topk=1, algo=EAGLE3, target=None, token_map=None, disable_graph=False
):
    worker = object.__new__(EagleDraftWorker)
    worker.server_args = SimpleNamespace(
        disable_cuda_graph=disable_graph,
        model_impl="auto",
        speculative_token_map=token_map,
    )
    worker.speculative_num_steps = 1  # no draft-decode graph to build
    worker.speculative_algorithm = algo
    worker.topk = topk
    worker.draft_extend_attn_backend = backend
    worker.draft_attn_backend = None
    worker.target_worker = SimpleNamespace(
        device="cuda",
        model_runner=SimpleNamespace(attn_backend=target or _fa()),
    )
    worker.device, worker.gpu_id = "cuda", 0
    return worker


# Each case the gate refuses: (worker arguments, a word its reason names).
REFUSED = {
    "fa3 topk 4": (dict(backend=_fa(), topk=4), "topk"),
    "fa4": (dict(backend=_fa(fa_impl_ver=4)), "FA4"),
    "mla": (dict(backend=_fa(use_mla=True)), "MLA"),
    "device subclass": (
        dict(backend=_fa(cls=_DeviceFlashAttentionBackend)),
        "_DeviceFlashAttentionBackend",
    ),
    "standalone draft": (dict(backend=_fa(), algo=STANDALONE), "STANDALONE"),
    "fr-spec": (
        dict(backend=_fa(), algo=EAGLE, token_map="/models/hot.pt"),
        "--speculative-token-map",
    ),
    "mtp of a hybrid-linear target": (
        dict(backend=_fa(), algo=EAGLE, target=_hybrid_linear_target()),
        "HybridLinearAttnBackend",
    ),
    "sliding-window draft layers": (dict(backend=_fa(has_swa=True)), "sliding"),
    "sliding-window draft kv pool": (
        dict(backend=_fa(use_sliding_window_kv_pool=True)),
        "sliding",
    ),
    "sliding-window target": (dict(backend=_fa(), target=_fa(has_swa=True)), "sliding"),
    "chunked local attention draft": (
        dict(backend=_fa(has_local_attention=True)),
        "local",
    ),
    "context parallel draft": (dict(backend=_fa(attn_cp_size=2)), "context"),
}


class TestGate(CustomTestCase):
    def test_backend_predicate_admits_plain_fa3_at_topk1_only(self):
        self.assertTrue(fa3_draft_extend_graph_supported(_fa(), topk=1))
        for name, (backend, topk) in {
            "topk 4": (_fa(), 4),
            "fa4": (_fa(fa_impl_ver=4), 1),
            "mla": (_fa(use_mla=True), 1),
            "sliding window": (_fa(has_swa=True), 1),
            "device subclass": (_fa(cls=_DeviceFlashAttentionBackend), 1),
            "triton": (object.__new__(TritonAttnBackend), 1),
            "none": (None, 1),
        }.items():
            with self.subTest(name):
                self.assertFalse(fa3_draft_extend_graph_supported(backend, topk))

    def test_plain_fa3_eagle_and_eagle3_at_topk1(self):
        for algo in (EAGLE, EAGLE3):
            with self.subTest(algo.name):
                admitted, _ = fa3_draft_extend_graph_gate(_worker(_fa(), algo=algo))
                self.assertTrue(admitted)

    def test_eagle3_ignores_the_token_map(self):
        # EAGLE3 drafts carry their own hot vocabulary (draft_vocab_size);
        # sglang ignores --speculative-token-map for them.
        worker = _worker(_fa(), algo=EAGLE3, token_map="/models/hot.pt")
        self.assertTrue(fa3_draft_extend_graph_gate(worker)[0])

    def test_every_other_case_is_refused_with_its_reason(self):
        for name, (kwargs, word) in REFUSED.items():
            with self.subTest(name):
                admitted, why = fa3_draft_extend_graph_gate(_worker(**kwargs))
                self.assertFalse(admitted)
                self.assertIn(word, why)

    def test_other_backends_are_not_fa3(self):
        for name, backend in {
            "triton": object.__new__(TritonAttnBackend),
            "none": None,
        }.items():
            with self.subTest(name):
                self.assertFalse(fa3_draft_extend_graph_gate(_worker(backend))[0])


class _Runner:
    """A draft-extend graph runner that records the worker it was built for."""

    def __init__(self, worker):
        self.worker = worker


class TestInitCudaGraphs(CustomTestCase):
    def _init(self, **kwargs):
        worker = _worker(**kwargs)
        lines = []
        with mock.patch.multiple(
            eagle_worker_v2,
            _is_cuda=True,
            _is_npu=False,
            _is_hip=False,
            _is_musa=False,
            EAGLEDraftExtendCudaGraphRunner=_Runner,
            get_available_gpu_memory=lambda *a, **k: 80.0,
            log_info_on_rank0=lambda _logger, msg: lines.append(msg),
        ):
            worker.init_cuda_graphs()
        worker.lines = [line for line in lines if "Draft extend cuda graph" in line]
        return worker

    def test_fa3_captures_the_draft_extend_graph(self):
        for algo in (EAGLE, EAGLE3):
            with self.subTest(algo.name):
                worker = self._init(backend=_fa(), algo=algo)
                runner = worker.cuda_graph_runner_for_draft_extend
                self.assertIsInstance(runner, _Runner)
                self.assertIs(runner.worker, worker)
                self.assertEqual(worker.lines, [])
                # the runner is the backend's only user
                self.assertTrue(
                    worker.draft_extend_attn_backend.draft_extend_graph_only
                )

    def test_triton_still_captures(self):
        worker = self._init(backend=object.__new__(TritonAttnBackend))
        self.assertIsInstance(worker.cuda_graph_runner_for_draft_extend, _Runner)
        self.assertFalse(
            getattr(worker.draft_extend_attn_backend, "draft_extend_graph_only", False)
        )

    def test_backends_without_a_draft_extend_graph_stay_eager(self):
        class FlashInferLikeBackend:
            pass

        worker = self._init(backend=FlashInferLikeBackend())
        self.assertIsNone(worker.cuda_graph_runner_for_draft_extend)
        self.assertEqual(len(worker.lines), 1)
        self.assertIn(
            "no draft-extend CUDA graph for FlashInferLikeBackend", worker.lines[0]
        )

    def test_refused_cases_stay_eager_and_say_why(self):
        for name, (kwargs, word) in REFUSED.items():
            with self.subTest(name):
                worker = self._init(**kwargs)
                self.assertIsNone(worker.cuda_graph_runner_for_draft_extend)
                self.assertEqual(len(worker.lines), 1)
                self.assertIn(word, worker.lines[0])
                self.assertFalse(
                    getattr(
                        worker.draft_extend_attn_backend,
                        "draft_extend_graph_only",
                        False,
                    )
                )

    def test_the_environment_switch_turns_every_draft_extend_graph_off(self):
        with envs.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH.override(True):
            for name, backend in {
                "fa3": _fa(),
                "triton": object.__new__(TritonAttnBackend),
            }.items():
                with self.subTest(name):
                    worker = self._init(backend=backend)
                    self.assertIsNone(worker.cuda_graph_runner_for_draft_extend)
                    self.assertEqual(len(worker.lines), 1)
                    self.assertIn(
                        "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH", worker.lines[0]
                    )

    def test_status_names_what_init_cuda_graphs_did(self):
        cases = {
            "fa3": (dict(backend=_fa()), True),
            "fr-spec": (
                dict(backend=_fa(), algo=EAGLE, token_map="/models/hot.pt"),
                False,
            ),
            "cuda graphs off": (dict(backend=_fa(), disable_graph=True), False),
        }
        with mock.patch.multiple(
            eagle_worker_v2, _is_cuda=True, _is_npu=False, _is_hip=False
        ):
            for name, (kwargs, enabled) in cases.items():
                with self.subTest(name):
                    got, why = draft_extend_graph_status(_worker(**kwargs))
                    self.assertEqual(got, enabled)
                    self.assertTrue(why)
            with envs.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH.override(True):
                self.assertEqual(
                    draft_extend_graph_status(_worker(_fa())),
                    (False, "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH is set"),
                )


CONTEXT, PAGE, DRAFT_TOKENS, MAX_BS = 48, 1, 4, 4


def _graph_backend(draft_extend_only):
    """A FlashAttentionBackend (FA3, topk 1) with just what init_cuda_graph_state
    and the draft-extend capture and replay read, on CPU."""
    backend = _fa()
    backend.device = "cpu"
    backend.max_context_len = CONTEXT
    backend.page_size = PAGE
    backend.topk = 1
    backend.speculative_step_id = 0
    backend.speculative_num_steps = DRAFT_TOKENS - 1
    backend.speculative_num_draft_tokens = DRAFT_TOKENS
    backend._get_scheduler_metadata = None
    backend.decode_cuda_graph_metadata = {}
    backend.target_verify_metadata = {}
    backend.req_to_token = torch.arange(8 * CONTEXT, dtype=torch.int32).view(8, CONTEXT)
    if draft_extend_only:
        backend.draft_extend_graph_only = True
    backend.init_cuda_graph_state(MAX_BS, MAX_BS * DRAFT_TOKENS)
    return backend


def _page_tables(backend):
    return [
        name
        for name, buffers in (
            ("decode", backend.decode_cuda_graph_metadata),
            ("target verify", backend.target_verify_metadata),
            ("draft extend", backend.draft_extend_metadata),
        )
        for key in buffers
        if isinstance(key, str) and key.startswith("page_table")
    ]


class TestDraftExtendOnlyGraphState(CustomTestCase):
    def test_only_the_draft_extend_page_table_is_allocated(self):
        self.assertEqual(
            _page_tables(_graph_backend(draft_extend_only=False)),
            ["decode", "decode", "target verify", "draft extend"],
        )
        backend = _graph_backend(draft_extend_only=True)
        self.assertEqual(_page_tables(backend), ["draft extend"])
        self.assertEqual(
            tuple(backend.draft_extend_metadata["page_table"].shape),
            (MAX_BS, CONTEXT // PAGE),
        )

    def test_capture_and_replay_fill_the_same_metadata(self):
        bs, pool_rows = 2, torch.tensor([3, 5])
        seq_lens = torch.tensor([17, 30], dtype=torch.int32)
        got = []
        for draft_extend_only in (False, True):
            backend = _graph_backend(draft_extend_only)
            backend.init_forward_metadata_capture_cuda_graph(
                bs,
                bs * DRAFT_TOKENS,
                torch.zeros(bs, dtype=torch.int64),
                torch.ones(bs, dtype=torch.int32),
                None,
                ForwardMode.DRAFT_EXTEND_V2,
                None,
            )
            spec_info = EagleDraftInput(num_tokens_per_req=DRAFT_TOKENS)
            # the replay's fused Triton kernel (page size 1), run by the
            # interpreter on the CPU
            kernel = fa3_module._fused_metadata_kernel_ps1_no_swa
            with mock.patch.object(
                fa3_module,
                "_fused_metadata_kernel_ps1_no_swa",
                InterpretedFunction(kernel.fn),
            ):
                backend.init_forward_metadata_replay_cuda_graph(
                    bs,
                    pool_rows,
                    seq_lens,
                    int(seq_lens.sum()),
                    None,
                    ForwardMode.DRAFT_EXTEND_V2,
                    spec_info,
                    seq_lens.clone(),
                )
            meta = backend.forward_metadata
            got.append(
                (
                    meta.cache_seqlens_int32.tolist(),
                    meta.cu_seqlens_q.tolist(),
                    meta.cu_seqlens_k.tolist(),
                    meta.page_table.tolist(),
                )
            )
        self.assertEqual(got[0], got[1])
        cache_seqlens, _, _, page_table = got[1]
        self.assertEqual(cache_seqlens, [17, 30])
        for row, (pool_row, length) in enumerate(zip(pool_rows.tolist(), [17, 30])):
            self.assertEqual(
                page_table[row][:length],
                backend.req_to_token[pool_row, :length].tolist(),
            )


class TestAboveCudaGraphMaxBs(CustomTestCase):
    def test_a_batch_above_the_largest_graph_runs_eagerly(self):
        # The worker replays only where the runner's can_run admits the
        # batch (_draft_extend_for_decode); above --cuda-graph-max-bs the
        # draft extend runs eagerly, as before the patch.
        runner = object.__new__(EAGLEDraftExtendCudaGraphRunner)
        runner.require_mlp_tp_gather = False
        runner.require_mlp_sync = False
        runner.disable_padding = False
        runner.max_bs = MAX_BS
        for bs, admitted in ((1, True), (MAX_BS, True), (MAX_BS + 1, False)):
            with self.subTest(bs=bs):
                batch = SimpleNamespace(seq_lens=torch.ones(bs, dtype=torch.int32))
                self.assertEqual(runner.can_run(batch), admitted)


if __name__ == "__main__":
    unittest.main()
