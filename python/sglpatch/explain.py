"""`sglpatch status --explain -- FLAGS`: whether a server launched with these
`python -m sglang.launch_server` flags keeps the per-step seq_lens host pull.

The verdict is sglpatch.seq_lens_pull's, the same decision the patched
scheduler takes for its start-up line; here its facts come from the flags,
read as sglang 0.5.12.post1 reads them (sglpatch.launch_flags: every option,
abbreviations, choices, int types) and settled as its ServerArgs settles
them where the flags alone decide it (server_args.py: the algorithms and
settings that turn the overlap schedule or mixed chunked prefill off, EAGLE
topk above 1 running without the overlap schedule, DP attention needing more
than one DP rank, the hierarchical cache moving fa3's decode to another
backend, fa3 with an fp8_e5m2 KV cache becoming triton). A launch sglang
refuses is refused here, in one line. What the flags cannot say (the
backend sglang picks for the GPU, the topk it picks for the model, the
model's attention, a model's own backend requirements) leaves the verdict
"depends", and the server's start-up line settles it. Neither sglang nor
torch is imported.
"""

import os
from typing import Dict, List, Mapping, Optional, Tuple

from sglpatch import seq_lens_pull
from sglpatch.errors import SglpatchError
from sglpatch.launch_flags import LaunchFlagsError, parse_launch_flags

# sglang 0.5.12.post1's built-in speculative algorithms (SpeculativeAlgorithm,
# plus the NEXTN alias); a plugin may register more, which this cannot know.
BUILTIN_SPEC_ALGORITHMS = ("DFLASH", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "NEXTN",
                           "NGRAM", "STANDALONE")
# Run without the overlap schedule whatever the flags say (server_args).
SPEC_WITHOUT_OVERLAP = ("DFLASH", "FROZEN_KV_MTP", "NGRAM")
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")
# Backends DraftBackendFactory builds an EAGLE draft on (and sglang's
# attention registry knows); any other fails at start.
EAGLE_DRAFT_BACKENDS = ("aiter", "ascend", "dsv4", "fa3", "fa4", "flashinfer", "flashmla",
                        "nsa", "tokenspeed_mla", "triton", "trtllm_mha", "trtllm_mla")
# What server_args picks as the decode backend when the hierarchical cache's
# kernel I/O meets fa3 decode (not fa3: flashinfer or triton by model and GPU).
HICACHE_DECODE = "flashinfer or triton (sglang's pick beside the hierarchical cache)"

_TRUE = ("true", "1", "yes", "y")
_FALSE = ("false", "0", "no", "n")


def _refuse(why: str) -> SglpatchError:
    return SglpatchError(f"sglang 0.5.12.post1 would refuse these launch flags: {why}")


def _env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise _refuse(f"{name}={value!r} is not a boolean")


def launch_facts(flags: List[str], env: Optional[Mapping[str, str]] = None
                 ) -> Tuple[Dict[str, object], Optional[str]]:
    """The facts decide_seq_lens_pull takes, for these launch flags, and why
    sglang turns the overlap schedule off or why that is not known (None
    when it runs or the flag itself turns it off). SglpatchError where
    sglang would refuse them."""
    env = os.environ if env is None else env
    try:
        args = parse_launch_flags(flags)
    except LaunchFlagsError as e:
        raise _refuse(str(e))
    if getattr(args, "help", False):
        raise SglpatchError("the launch flags ask sglang for its help text; "
                            "there is no launch to explain")
    if args.config is not None:
        raise SglpatchError("status --explain does not read --config files; "
                            "give the flags themselves")

    device = (args.device or "cuda").split(":")[0]
    attention = "torch_native" if device == "hpu" else args.attention_backend
    prefill, decode = args.prefill_attention_backend, args.decode_attention_backend
    draft = args.speculative_draft_attention_backend
    if prefill is not None and prefill == decode:
        attention = prefill
    if attention == "fa3" and args.kv_cache_dtype == "fp8_e5m2":
        attention = "triton"
    mixed_chunk = args.enable_mixed_chunk and attention != "dual_chunk_flash_attn"
    if args.enable_hierarchical_cache or args.disaggregation_decode_enable_offload_kvcache:
        io = args.hicache_io_backend
        if args.hicache_mem_layout == "page_first_direct" and io == "kernel":
            io = "direct"
        if io == "kernel" and decode is None and attention == "fa3":
            decode = HICACHE_DECODE
    dp_attention = args.enable_dp_attention and args.data_parallel_size > 1

    overlap = not args.disable_overlap_schedule
    overlap_off: Optional[str] = None

    def turn_overlap_off(why: str) -> None:
        nonlocal overlap, overlap_off
        if overlap:
            overlap, overlap_off = False, why

    if device == "mps":
        turn_overlap_off("sglang runs without it on mps")
    if args.pipeline_parallel_size > 1:
        turn_overlap_off("sglang runs pipeline parallelism without it")
    if args.dllm_algorithm is not None:
        turn_overlap_off("sglang runs diffusion LLM inference without it")

    spec = args.speculative_algorithm
    topk = args.speculative_eagle_topk
    if spec is not None:
        spec = spec.upper()
        if spec == "NEXTN":
            spec = "EAGLE"
        if spec not in BUILTIN_SPEC_ALGORITHMS:
            raise _refuse(f"--speculative-algorithm {args.speculative_algorithm}: "
                          f"not one of {', '.join(BUILTIN_SPEC_ALGORITHMS)} (a plugin "
                          "may register more, which status --explain cannot know)")
        if spec in ("DFLASH", "NGRAM", "STANDALONE") and dp_attention:
            raise _refuse(f"{spec} speculative decoding does not support DP attention")
        if spec in SPEC_WITHOUT_OVERLAP:
            turn_overlap_off(f"sglang runs {spec} without it")
            mixed_chunk = False
        if spec == "DFLASH":
            topk = 1
        if spec in EAGLE_FAMILY:
            mixed_chunk = False
            _check_eagle_draft(args, attention, prefill, decode, draft)
            topk = _eagle_topk(args, spec, attention, prefill, decode)
            if args.speculative_eagle_topk is not None and args.speculative_eagle_topk > 1:
                turn_overlap_off(f"sglang runs EAGLE topk {args.speculative_eagle_topk} "
                                 "on spec v1 (spec v2 serves topk 1 only)")
            elif not _env_bool(env, "SGLANG_ENABLE_SPEC_V2", True):
                turn_overlap_off("sglang runs EAGLE on spec v1 with SGLANG_ENABLE_SPEC_V2 off")
            elif args.speculative_num_steps is None and spec != "STANDALONE" and overlap:
                # sglang picks the parameters from the model (the series'
                # 0015 before it chooses spec v1 or v2): topk 4 for a Llama
                # target runs spec v1 without the overlap schedule.
                overlap, overlap_off = None, (
                    "sglang picks the EAGLE parameters from the model (a Llama target "
                    "gets topk 4 and runs spec v1 without the overlap schedule); "
                    "--speculative-num-steps, --speculative-eagle-topk and "
                    "--speculative-num-draft-tokens decide it")

    facts = dict(
        overlap=overlap,
        spec_algorithm=spec,
        topk=topk,
        two_batch_overlap=args.enable_two_batch_overlap,
        mixed_chunk=mixed_chunk,
        dp_attention=dp_attention,
        attention_backend=attention,
        prefill_backend=prefill,
        decode_backend=decode,
        draft_backend=draft,
        speculative_attention_mode=args.speculative_attention_mode,
        # the model's attention: not in the flags
        mla=None,
        sliding_window=None,
        local_attention=None,
        cross_attention=None,
        attn_cp_size=args.attention_context_parallel_size,
        musa=None,
    )
    return facts, overlap_off


def _eagle_topk(args, spec, attention, prefill, decode) -> Optional[int]:
    """The EAGLE topk sglang settles on (None: it picks it from the model), or
    SglpatchError where server_args fails on the flags."""
    topk = args.speculative_eagle_topk
    if args.speculative_num_steps is None:
        if topk is not None or args.speculative_num_draft_tokens is not None:
            raise _refuse("--speculative-eagle-topk and --speculative-num-draft-tokens "
                          "are taken only with --speculative-num-steps (server_args "
                          "asserts it before picking all three from the model)")
        return 1 if spec == "STANDALONE" else None
    if topk is None:
        raise _refuse("--speculative-num-steps without --speculative-eagle-topk "
                      "(server_args compares the missing topk with 1 and fails)")
    if topk < 1:
        raise _refuse(f"--speculative-eagle-topk {topk}: EAGLE drafts at least one "
                      "token a step (sglang 0.5.12.post1 does not check it)")
    if topk > 1 and "trtllm_mha" in (attention, prefill, decode):
        raise _refuse("trtllm_mha serves speculative decoding at topk 1 only")
    page_size = args.page_size or 1
    if topk > 1 and page_size > 1 and attention not in (None, "flashinfer", "fa3"):
        raise _refuse(f"EAGLE topk {topk} with page size {page_size} is served by "
                      "flashinfer or fa3 only")
    return topk


def _check_eagle_draft(args, attention, prefill, decode, draft) -> None:
    """SglpatchError where sglang could not build the EAGLE draft's backends
    (DraftBackendFactory: the draft extend always, the draft decode with
    more than one step)."""
    mode_decode = args.speculative_attention_mode == "decode"
    roles = [("--speculative-draft-attention-backend", draft)] if draft else [
        ("the draft extend backend",
         (decode if mode_decode else prefill) or attention),
    ]
    if not draft and args.speculative_num_steps != 1:
        roles.append(("the draft decode backend", decode or attention))
    for role, name in roles:
        if name not in (None, HICACHE_DECODE) and name not in EAGLE_DRAFT_BACKENDS:
            raise _refuse(f"{role} {name}: sglang builds EAGLE drafts on "
                          f"{', '.join(EAGLE_DRAFT_BACKENDS)} only")


def explain_launch(flags: List[str], env: Optional[Mapping[str, str]] = None
                   ) -> Dict[str, str]:
    """{"pull": "on" | "off" | "depends" | "not used", "reason": ...} for these
    flags; SglpatchError (one line) where sglang would refuse them."""
    facts, overlap_off = launch_facts(flags, env)
    verdict, reason = seq_lens_pull.decide_seq_lens_pull(**facts)
    if verdict in (seq_lens_pull.NOT_USED, seq_lens_pull.DEPENDS) and overlap_off is not None:
        reason = f"{reason}; {overlap_off}"
    return {"pull": verdict, "reason": reason}
