"""The piecewise CUDA graph serves an EAGLE target's prefill.

An EAGLE-family target prefills with CaptureHiddenMode.FULL: the draft
extends its KV cache from every token's hidden states. The runner captured
its graphs with NULL, and can_run refuses a batch whose mode differs from
the captured one, so every such prefill ran eagerly. A dense MHA target
now captures with FULL; MLA, MoE and hybrid targets, draft workers and
other algorithms keep what they had.

The runner is built on the CPU with its real __init__, warm-up and
per-size capture; only compilation, graph pools and the distributed
context are stubbed. The model records the mode of every dummy batch it
is run with.
"""

import contextlib
import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

register_cpu_ci(est_time=5, suite="stage-a-test-cpu")
maybe_stub_sgl_kernel()

from sglang.srt.model_executor import piecewise_cuda_graph_runner as pcg  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    CaptureHiddenMode,
    ForwardMode,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

CAPTURE_TOKENS = [4, 8]


class _LayerModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList()


class _Model(torch.nn.Module):
    """Stands in for a CausalLM: records the mode of each batch it runs."""

    def __init__(self):
        super().__init__()
        self.model = _LayerModel()
        self.seen_modes = []

    def forward(self, input_ids, positions, forward_batch, **kwargs):
        self.seen_modes.append(forward_batch.capture_hidden_mode)


def _model_runner(
    algorithm="EAGLE3",
    is_draft_worker=False,
    use_mla_backend=False,
    moe=False,
    hybrid=False,
    return_hidden_states=False,
):
    layers = 2
    attention_layers = [object() for _ in range(layers)]
    if hybrid:
        attention_layers[1] = None
    moe_layers = [object() if moe else None for _ in range(layers)]
    server_args = SimpleNamespace(
        tp_size=1,
        dp_size=1,
        pp_size=1,
        piecewise_cuda_graph_tokens=CAPTURE_TOKENS,
        piecewise_cuda_graph_compiler="eager",
        enable_torch_compile_debug_mode=False,
        enable_return_hidden_states=return_hidden_states,
        enable_lora=False,
        enable_mamba_extra_buffer=lambda: False,
        disable_radix_cache=False,
    )
    return SimpleNamespace(
        device="cpu",
        server_args=server_args,
        model=_Model(),
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm),
        is_draft_worker=is_draft_worker,
        use_mla_backend=use_mla_backend,
        attention_layers=attention_layers,
        moe_layers=moe_layers,
        moe_fusions=[None] * layers,
        is_multimodal=False,
        is_generation=True,
        is_hybrid_swa=False,
        req_to_token_pool=SimpleNamespace(size=4),
        token_to_kv_pool=mock.MagicMock(),
        token_to_kv_pool_allocator=mock.MagicMock(),
        attn_backend=mock.MagicMock(),
        tp_group=mock.MagicMock(),
    )


def _capture_every_size(self):
    for num_tokens in reversed(self.capture_num_tokens):
        self.capture_one_batch_size(num_tokens)


@contextlib.contextmanager
def _cpu_runner_context():
    """What building the runner needs beyond the CPU: no compilation, no
    graph pool, one rank."""
    no_moe_a2a = SimpleNamespace(is_deepep=lambda: False, is_mooncake=lambda: False)
    with contextlib.ExitStack() as stack:
        for name, value in {
            "get_attention_tp_size": lambda: 1,
            "get_attention_tp_rank": lambda: 0,
            "get_attention_cp_size": lambda: 1,
            "get_tensor_model_parallel_rank": lambda: 0,
            "log_info_on_rank0": lambda logger, message: None,
            "set_torch_compile_config": lambda: None,
            "get_moe_a2a_backend": lambda: no_moe_a2a,
            "require_gathered_buffer": lambda server_args: False,
            "install_torch_compiled": lambda *a, **k: None,
            "patch_model": lambda model, compiler: contextlib.nullcontext(model),
            "get_global_graph_memory_pool": lambda: "pool",
            "set_global_graph_memory_pool": lambda pool: None,
            "set_graph_pool_id": lambda pool: None,
            "TboCudaGraphRunnerPlugin": mock.MagicMock,
        }.items():
            stack.enter_context(mock.patch.object(pcg, name, value))
        stack.enter_context(
            mock.patch.object(
                torch.cpu, "graph_pool_handle", lambda: "pool", create=True
            )
        )
        stack.enter_context(
            mock.patch.object(pcg.PiecewiseCudaGraphRunner, "capture", _capture_every_size)
        )
        yield


def _build(**kwargs):
    model_runner = _model_runner(**kwargs)
    with _cpu_runner_context():
        runner = pcg.PiecewiseCudaGraphRunner(model_runner)
    return runner, model_runner.model.seen_modes


def _prefill(mode, num_tokens=6):
    return SimpleNamespace(
        input_embeds=None,
        forward_mode=ForwardMode.EXTEND,
        capture_hidden_mode=mode,
        replace_embeds=None,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64),
        return_logprob=False,
    )


class TestEagleTargetPrefill(CustomTestCase):
    def test_eagle3_target_captures_and_serves_full_hidden_states(self):
        runner, seen = _build(algorithm="EAGLE3")
        self.assertEqual(runner.capture_hidden_mode, CaptureHiddenMode.FULL)
        # one warm-up per size, then one warm-up run and one captured run per size
        self.assertEqual(len(seen), 3 * len(CAPTURE_TOKENS) + 1)
        self.assertEqual(set(seen), {CaptureHiddenMode.FULL})
        self.assertTrue(runner.can_run(_prefill(CaptureHiddenMode.FULL)))

    def test_eagle_target_is_served_too(self):
        runner, _ = _build(algorithm="EAGLE")
        self.assertTrue(runner.can_run(_prefill(CaptureHiddenMode.FULL)))

    def test_a_verify_batch_is_still_refused(self):
        runner, _ = _build(algorithm="EAGLE3")
        batch = _prefill(CaptureHiddenMode.FULL)
        batch.forward_mode = ForwardMode.TARGET_VERIFY
        self.assertFalse(runner.can_run(batch))

    def test_a_prefill_past_the_largest_size_is_still_refused(self):
        runner, _ = _build(algorithm="EAGLE3")
        batch = _prefill(CaptureHiddenMode.FULL, num_tokens=max(CAPTURE_TOKENS) + 1)
        self.assertFalse(runner.can_run(batch))


class TestGate(CustomTestCase):
    def _assert_null(self, **kwargs):
        runner, seen = _build(**kwargs)
        self.assertEqual(runner.capture_hidden_mode, CaptureHiddenMode.NULL)
        self.assertEqual(set(seen), {CaptureHiddenMode.NULL})
        self.assertTrue(runner.can_run(_prefill(CaptureHiddenMode.NULL)))
        self.assertFalse(runner.can_run(_prefill(CaptureHiddenMode.FULL)))

    def test_no_speculation_keeps_null(self):
        self._assert_null(algorithm=None)

    def test_the_draft_worker_keeps_null(self):
        self._assert_null(algorithm="EAGLE3", is_draft_worker=True)

    def test_standalone_keeps_null(self):
        # its target prefills with NULL, which the graph already serves
        self._assert_null(algorithm="STANDALONE")

    def test_an_mla_target_keeps_null(self):
        self._assert_null(algorithm="EAGLE", use_mla_backend=True)

    def test_a_moe_target_keeps_null(self):
        self._assert_null(algorithm="EAGLE3", moe=True)

    def test_a_hybrid_target_keeps_null(self):
        self._assert_null(algorithm="EAGLE3", hybrid=True)


class TestReturnHiddenStates(CustomTestCase):
    def test_dummy_batches_carry_the_mode_the_graph_serves(self):
        runner, seen = _build(algorithm=None, return_hidden_states=True)
        self.assertEqual(runner.capture_hidden_mode, CaptureHiddenMode.FULL)
        self.assertEqual(set(seen), {CaptureHiddenMode.FULL})


if __name__ == "__main__":
    unittest.main()
