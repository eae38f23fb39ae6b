"""Whether a speculative decode step pulls the relayed seq_lens to the host.

With the overlap schedule and speculative decoding (spec v2), the lengths
each verify produces are relayed to the next step on the device; sglang
0.5.12.post1 also copies them to the host on every step, and the series
skips that copy when nothing on the step reads them there. This module is
the one decision, on plain facts of a launch. The patched scheduler's
start-up line (sglang.srt.managers.seq_lens_pull, facts from its
server_args and model config) and `sglpatch status --explain`
(sglpatch.seq_lens_pull, facts from launch flags) both call it; the two
files are byte-identical, so the two cannot disagree. Standard library
only: no torch, no sglang.

A fact given as None is not known (the backend sglang picks at start, the
model's attention): the verdict is then DEPENDS, unless a known fact
already decides it.
"""

from typing import List, Optional, Tuple

ON = "on"
OFF = "off"
DEPENDS = "depends"
NOT_USED = "not used"

# Algorithms whose spec v2 worker lists the attention backends of its
# decode step (sglang resolves NEXTN to EAGLE); any other keeps the pull.
SPEC_V2_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")
# Backends (sglang's --attention-backend names) that never read the host
# lengths of a spec v2 decode step.
DEVICE_LENGTH_BACKENDS = ("triton",)
# FlashAttentionBackend at FA3 reads them only to size its page-table fill,
# which a bound serves as well, in the reviewed case (fa3_needs_cpu_seq_lens).
FA3 = "fa3"

OFF_REASON = "every attention backend of the decode step reads device lengths"
REMEDY = (
    "triton skips the pull at any EAGLE topk (--attention-backend triton), "
    "fa3 at EAGLE topk 1 on an MHA model"
)


def decide_seq_lens_pull(
    *,
    overlap: Optional[bool],
    spec_algorithm: Optional[str],
    topk: Optional[int],
    two_batch_overlap: Optional[bool],
    mixed_chunk: Optional[bool],
    dp_attention: Optional[bool],
    attention_backend: Optional[str],
    prefill_backend: Optional[str],
    decode_backend: Optional[str],
    draft_backend: Optional[str],
    speculative_attention_mode: str,
    mla: Optional[bool],
    sliding_window: Optional[bool],
    local_attention: Optional[bool],
    cross_attention: Optional[bool],
    attn_cp_size: Optional[int],
    musa: Optional[bool],
) -> Tuple[str, str]:
    """(ON / OFF / DEPENDS / NOT_USED, reason) for a launch.

    overlap: the overlap schedule runs (after sglang's own adjustments).
    spec_algorithm: sglang's name of it, None without speculative decoding.
    topk: --speculative-eagle-topk as sglang settled it.
    two_batch_overlap, mixed_chunk, dp_attention: those settings as sglang
    settled them (--enable-two-batch-overlap, --enable-mixed-chunk,
    --enable-dp-attention with more than one DP rank).
    attention_backend: --attention-backend as sglang resolved it (None: not
    known, sglang picks one at start); prefill_backend, decode_backend,
    draft_backend: --prefill-attention-backend, --decode-attention-backend,
    --speculative-draft-attention-backend (None: not given);
    speculative_attention_mode: --speculative-attention-mode.
    The target model's attention: mla, sliding_window (any sliding-window
    layer), local_attention (chunked local attention), cross_attention (an
    encoder-decoder model); attn_cp_size: --attn-cp-size; musa: the GPU is
    a Moore Threads one (sglang's fa3 there is its own subclass).
    """
    if overlap is None:
        return DEPENDS, "whether the overlap schedule runs is not known"
    if not overlap:
        return NOT_USED, (
            "the overlap schedule is off, so nothing is relayed "
            "(each speculative step syncs on the host)"
        )
    if spec_algorithm is None:
        return NOT_USED, "no speculative decoding: decode lengths are not relayed"
    spec = spec_algorithm.upper()
    if spec == "NEXTN":
        spec = "EAGLE"
    if spec not in SPEC_V2_ALGORITHMS:
        return ON, (
            f"the {spec_algorithm} worker does not list the attention backends "
            "of its decode step, so the scheduler keeps the pull"
        )

    unknown: List[str] = []
    for fact, flag, reason in (
        (
            two_batch_overlap,
            "--enable-two-batch-overlap",
            "two-batch overlap splits batches by their host lengths",
        ),
        (
            mixed_chunk,
            "--enable-mixed-chunk",
            "mixed chunked prefill reads the running batch's host lengths",
        ),
        (
            dp_attention,
            "--enable-dp-attention",
            "DP attention pads every eager forward (one runs whenever a DP rank "
            "prefills) from the host lengths",
        ),
    ):
        if fact:
            return ON, f"{reason} (off without {flag})"
        if fact is None:
            unknown.append(f"not known whether {flag} is in effect")

    model = dict(
        topk=topk,
        mla=mla,
        sliding_window=sliding_window,
        local_attention=local_attention,
        cross_attention=cross_attention,
        attn_cp_size=attn_cp_size,
        musa=musa,
    )
    prefill = prefill_backend or attention_backend
    decode = decode_backend or attention_backend
    extend = decode if speculative_attention_mode == "decode" else prefill
    roles = (
        ("target verify", _target(prefill, decode)),
        ("draft decode", draft_backend or decode),
        ("draft extend", draft_backend or extend),
    )
    for _, name in roles:
        label = _label(name, roles)
        verdict, reason = _backend_verdict(name, label, prefill, decode, model)
        if verdict == ON:
            return ON, reason
        if verdict == DEPENDS:
            unknown.append(reason)
    if unknown:
        return DEPENDS, unknown[0]
    return OFF, OFF_REASON


class _Hybrid:
    """The target of a launch whose prefill and decode backends differ."""


def _target(prefill: Optional[str], decode: Optional[str]):
    if prefill is None or decode is None:
        return None
    return _Hybrid if prefill != decode else prefill


def _label(name, roles) -> str:
    """The backend's name, with the roles it serves where the step's backends
    differ (a draft backend of its own)."""
    served = [role for role, other in roles if other == name]
    if len(served) == len(roles):
        return str(name)
    return f"{name} ({', '.join(served)})"


def _backend_verdict(name, label, prefill, decode, model) -> Tuple[str, str]:
    if name is _Hybrid:
        return ON, (
            f"the prefill backend {prefill} and the decode backend {decode} differ, "
            "and sglang serves them through HybridAttnBackend, which reads the host "
            f"lengths; with one backend for both, {REMEDY}"
        )
    if name is None:
        given = prefill or decode
        if given is not None:
            return DEPENDS, (
                "sglang picks the other attention backend at start; unless it picks "
                f"{given}, it serves both through HybridAttnBackend, which keeps the "
                "pull (the server's start-up line says)"
            )
        return DEPENDS, (
            "sglang picks the attention backend at start (fa3 on Hopper for MHA "
            "models, trtllm_mha on Blackwell, flashinfer on most other GPUs); "
            f"{REMEDY}, the others keep it (the server's start-up line says which "
            "it picked)"
        )
    if name in DEVICE_LENGTH_BACKENDS:
        return OFF, OFF_REASON
    if name == FA3:
        return _fa3_verdict(label, **model)
    return ON, f"{label} reads the host lengths; {REMEDY}"


def _fa3_verdict(
    label,
    topk,
    mla,
    sliding_window,
    local_attention,
    cross_attention,
    attn_cp_size,
    musa,
) -> Tuple[str, str]:
    """fa3_needs_cpu_seq_lens on facts: FlashAttentionBackend itself (not the
    MUSA subclass) at EAGLE topk 1, MHA, without sliding-window, local or
    cross attention, without context parallelism."""
    keeps = " reads the host lengths; " + REMEDY
    if musa:
        return ON, f"{label} on MUSA (MusaFlashAttentionBackend)" + keeps
    if topk is not None and topk > 1:
        return ON, (
            f"{label} at EAGLE topk {topk} reads the host lengths; at topk 1 it "
            "skips the pull, and triton at any topk (--attention-backend triton)"
        )
    for fact, what in (
        (mla, "an MLA model"),
        (sliding_window, "a model with sliding-window attention"),
        (local_attention, "a model with local attention"),
        (cross_attention, "an encoder-decoder model"),
    ):
        if fact:
            return ON, f"{label} on {what}" + keeps
    if attn_cp_size is not None and attn_cp_size > 1:
        cp = f"with context parallelism (--attn-cp-size {attn_cp_size})"
        return ON, f"{label} {cp}" + keeps
    if topk is None:
        return DEPENDS, (
            "fa3 skips the pull only at EAGLE topk 1, and sglang picks the topk "
            "from the model when --speculative-eagle-topk is not given (4 for "
            "Llama and Grok, 1 for most others)"
        )
    model = (mla, sliding_window, local_attention, cross_attention, attn_cp_size, musa)
    if None in model:
        return DEPENDS, (
            "fa3 at EAGLE topk 1 skips the pull only for an MHA model without "
            "sliding-window, local or cross attention, which the launch flags do "
            "not say (the server's start-up line does)"
        )
    return OFF, OFF_REASON


def describe(verdict: str, reason: str) -> str:
    """The words of the start-up line after "per-step seq_lens host pull"."""
    if verdict == NOT_USED:
        return f"{NOT_USED} ({reason})"
    return f"{verdict}: {reason}"
