"""`sglpatch status --explain -- FLAGS`: whether a server launched with these
`python -m sglang.launch_server` flags keeps the per-step seq_lens host pull.

The patched scheduler says the same in its start-up line (patch 0008), from
the attention backend objects it built. Here only the flags are known, and
neither sglang nor torch is imported, so the rules are the series' own,
written out: the pull is skipped when every attention backend of the
speculative decode step reads device lengths (the Triton backends, patch
0006) and no setting reads the host lengths itself (two-batch overlap, mixed
chunked prefill); without the overlap schedule or without speculative
decoding nothing is relayed, so there is nothing to pull.
"""

import argparse
from typing import Dict, List

# --attention-backend values whose backend classes set needs_cpu_seq_lens =
# False in the series (TritonAttnBackend, TritonMultiStepDraftBackend).
BACKENDS_WITHOUT_PULL = ("triton",)
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
    return p


def explain_launch(flags: List[str]) -> Dict[str, str]:
    """{"pull": "on" | "off" | "not used", "reason": ...} for these flags."""
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
    if backend is None:
        return {"pull": "on", "reason": "no --attention-backend: sglang picks one at "
                "start (fa3 on Hopper for Llama-style models with EAGLE topk 1, "
                "flashinfer on most other GPUs), and only triton skips the pull "
                "(--attention-backend triton); the server's start-up line says "
                "what it chose"}
    if backend in BACKENDS_WITHOUT_PULL:
        return {"pull": "off", "reason": f"{backend} reads device lengths"}
    return {"pull": "on", "reason": f"{backend} reads the host lengths; only "
            "triton skips the pull (--attention-backend triton)"}
