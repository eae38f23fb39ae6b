"""The public names the series adds, against sglang 0.5.13's.

docs/series.md lists every public name the series adds or changes with
upstream 0.5.13's equivalent. Here each name is looked up in the patched
sglang of this environment: it must exist, and where upstream has it under
the same name its parameters must be upstream's, in order (a trailing extra
parameter with a default is allowed), so code written against sglang 0.5.13
also calls the patched 0.5.12.post1. Upstream's parameter lists below were
read from the sglang 0.5.13 wheel.
"""

import importlib
import inspect
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SRT = "sglang.srt."
# name in the series -> upstream 0.5.13's parameters (None: the series' own)
NAMES = {
    "layers.attention.trtllm_mha_backend.TRTLLMHAAttnBackend.update_verify_buffers_to_fill_after_draft":
        ["self", "spec_info", "cuda_graph_bs"],
    "layers.attention.base_attn_backend.supports_overlap_plan_stream": None,
    "layers.attention.base_attn_backend.check_overlap_plan_stream_support": None,
    "managers.overlap_utils.FutureMap.__init__":
        ["self", "device", "spec_algo", "req_to_token_pool", "needs_cpu_seq_lens"],
    "managers.overlap_utils.FutureMap.publish": ["self", "future_indices", "new_seq_lens"],
    "managers.overlap_utils.FutureMap.stash": ["self", "future_indices", "payload"],
    "managers.overlap_utils.FutureMap.resolve_seq_lens_cpu": ["self", "batch"],
    "managers.overlap_utils.FutureMap.resolve_future": None,
    "managers.overlap_utils.FutureMap.set_input_ids_sentinel": None,
    "managers.overlap_utils.SeqLensTruthCheck": None,
    "managers.overlap_utils.check_seq_lens_mirror": None,
    "managers.overlap_utils.decide_needs_cpu_seq_lens": ["server_args", "attn_backends"],
    "managers.overlap_utils.explain_needs_cpu_seq_lens": None,
    "managers.overlap_utils.sglpatch_series_applied": None,
    "managers.overlap_utils.log_seq_lens_pull": None,
    "managers.seq_lens_pull.decide_seq_lens_pull": None,
    "managers.scheduler.broadcast_reqs_to_tp_ranks": None,
    "managers.scheduler.setup_request_broadcast": None,
    "managers.scheduler.Scheduler.init_request_broadcast": None,
    "distributed.device_communicators.shm_broadcast.MessageQueue.watch_peers": None,
    "distributed.device_communicators.shm_broadcast.MessageQueue.check_peers": None,
    "distributed.device_communicators.shm_broadcast.PeerExitedError": None,
    "distributed.device_communicators.shm_broadcast.PEER_CHECK_S": None,
    "speculative.eagle_worker_v2.fa3_draft_extend_graph_supported": None,
    "speculative.eagle_worker_v2.fa3_draft_extend_graph_gate": None,
    "speculative.eagle_worker_v2.draft_extend_graph_status": None,
    "speculative.eagle_utils.verify_tree_mask_mode": None,
    "layers.attention.flashattention_backend.fa3_needs_cpu_seq_lens": None,
    "layers.attention.flashattention_backend.fa3_fuses_tree_metadata": None,
    "layers.attention.flashattention_backend.verify_tree_expand_set_metadata": None,
    "layers.attention.base_attn_backend.AttentionBackend.init_forward_metadata_in_graph":
        ["self", "forward_batch"],
    "layers.attention.base_attn_backend.call_init_forward_metadata_in_graph": None,
    "managers.scheduler.Scheduler._apply_war_barrier": ["self"],
    "managers.scheduler.war_barrier_enabled": None,
    "managers.scheduler.host_orders_schedule": None,
    "managers.scheduler.Scheduler._order_prebuilt_seed": None,
    "layers.attention.flashinfer_backend.FlashInferIndicesUpdaterPrefill.can_plan_verify_from_host":
        None,
    "layers.attention.flashinfer_backend.FlashInferIndicesUpdaterPrefill.update_verify_from_host":
        None,
    "layers.attention.flashinfer_backend.VerifyPlanHostArrays": None,
    "layers.attention.flashinfer_backend.FlashInferMultiStepDraftBackend.draft_kv_indptr_on_host":
        None,
    "model_executor.forward_batch_info.ForwardBatch.mark_forward_metadata_ready":
        ["self", "replan_equivalent"],
    "model_executor.forward_batch_info.ForwardBatch.needs_forward_metadata_init": ["self"],
    "model_executor.forward_batch_info.ForwardBatch.apply_deprecated_skip_attn_backend_init":
        ["self", "skip_attn_backend_init"],
    "model_executor.forward_batch_info.ForwardBatch.assert_replan_backend": None,
    "model_executor.forward_batch_info.check_stale_attn_plan": None,
    "model_executor.forward_batch_info.warn_skip_attn_backend_init_deprecated": None,
}
# attributes (fields and properties): upstream has each under the same name
ATTRIBUTES = {
    "managers.schedule_batch.ScheduleBatch": ["req_pool_indices_cpu"],
    "layers.attention.base_attn_backend.AttentionBackend": ["needs_cpu_seq_lens"],
    "model_executor.forward_batch_info.ForwardBatch": ["forward_metadata_ready"],
    "speculative.eagle_worker_v2.EAGLEWorkerV2": ["spec_v2_attn_backends"],
    "speculative.multi_layer_eagle_worker_v2.MultiLayerEagleWorkerV2": ["spec_v2_attn_backends"],
}
# attributes the series' own (upstream 0.5.13 has no such name)
OWN_ATTRIBUTES = {
    "speculative.eagle_info.EagleDraftInput": ["seq_lens_upper_bound"],
    "speculative.eagle_info.EagleVerifyInput": ["seq_lens_upper_bound"],
    "layers.attention.flashattention_backend.FlashAttentionBackend": ["draft_extend_graph_only"],
    "managers.overlap_utils.FutureMap": ["host_waits_for_publish"],
}


@pytest.fixture(scope="module")
def srt():
    try:
        from sglang.test.test_utils import maybe_stub_sgl_kernel
    except ImportError:
        pytest.skip("no sglang in this environment")
    maybe_stub_sgl_kernel()

    def resolve(dotted):
        parts = (SRT + dotted).split(".")
        for i in range(len(parts), 0, -1):  # the longest importable module prefix
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = inspect.getattr_static(obj, attr) if inspect.isclass(obj) else getattr(obj, attr)
            return obj
        raise ImportError(dotted)

    return resolve


@pytest.mark.parametrize("name", sorted(NAMES))
def test_name_exists_with_upstreams_parameters(srt, name):
    obj = srt(name)
    upstream = NAMES[name]
    if upstream is None:
        return  # the series' own: existing is all that is claimed
    params = list(inspect.signature(obj).parameters.values())
    assert [p.name for p in params[: len(upstream)]] == upstream
    extra = params[len(upstream):]
    assert all(p.default is not inspect.Parameter.empty for p in extra), (
        f"{name}: extra parameters without a default break upstream's calls: {extra}")


@pytest.mark.parametrize("owner", sorted(set(ATTRIBUTES) | set(OWN_ATTRIBUTES)))
def test_attributes_exist(srt, owner):
    cls = srt(owner)
    fields = getattr(cls, "__dataclass_fields__", {})
    for attr in ATTRIBUTES.get(owner, []) + OWN_ATTRIBUTES.get(owner, []):
        assert attr in fields or hasattr(cls, attr), f"{owner}.{attr}"


def test_docs_table_lists_every_name():
    with open(os.path.join(REPO, "docs", "series.md"), encoding="utf-8") as f:
        table = f.read().split("## Public names", 1)[1]
    for name in list(NAMES) + [a for table_ in (ATTRIBUTES, OWN_ATTRIBUTES)
                               for attrs in table_.values() for a in attrs]:
        short = name.rsplit(".", 2)
        shown = short[-1] if short[-1] != "__init__" else short[-2]
        assert shown in table, f"{name} is not in docs/series.md's table"
