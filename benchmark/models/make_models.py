"""Synthetic, offline target + EAGLE3 draft pairs for sglang benchmarks.

No download, no training: the weights are *constructed* so that

* the target's greedy next token is a fixed function ``f`` of the current
  token with a large logit margin (the "peaked" design, benchmark/kit/README.md):
  the embedding dominates the residual stream, every layer only adds a small
  random perturbation, and the lm_head row of ``f(t)`` points at token ``t``'s
  code.  Greedy output is therefore stable across kernels, batch shapes and
  speculative / plain decoding, so outputs can be compared token for token;
* the EAGLE3 draft's accuracy is controllable: it is right for its first
  ``accept_steps`` draft tokens, and each draft token is additionally right
  only with probability ``draft_accuracy`` (a fixed per-token choice), so the
  accept length can be set from 1 up to ``steps + 1`` and to realistic
  fractional values (2.5-3.5) in between.

How the draft works (one decoder layer, attention output zeroed by o_proj = 0,
so only fc, the MLP, the norms and the lm_head matter):

  hidden space dims: 0 = constant, 1-2 = step counter, 4.. = token code.
  ``f`` is one cycle over the hot (draft-vocab) tokens, and the code of the
  k-th token of the cycle is ``R^k c0`` for a block rotation ``R`` (angles
  2*pi*m/Vd): one matrix advances *every* token to its successor, and the
  codes stay nearly orthogonal (inner products ~ 1/sqrt(hidden)).
  * fc maps the target's auxiliary hidden states (~ code of x_p) to
    ``M * (b0 e0 + kappa e1 + a code(x_p))``.
  * The MLP is made linear by a gate that only reads the constant dim
    (silu(G) ~ G) and computes ``(R - I) h``; with the residual the layer
    outputs ``R h``: each draft step advances the code by one token and the
    counter by ``PHI``.
  * lm_head row of token y points at code(pred(y)), so draft step k (hidden
    ~ code(f^k(x_p))) predicts f^(k+1)(x_p) = the right token.
  * A garbage row reads the counter at angle (K+1)*PHI and outbids the right
    row exactly at draft step K+1 (cos of the neighbouring steps <= 0.5).
  * For a "bad" token u (probability 1 - draft_accuracy) the row of f(f(u))
    also points at code(u) with 1.4x weight, so the draft is wrong there.

The target is a LlamaForCausalLM, or for the `qwen3-*` presets a dense
Qwen3ForCausalLM: the same weights plus Qwen3's per-head RMS norms of q and
k (q_norm, k_norm) set to ones. They rescale the attention scores only; the
attention's output still enters the residual through the small o_proj, so
the design above holds unchanged (sglang 0.5.12.post1 serves Qwen3, not
Llama, with --enable-dp-attention). The draft is the Llama EAGLE3 head for
either target.

With --eagle-draft it also writes an EAGLE (v1) draft for FR-Spec (sglang's
--speculative-token-map, which only EAGLE drafts use): DIR/draft-eagle, a
LlamaForCausalLMEagle of one layer, and DIR/draft-eagle/token_map.pt, the
list of the preset's hot tokens (those of the EAGLE3 draft vocab, f's whole
image: every output token). sglang gives such a draft the target's embedding
and lm_head (the head cut to the hot tokens under a token map), so the draft
holds no lm_head and no embedding: fc takes the embedding half of its input,
cat(embed(token), target hidden), as it is, and attention and MLP add only a
small random update (o_proj and down_proj small, as in the target's layers).
The draft's output is then ~ the token's embedding, from which the target's
head predicts f(token): the draft is right at every step, so with a token map
its accept length stays steps + 1 only if the hot ids map back right. Its
random weights come from a generator of their own: the other files are the
same bytes with or without it.

Usage: python benchmark/models/make_models.py --preset small --out DIR
       [--accept-steps K] [--draft-accuracy P] [--device cuda] [--eagle-draft]
writes DIR/target and DIR/draft (safetensors, config.json, tokenizer).
"""

import argparse
import json
import math
import os

PRESETS = {
    # smoke test: seconds to build and to serve; 8 layers so that EAGLE3 gets
    # three distinct auxiliary layers (a 4-layer model gives two: fc fails)
    "tiny": dict(hidden=512, layers=8, heads=8, kv_heads=4, inter=1024,
                 vocab=4096, draft_vocab=2048),
    # the baseline shape first measured on the GPU (benchmark/kit/README.md)
    "small": dict(hidden=2048, layers=16, heads=16, kv_heads=8, inter=5632,
                  vocab=32000, draft_vocab=32000),
    # Llama-3.1-8B shape with a 32k-token draft vocab like real EAGLE3 heads
    "llama-8b-shape": dict(hidden=4096, layers=32, heads=32, kv_heads=8,
                           inter=14336, vocab=128256, draft_vocab=32000),
    # `small`'s shape with a hot (draft) vocab of a quarter of the vocab: FR-Spec
    # (--token-map) on fa3, whose add-on kit serves head dim 128 only (tiny's is 64)
    "small-fr": dict(hidden=2048, layers=16, heads=16, kv_heads=8, inter=5632,
                     vocab=32000, draft_vocab=8000),
    # `small`'s shape as a dense Qwen3 target: the DP-attention preset
    "qwen3-small": dict(hidden=2048, layers=16, heads=16, kv_heads=8, inter=5632,
                        vocab=32000, draft_vocab=32000, arch="qwen3"),
    # `tiny`'s shape as a Qwen3 target (CPU checks of the construction)
    "qwen3-tiny": dict(hidden=512, layers=8, heads=8, kv_heads=4, inter=1024,
                       vocab=4096, draft_vocab=2048, arch="qwen3"),
}

PHI = math.pi / 3  # counter angle per draft step: cos(PHI) = 0.5 leaves margin
B0 = 0.3  # share of the constant dim in every hidden state
KAPPA = 0.5  # share of the step counter in the draft's hidden state
LAYER_EPS = 0.01  # relative size of each target layer's residual update
TARGET_PEAK = 24.0  # target logit of the right token (others ~ +-2)
DRAFT_PEAK = 16.0
GATE = 16.0  # silu(16) = 16 * (1 - 1e-7): the draft MLP is linear
BAD_WEIGHT = 1.4  # how much a wrong row outbids the right one


def aux_layer_ids(layers):
    # sglang captures the input of layer id+1; these give its default
    # [2, L/2, L-3] and, for 8 layers, [1, 3, 4] as seen on the device
    return [1, layers // 2 - 1, layers - 4]


def build_codes(torch, gen, dev, vocab, hot, cycle, code_dim):
    """Unit codes (vocab x code_dim, float32).

    Hot tokens in cycle order get R^k c0 (block angles 2*pi*m_b/Vd, phases
    psi_b, equal block radii); the other tokens random unit vectors.
    Returns codes, the block multipliers m and the number of hot tokens.
    """
    vd = len(cycle)
    nb = code_dim // 2
    m = torch.randint(1, vd, (nb,), generator=gen, device=dev)
    psi = torch.rand(nb, generator=gen, device=dev) * 2 * math.pi
    codes = torch.randn(vocab, code_dim, generator=gen, device=dev)
    codes /= codes.norm(dim=1, keepdim=True)
    k = torch.arange(vd, device=dev)
    # integer (k * m) mod vd first: float32 k * theta would lose the phase
    ang = (k[:, None] * m[None, :]) % vd
    ang = ang.float() * (2 * math.pi / vd) + psi[None, :]
    r = math.sqrt(2.0 / code_dim)
    hot_codes = torch.stack([ang.cos(), ang.sin()], dim=-1).reshape(vd, 2 * nb) * r
    codes[cycle] = hot_codes
    return codes, m


def build(preset, out, accept_steps=None, draft_accuracy=1.0, seed=0,
          device="cpu", spec_steps=3, eagle_draft=False):
    import torch
    from safetensors.torch import save_file

    p = dict(PRESETS[preset])
    H, L, V, Vd = p["hidden"], p["layers"], p["vocab"], p["draft_vocab"]
    nh, nkv, inter = p["heads"], p["kv_heads"], p["inter"]
    hd = H // nh
    assert inter >= H, "the linear draft MLP needs intermediate >= hidden"
    if accept_steps is None:
        accept_steps = spec_steps
    # the counter repeats every 6 steps: K+1 must not alias a right step
    assert 0 <= accept_steps <= 5 and spec_steps <= 6
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    cpu_gen = torch.Generator().manual_seed(seed + 1)

    # ---- token function f: one cycle over the hot tokens ----------------
    # hot tokens: a random subset; when the draft vocab is (nearly) the whole
    # vocab, all tokens (the 3 special ids then take part in the cycle too)
    if Vd > V:
        raise ValueError("draft vocab larger than vocab")
    if Vd > V - 3:
        hot = torch.randperm(V, generator=cpu_gen)[:Vd].sort().values
    else:
        hot = (torch.randperm(V - 3, generator=cpu_gen)[:Vd] + 3).sort().values
    cycle = hot[torch.randperm(Vd, generator=cpu_gen)]  # cycle order
    f = torch.empty(V, dtype=torch.long)
    f[cycle] = torch.roll(cycle, -1)
    is_hot = torch.zeros(V, dtype=torch.bool)
    is_hot[hot] = True
    cold = (~is_hot).nonzero().flatten()
    f[cold] = cycle[torch.randint(0, Vd, (len(cold),), generator=cpu_gen)]

    code_dim = H - 4  # dims 0 const, 1-2 counter, 3 unused, 4.. codes
    codes, m = build_codes(torch, gen, dev, V, hot.to(dev), cycle.to(dev), code_dim)
    f_dev = f.to(dev)
    bf16 = torch.bfloat16

    def rand(*shape, std):
        return (torch.randn(*shape, generator=gen, device=dev) * std).to(bf16)

    # ---- target -----------------------------------------------------------
    s = math.sqrt(H)  # embedding norm: RMS 1 per element
    alpha = math.sqrt(1 - B0 * B0)
    emb = torch.zeros(V, H, device=dev)
    emb[:, 0] = s * B0
    emb[:, 4:] = s * alpha * codes
    # lm_head row y = sum of the codes of y's preimages: logit(f(t)) peaks
    head = torch.zeros(V, H, device=dev)
    lam = TARGET_PEAK / (alpha * math.sqrt(H))
    head[:, 4:].index_add_(0, f_dev, codes * lam)
    t = {"model.embed_tokens.weight": emb.to(bf16),
         "lm_head.weight": head.to(bf16),
         "model.norm.weight": torch.ones(H, dtype=bf16, device=dev)}
    del head
    std_in = 1 / math.sqrt(H)
    for i in range(L):
        pre = f"model.layers.{i}."
        t[pre + "input_layernorm.weight"] = torch.ones(H, dtype=bf16, device=dev)
        t[pre + "post_attention_layernorm.weight"] = torch.ones(H, dtype=bf16, device=dev)
        t[pre + "self_attn.q_proj.weight"] = rand(nh * hd, H, std=std_in)
        t[pre + "self_attn.k_proj.weight"] = rand(nkv * hd, H, std=std_in)
        t[pre + "self_attn.v_proj.weight"] = rand(nkv * hd, H, std=std_in)
        if p.get("arch") == "qwen3":
            # per-head RMS norms of q and k: ones leave the design as it is
            t[pre + "self_attn.q_norm.weight"] = torch.ones(hd, dtype=bf16, device=dev)
            t[pre + "self_attn.k_norm.weight"] = torch.ones(hd, dtype=bf16, device=dev)
        # small output projections: the residual stays ~ the embedding
        t[pre + "self_attn.o_proj.weight"] = rand(H, nh * hd, std=LAYER_EPS / math.sqrt(nh * hd))
        t[pre + "mlp.gate_proj.weight"] = rand(inter, H, std=std_in)
        t[pre + "mlp.up_proj.weight"] = rand(inter, H, std=std_in)
        t[pre + "mlp.down_proj.weight"] = rand(H, inter, std=LAYER_EPS * 2 / math.sqrt(inter))

    # ---- draft ------------------------------------------------------------
    Mh = math.sqrt(H)  # draft hidden norm
    kappa = KAPPA if accept_steps < spec_steps else 0.0
    a = math.sqrt(1 - B0 * B0 - kappa * kappa)
    # fc: mean of the three aux states (each ~ s(B0 e0 + alpha code))
    A = torch.zeros(H, H, device=dev)
    A[0, 0] = Mh * B0 / (s * B0)
    A[1, 0] = Mh * kappa / (s * B0)
    A[4:, 4:] = torch.eye(code_dim, device=dev) * (Mh * a / (s * alpha))
    fc = torch.cat([A, A, A], dim=1) / 3
    # R: identity on dims 0 and 3, counter rotation on (1, 2), code blocks
    Rm = torch.eye(H, device=dev)
    Rm[1, 1], Rm[1, 2], Rm[2, 1], Rm[2, 2] = (math.cos(PHI), -math.sin(PHI),
                                              math.sin(PHI), math.cos(PHI))
    th = m.float() * (2 * math.pi / Vd)
    idx = torch.arange(code_dim // 2, device=dev) * 2 + 4
    Rm[idx, idx] = th.cos()
    Rm[idx, idx + 1] = -th.sin()
    Rm[idx + 1, idx] = th.sin()
    Rm[idx + 1, idx + 1] = th.cos()
    # MLP: gate reads only the constant dim (y0 = sqrt(H) * B0) -> G
    gate = torch.zeros(inter, H, device=dev)
    gate[:, 0] = GATE / (math.sqrt(H) * B0)
    up = torch.zeros(inter, H, device=dev)
    up[:H] = (Rm - torch.eye(H, device=dev)) * (Mh / (math.sqrt(H) * GATE))
    down = torch.zeros(H, inter, device=dev)
    down[:, :H] = torch.eye(H, device=dev)
    # lm_head over the draft vocab: row i -> target token hot[i]
    lam_d = DRAFT_PEAK / (a * math.sqrt(H))
    pred = torch.empty(V, dtype=torch.long)
    pred[torch.roll(cycle, -1)] = cycle  # cycle predecessor
    pos_in_hot = torch.full((V,), -1, dtype=torch.long)
    pos_in_hot[hot] = torch.arange(Vd)
    dhead = torch.zeros(Vd, H, device=dev)
    dhead[:, 4:] = codes[pred[hot].to(dev)] * lam_d
    # per-token misses: row of f(f(u)) outbids f(u) when the code is u
    bad = torch.rand(Vd, generator=cpu_gen) >= draft_accuracy
    bad_u = cycle[bad[: Vd]] if draft_accuracy < 1.0 else cycle[:0]
    if len(bad_u):
        rows = pos_in_hot[f[f[bad_u]]].to(dev)
        dhead[:, 4:].index_add_(0, rows, codes[bad_u.to(dev)] * lam_d * BAD_WEIGHT)
    # step counter: the garbage row wins at draft step K+1 only
    garbage = None
    if kappa > 0:
        garbage = int(cycle[0])
        ang = (accept_steps + 1) * PHI
        w = BAD_WEIGHT * a / kappa * lam_d
        g = int(pos_in_hot[garbage])
        dhead[g, 1] += w * math.cos(ang)
        dhead[g, 2] += w * math.sin(ang)
    d = {"fc.weight": fc.to(bf16),
         "lm_head.weight": dhead.to(bf16),
         "norm.weight": torch.ones(H, dtype=bf16, device=dev),
         "d2t": (hot - torch.arange(Vd)).to(torch.int64),
         "t2d": is_hot,
         "midlayer.hidden_norm.weight": torch.ones(H, dtype=bf16, device=dev),
         "midlayer.input_layernorm.weight": torch.ones(H, dtype=bf16, device=dev),
         "midlayer.post_attention_layernorm.weight": torch.ones(H, dtype=bf16, device=dev),
         "midlayer.self_attn.q_proj.weight": rand(nh * hd, 2 * H, std=std_in),
         "midlayer.self_attn.k_proj.weight": rand(nkv * hd, 2 * H, std=std_in),
         "midlayer.self_attn.v_proj.weight": rand(nkv * hd, 2 * H, std=std_in),
         # zero: the draft's attention computes (realistic cost) but adds nothing
         "midlayer.self_attn.o_proj.weight": torch.zeros(H, nh * hd, dtype=bf16, device=dev),
         "midlayer.mlp.gate_proj.weight": gate.to(bf16),
         "midlayer.mlp.up_proj.weight": up.to(bf16),
         "midlayer.mlp.down_proj.weight": down.to(bf16)}

    meta = dict(preset=preset, seed=seed, accept_steps=accept_steps,
                draft_accuracy=draft_accuracy, spec_steps=spec_steps,
                expected_accept_length=expected_accept_length(
                    accept_steps, draft_accuracy, spec_steps),
                garbage_token=garbage, bad_tokens=int(len(bad_u)), **p)
    _save(out, "target", t, target_config(p), meta, save_file)
    _save(out, "draft", d, draft_config(p), meta, save_file)
    # f is needed by checks that want the expected greedy output
    torch.save({"f": f, "hot": hot, "cycle": cycle}, os.path.join(out, "token_map.pt"))
    if eagle_draft:
        meta = dict(meta, eagle_draft=build_eagle_draft(torch, p, out, meta, hot, seed, dev,
                                                        save_file))
    return meta


EAGLE_DRAFT = "draft-eagle"  # DIR/draft-eagle: the EAGLE (v1) draft
TOKEN_MAP = "token_map.pt"  # in it: the hot token ids, for --speculative-token-map


def build_eagle_draft(torch, p, out, meta, hot, seed, dev, save_file):
    """DIR/draft-eagle and its token map (module docstring); returns what
    its synthetic.json adds to the pair's metadata."""
    H, nh, nkv, inter = p["hidden"], p["heads"], p["kv_heads"], p["inter"]
    hd = H // nh
    bf16 = torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(seed + 2)  # not the pair's draws

    def rand(*shape, std):
        return (torch.randn(*shape, generator=gen, device=dev) * std).to(bf16)

    std_in = 1 / math.sqrt(H)
    # fc(cat(embed, hidden)) = embed: the token's own embedding goes on
    fc = torch.cat([torch.eye(H, device=dev), torch.zeros(H, H, device=dev)], dim=1)
    pre = "layers.0."  # no input_layernorm: sglang's EAGLE layer 0 has none
    e = {"fc.weight": fc.to(bf16), "fc.bias": torch.zeros(H, dtype=bf16, device=dev),
         pre + "post_attention_layernorm.weight": torch.ones(H, dtype=bf16, device=dev),
         pre + "self_attn.q_proj.weight": rand(nh * hd, H, std=std_in),
         pre + "self_attn.k_proj.weight": rand(nkv * hd, H, std=std_in),
         pre + "self_attn.v_proj.weight": rand(nkv * hd, H, std=std_in),
         pre + "self_attn.o_proj.weight": rand(H, nh * hd, std=LAYER_EPS / math.sqrt(nh * hd)),
         pre + "mlp.gate_proj.weight": rand(inter, H, std=std_in),
         pre + "mlp.up_proj.weight": rand(inter, H, std=std_in),
         pre + "mlp.down_proj.weight": rand(H, inter, std=LAYER_EPS * 2 / math.sqrt(inter))}
    info = {"dir": EAGLE_DRAFT, "token_map": os.path.join(EAGLE_DRAFT, TOKEN_MAP),
            "hot_vocab_size": int(len(hot))}
    _save(out, EAGLE_DRAFT, e, eagle_draft_config(p), dict(meta, eagle_draft=info), save_file)
    # a plain list of ints: sglang's load_token_map reads it with weights_only
    torch.save([int(t) for t in hot], os.path.join(out, EAGLE_DRAFT, TOKEN_MAP))
    return info


def expected_accept_length(k, p, steps):
    """E[accepted drafts + bonus] for independent per-step accuracy p."""
    return 1 + sum(p ** j for j in range(1, min(k, steps) + 1))


def target_config(p):
    if p.get("arch") == "qwen3":
        return qwen3_config(p)
    return llama_config(p)


def llama_config(p):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": p["hidden"], "num_hidden_layers": p["layers"],
        "num_attention_heads": p["heads"], "num_key_value_heads": p["kv_heads"],
        "head_dim": p["hidden"] // p["heads"],
        "intermediate_size": p["inter"], "vocab_size": p["vocab"],
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "max_position_embeddings": 8192, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
        "attention_bias": False, "mlp_bias": False,
    }


def qwen3_config(p):
    c = llama_config(p)
    c.update({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
              "rope_theta": 1000000.0, "rope_scaling": None,
              "use_sliding_window": False, "sliding_window": None,
              "max_window_layers": p["layers"]})
    del c["mlp_bias"]
    return c


def draft_config(p):
    c = llama_config(p)  # the Llama EAGLE3 head, whatever the target
    c.update({
        "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
        "draft_vocab_size": p["draft_vocab"],
        "target_hidden_size": p["hidden"],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids":
                         aux_layer_ids(p["layers"])},
    })
    return c


def eagle_draft_config(p):
    c = llama_config(p)  # sglang's Llama EAGLE head, whatever the target
    c.update({"architectures": ["LlamaForCausalLMEagle"], "num_hidden_layers": 1})
    return c


def _save(out, name, tensors, config, meta, save_file):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    tensors = {k: v.contiguous().cpu() for k, v in tensors.items()}
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(config, fh, indent=1)
    with open(os.path.join(d, "synthetic.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    write_tokenizer(d, config["vocab_size"])


def write_tokenizer(d, vocab):
    """WordLevel tokenizer: id i <-> "t<i>", ids 0-2 = unk/bos/eos."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders

    names = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, vocab)]
    tok = Tokenizer(models.WordLevel({n: i for i, n in enumerate(names)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as fh:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast",
                   "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>",
                   "model_max_length": 8192, "clean_up_tokenization_spaces": False}, fh)
    with open(os.path.join(d, "special_tokens_map.json"), "w") as fh:
        json.dump({"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}, fh)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--out", required=True)
    ap.add_argument("--accept-steps", type=int, default=None,
                    help="draft right for its first K tokens (default: all steps)")
    ap.add_argument("--draft-accuracy", type=float, default=1.0,
                    help="per-token chance that a draft token is right")
    ap.add_argument("--spec-steps", type=int, default=3,
                    help="--speculative-num-steps the server will use")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--eagle-draft", action="store_true",
                    help="also write DIR/draft-eagle, an EAGLE (v1) draft, and its "
                    "token map for FR-Spec")
    a = ap.parse_args(argv)
    meta = build(a.preset, a.out, a.accept_steps, a.draft_accuracy, a.seed,
                 a.device, a.spec_steps, a.eagle_draft)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
