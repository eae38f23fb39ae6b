"""`sglpatch status --explain -- FLAGS`: whether a server launched with these
`python -m sglang.launch_server` flags keeps the per-step seq_lens host pull.

The patched scheduler says the same in its start-up line (patch 0008), from
the attention backend objects it built. Here only the flags are known, and
neither sglang nor torch is imported, so the rules are the series' own,
written out: the pull is skipped when every attention backend of the
speculative decode step reads device lengths (the Triton backends, patch
0006; fa3 with EAGLE topk 1 on a plain MHA model, patch 0011) and no
setting reads the host lengths itself (two-batch overlap, mixed chunked
prefill); without the overlap schedule or without speculative decoding
nothing is relayed, so there is nothing to pull.  What the flags cannot
say (the model's attention, the GPU sglang picks a backend for) is named
in the reason, and the server's start-up line settles it.
"""

import argparse
from typing import Dict, List

# --attention-backend values whose backend classes set needs_cpu_seq_lens =
# False in the series (TritonAttnBackend, TritonMultiStepDraftBackend).
BACKENDS_WITHOUT_PULL = ("triton",)
# --attention-backend values whose backends skip the pull only in the plain
# case (patch 0011, fa3_needs_cpu_seq_lens: EAGLE topk 1, an MHA model
# without local, sliding-window or cross attention, no context parallelism)
BACKENDS_WITHOUT_PULL_AT_TOPK_1 = ("fa3",)
FA3_PLAIN_CASE = ("an MHA model without local, sliding-window or cross attention "
                  "(an MLA or sliding-window model keeps the pull; the server's "
                  "start-up line says)")
# Speculative algorithms for which sglang 0.5.12.post1 turns mixed chunked
# prefill off itself (server_args), so --enable-mixed-chunk forces nothing.
SPEC_WITHOUT_MIXED_CHUNK = ("EAGLE", "EAGLE3")


def _launch_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--attention-backend")
    p.add_argument("--decode-attention-backend")
    p.add_argument("--speculative-algorithm")
    p.add_argument("--enable-two-batch-overlap", action="store_true")
    p.add_argument("--enable-mixed-chunk", action="store_true")
    p.add_argument("--disable-overlap-schedule", action="store_true")
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--attn-cp-size", type=int, default=1)
    return p


def explain_launch(flags: List[str]) -> Dict[str, str]:
    """{"pull": "on" | "off" | "depends" | "not used", "reason": ...} for these
    flags; "depends" where what decides it is not in the flags."""
    args, _ = _launch_parser().parse_known_args(flags)
    if args.disable_overlap_schedule:
        return {"pull": "not used", "reason": "the overlap schedule is off, so "
                "nothing is relayed (each speculative step syncs on the host)"}
    spec = (args.speculative_algorithm or "").upper()
    if not spec or spec == "NONE":
        return {"pull": "not used", "reason": "no speculative decoding: decode "
                "lengths are not relayed"}
    if args.enable_two_batch_overlap:
        return {"pull": "on", "reason": "two-batch overlap splits batches by their "
                "host lengths (off without --enable-two-batch-overlap)"}
    if args.enable_mixed_chunk and spec not in SPEC_WITHOUT_MIXED_CHUNK:
        return {"pull": "on", "reason": "mixed chunked prefill reads the running "
                "batch's host lengths (off without --enable-mixed-chunk)"}
    backend = args.decode_attention_backend or args.attention_backend
    topk = args.speculative_eagle_topk
    if backend is None:
        if topk is not None and topk > 1:
            return {"pull": "on", "reason": f"no --attention-backend and EAGLE topk {topk}: "
                    "sglang picks flashinfer (or trtllm_mha on Blackwell), which reads "
                    "the host lengths; only triton skips the pull at any topk "
                    "(--attention-backend triton)"}
        return {"pull": "depends", "reason": "no --attention-backend: sglang picks one at "
                "start. fa3 (Hopper, MHA models, EAGLE topk 1: pass "
                "--speculative-eagle-topk 1, as sglang's own default for Llama is 4) "
                f"skips the pull for {FA3_PLAIN_CASE}; flashinfer (most other GPUs) "
                "keeps it; the server's start-up line says what it chose"}
    if backend in BACKENDS_WITHOUT_PULL:
        return {"pull": "off", "reason": f"{backend} reads device lengths"}
    if backend in BACKENDS_WITHOUT_PULL_AT_TOPK_1:
        if topk is not None and topk > 1:
            return {"pull": "on", "reason": f"{backend} with EAGLE topk {topk} reads the host "
                    "lengths; it skips the pull with --speculative-eagle-topk 1, and triton "
                    "at any topk"}
        if args.attn_cp_size > 1:
            return {"pull": "on", "reason": f"{backend} with context parallelism reads the "
                    "host lengths (off without --attn-cp-size)"}
        if topk is None:
            return {"pull": "depends", "reason": f"{backend} skips the pull with EAGLE topk 1 "
                    f"for {FA3_PLAIN_CASE}; without --speculative-eagle-topk sglang picks "
                    "the topk (4 for Llama), and with topk > 1 the pull stays on"}
        return {"pull": "off", "reason": f"{backend} sizes its page-table fill from a bound "
                f"the scheduler already knows, for {FA3_PLAIN_CASE}"}
    return {"pull": "on", "reason": f"{backend} reads the host lengths; triton skips "
            "the pull (--attention-backend triton), and fa3 with EAGLE topk 1"}
