"""CPU reference check of a synthetic model pair (no sglang, no GPU).

Runs the target (Llama, or Qwen3 for the qwen3-* presets) with
transformers (greedy) and replays EAGLE3 chain
speculation (topk 1) with a plain-torch copy of the draft's math, so the
weight construction of make_models.py can be checked before any device time:

* greedy output of the target == the constructed token function f, and the
  logit margin of the winner;
* the accept length a server should report for these weights.

The draft's attention is left out on purpose: make_models zeroes its o_proj.

Usage: python benchmark/models/simulate.py DIR [--prompts 8] [--new 48]
"""

import argparse
import json
import os


def rms(torch, x, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def load_draft(torch, d):
    from safetensors.torch import load_file

    w = load_file(os.path.join(d, "model.safetensors"))
    f32 = {k: v.float() for k, v in w.items() if v.is_floating_point()}
    hot = w["d2t"] + torch.arange(w["d2t"].shape[0])
    return f32, hot


def draft_steps(torch, F, hot, aux, steps):
    """Draft tokens for one verify round from the target aux states at p."""
    silu = torch.nn.functional.silu
    h = F["fc.weight"] @ aux  # first step only: fc over the 3 aux states
    out = []
    for _ in range(steps):
        y = rms(torch, h) * F["midlayer.post_attention_layernorm.weight"]
        g = F["midlayer.mlp.gate_proj.weight"] @ y
        u = F["midlayer.mlp.up_proj.weight"] @ y
        h = h + F["midlayer.mlp.down_proj.weight"] @ (silu(g) * u)
        logits = F["lm_head.weight"] @ (rms(torch, h) * F["norm.weight"])
        out.append(int(hot[int(logits.argmax())]))
    return out


def simulate(model_dir, prompts=8, new=48, steps=3, seed=0):
    import torch
    from transformers import AutoModelForCausalLM

    tdir, ddir = os.path.join(model_dir, "target"), os.path.join(model_dir, "draft")
    cfg = json.load(open(os.path.join(ddir, "config.json")))
    aux_ids = [i + 1 for i in cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]]
    fmap = torch.load(os.path.join(model_dir, "token_map.pt"))["f"]
    model = AutoModelForCausalLM.from_pretrained(tdir, dtype=torch.float32)
    model.eval()
    F, hot = load_draft(torch, ddir)
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    greedy_ok, margins, rounds, accepted = 0, [], 0, 0
    for _ in range(prompts):
        ids = torch.randint(3, V, (16,), generator=g)
        with torch.no_grad():
            out = model(ids[None], output_hidden_states=False)
            seq = ids.tolist()
            for _ in range(new):  # greedy, no KV cache: tiny models only
                out = model(torch.tensor([seq]))
                last = out.logits[0, -1]
                top2 = last.topk(2).values
                margins.append(float(top2[0] - top2[1]))
                seq.append(int(last.argmax()))
            gen = seq[len(ids):]
            want = [int(fmap[seq[len(ids) - 1 + i]]) for i in range(new)]
            greedy_ok += gen == want
            hs = model(torch.tensor([seq]), output_hidden_states=True).hidden_states
        # replay verify rounds: position p's hidden drafts tokens p+2..
        p = len(ids) - 1
        while p + 1 + steps < len(seq):
            aux = torch.cat([hs[i][0, p] for i in aux_ids])
            drafts = draft_steps(torch, F, hot, aux, steps)
            j = 0
            while j < steps and drafts[j] == seq[p + 2 + j]:
                j += 1
            rounds += 1
            accepted += j + 1
            p += j + 1
    return {"prompts": prompts, "greedy_matches_f": greedy_ok,
            "min_logit_margin": min(margins),
            "accept_length": accepted / max(rounds, 1), "rounds": rounds}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args(argv)
    print(json.dumps(simulate(a.model_dir, a.prompts, a.new, a.steps)))


if __name__ == "__main__":
    main()
