"""The Qwen3 presets of benchmark/models/make_models.py (the DP-attention
target) on CPU: transformers loads the target as a Qwen3ForCausalLM with
every weight, its greedy output (plain, and bfloat16 with a KV cache) follows
the constructed token function, and the Llama EAGLE3 draft's accept length is
what the construction says. Skips where torch / transformers / safetensors /
tokenizers are missing."""

import json
import os
import sys

import pytest

from test_models_cpu import REPO, _load, needs_model_libs


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    needs_model_libs()
    out = tmp_path_factory.mktemp("qwen3-tiny")
    meta = _load("make_models").build("qwen3-tiny", str(out), accept_steps=1)
    return str(out), meta


def test_the_target_is_a_complete_qwen3(pair):
    out, meta = pair
    from transformers import AutoModelForCausalLM

    cfg = json.load(open(os.path.join(out, "target", "config.json")))
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["model_type"] == "qwen3"
    draft = json.load(open(os.path.join(out, "draft", "config.json")))
    assert draft["architectures"] == ["LlamaForCausalLMEagle3"]
    assert draft["target_hidden_size"] == cfg["hidden_size"]
    assert meta["arch"] == "qwen3" and meta["preset"] == "qwen3-tiny"
    model, info = AutoModelForCausalLM.from_pretrained(os.path.join(out, "target"),
                                                       output_loading_info=True)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert not any(info.values()), info  # no missing, unexpected or mismatched weight
    attn = model.model.layers[0].self_attn
    assert bool((attn.q_norm.weight == 1).all()) and bool((attn.k_norm.weight == 1).all())


def test_greedy_follows_the_constructed_chain(pair):
    out, _ = pair
    r = _load("simulate").simulate(out, prompts=2, new=20)
    assert r["greedy_matches_f"] == 2, r
    assert r["min_logit_margin"] > 5, r
    assert 1.9 <= r["accept_length"] <= 2.0, r  # --accept-steps 1


def test_bfloat16_cached_greedy_follows_the_chain(pair):
    out, _ = pair
    import torch
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, os.path.join(REPO, "benchmark"))
    import greedy

    fmap = torch.load(os.path.join(out, "token_map.pt"))["f"].tolist()
    model = AutoModelForCausalLM.from_pretrained(os.path.join(out, "target"),
                                                 dtype=torch.bfloat16).eval()
    prompts = greedy.make_prompts(3, model.config.vocab_size, seed=0)
    for p in prompts:
        ids = model.generate(torch.tensor([p]), max_new_tokens=24, do_sample=False,
                             attention_mask=torch.ones(1, len(p), dtype=torch.long),
                             pad_token_id=0)[0, len(p):].tolist()
        assert ids == greedy.expected_chain([p], fmap, 24)[0]
