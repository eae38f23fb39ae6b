"""The EAGLE (v1) draft of benchmark/models/make_models.py --eagle-draft,
on CPU: DIR/draft-eagle and its token map, for FR-Spec (sglang's
--speculative-token-map, which only EAGLE drafts use).

The draft's files are what sglang 0.5.12.post1's LlamaForCausalLMEagle
loads (every weight but the embedding and lm_head, which the EAGLE worker
takes from the target), the map lists the preset's hot tokens, and with the
target's head cut to them the draft predicts the constructed chain. The
pair's files stay the same bytes, and benchmark/builds.ensure_models builds
the draft when a run serves EAGLE. Skips where torch / transformers /
safetensors / tokenizers (or, for the real load, sglang) are missing.
"""

import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from test_models_cpu import REPO, _load, ensure_models_in_child, needs_model_libs

BENCH = os.path.join(REPO, "benchmark")
sys.path.insert(0, BENCH)
import builds  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    needs_model_libs()
    out = tmp_path_factory.mktemp("fr-spec")
    meta = _load("make_models").build("tiny", str(out), accept_steps=1, eagle_draft=True)
    return str(out), meta


def _digests(d):
    out = {}
    for root, _, files in os.walk(d):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, d)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_the_pair_is_the_same_bytes_with_or_without_the_eagle_draft(models, tmp_path):
    out, meta = models
    plain = _load("make_models").build("tiny", str(tmp_path), accept_steps=1)
    with_eagle = _digests(out)
    assert {k: v for k, v in with_eagle.items() if not k.startswith("draft-eagle")} \
        == _digests(str(tmp_path))
    assert not (tmp_path / "draft-eagle").exists()
    assert meta == dict(plain, eagle_draft={"dir": "draft-eagle",
                                            "token_map": "draft-eagle/token_map.pt",
                                            "hot_vocab_size": 2048})


def test_the_eagle_draft_is_what_llama_eagle_loads(models):
    """Config and tensors against sglang's llama_eagle.py: load_weights puts
    "model." before every name (lm_head's are dropped) and llama.py stacks
    q/k/v into qkv_proj and gate/up into gate_up_proj; layer 0 has no
    input_layernorm; fc is a Linear(2 hidden, hidden) with a bias."""
    from safetensors.torch import load_file

    out, _ = models
    mm = _load("make_models")
    p = mm.PRESETS["tiny"]
    H, hd = p["hidden"], p["hidden"] // p["heads"]
    d = os.path.join(out, "draft-eagle")
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg["architectures"] == ["LlamaForCausalLMEagle"] and cfg["model_type"] == "llama"
    assert cfg["num_hidden_layers"] == 1 and cfg["tie_word_embeddings"] is False
    target = json.load(open(os.path.join(out, "target", "config.json")))
    for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
              "intermediate_size", "vocab_size", "rope_theta", "max_position_embeddings"):
        assert cfg[k] == target[k], k
    assert "hot_vocab_size" not in cfg  # sglang sets it from the token map
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "synthetic.json"):
        assert os.path.exists(os.path.join(d, name)), name
    w = load_file(os.path.join(d, "model.safetensors"))
    pre = "layers.0."
    shapes = {"fc.weight": (H, 2 * H), "fc.bias": (H,),
              pre + "post_attention_layernorm.weight": (H,),
              pre + "self_attn.q_proj.weight": (p["heads"] * hd, H),
              pre + "self_attn.k_proj.weight": (p["kv_heads"] * hd, H),
              pre + "self_attn.v_proj.weight": (p["kv_heads"] * hd, H),
              pre + "self_attn.o_proj.weight": (H, p["heads"] * hd),
              pre + "mlp.gate_proj.weight": (p["inter"], H),
              pre + "mlp.up_proj.weight": (p["inter"], H),
              pre + "mlp.down_proj.weight": (H, p["inter"])}
    assert {k: tuple(v.shape) for k, v in w.items()} == shapes
    assert all(str(v.dtype) == "torch.bfloat16" for v in w.values())


def test_the_token_map_is_the_hot_tokens(models):
    import torch

    out, _ = models
    path = os.path.join(out, "draft-eagle", "token_map.pt")
    hot = torch.load(path, weights_only=True)  # as sglang's load_token_map reads it
    assert isinstance(hot, list) and all(type(t) is int for t in hot)
    assert len(hot) == len(set(hot)) == 2048 and all(3 <= t < 4096 for t in hot)
    pair = torch.load(os.path.join(out, "token_map.pt"))
    assert hot == pair["hot"].tolist()
    # f's image: every token greedy decoding can output is a hot one
    assert set(pair["f"].tolist()) <= set(hot)
    assert torch.tensor(hot, dtype=torch.int64).shape == (2048,)


def test_the_eagle_draft_predicts_the_chain(models):
    """Plain-torch replay of the draft as sglang runs it: the target's
    embedding and its lm_head cut to the hot tokens, fc over cat(embedding,
    target hidden), one decoder layer without input norm (causal attention,
    rope left out: o_proj makes it a small update either way), no final norm."""
    import torch
    from safetensors.torch import load_file

    out, _ = models
    p = _load("make_models").PRESETS["tiny"]
    H, nh, nkv = p["hidden"], p["heads"], p["kv_heads"]
    hd = H // nh
    t = {k: v.float() for k, v in load_file(os.path.join(out, "target", "model.safetensors")).items()}
    e = {k: v.float() for k, v in load_file(
        os.path.join(out, "draft-eagle", "model.safetensors")).items()}
    hot = torch.tensor(torch.load(os.path.join(out, "draft-eagle", "token_map.pt")))
    f = torch.load(os.path.join(out, "token_map.pt"))["f"]
    head = t["lm_head.weight"][hot]
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(3, p["vocab"], (64,), generator=gen)
    hidden = torch.randn(64, H, generator=gen)  # stands for the target's: fc drops it

    def rms(v):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5)

    pre = "layers.0."
    h = torch.cat([t["model.embed_tokens.weight"][x], hidden], -1) @ e["fc.weight"].T \
        + e["fc.bias"]
    q = (h @ e[pre + "self_attn.q_proj.weight"].T).view(64, nh, hd).transpose(0, 1)
    k = (h @ e[pre + "self_attn.k_proj.weight"].T).view(64, nkv, hd).transpose(0, 1)
    v = (h @ e[pre + "self_attn.v_proj.weight"].T).view(64, nkv, hd).transpose(0, 1)
    k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    h = h + a.transpose(0, 1).reshape(64, H) @ e[pre + "self_attn.o_proj.weight"].T
    y = rms(h) * e[pre + "post_attention_layernorm.weight"]
    g = torch.nn.functional.silu(y @ e[pre + "mlp.gate_proj.weight"].T)
    h = h + (g * (y @ e[pre + "mlp.up_proj.weight"].T)) @ e[pre + "mlp.down_proj.weight"].T
    logits = h @ head.T
    assert hot[logits.argmax(-1)].tolist() == f[x].tolist()
    top2 = logits.topk(2, dim=-1).values
    assert float((top2[:, 0] - top2[:, 1]).min()) > 10


def test_sglang_loads_every_weight_but_embedding_and_head(models, tmp_path):
    """sglang 0.5.12.post1's LlamaForCausalLMEagle on CPU (one gloo rank)
    loads draft-eagle's safetensors: every parameter but the embedding and
    lm_head, which the EAGLE worker replaces with the target's."""
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("needs sglang")
    out, _ = models
    code = f"""
import json, os, torch
from safetensors.torch import load_file
from transformers import LlamaConfig
from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
d = {os.path.join(out, "draft-eagle")!r}
set_global_server_args_for_scheduler(ServerArgs(model_path=d, device="cpu"))
init_distributed_environment(backend="gloo", world_size=1, rank=0, local_rank=0,
                             distributed_init_method="file://{tmp_path / 'dist-init'}")
initialize_model_parallel(1)
from sglang.srt.models.llama_eagle import LlamaForCausalLMEagle
torch.set_default_dtype(torch.bfloat16)
m = LlamaForCausalLMEagle(LlamaConfig(**json.load(open(os.path.join(d, "config.json")))))
for p in m.parameters():
    p.data.fill_(float("nan"))
m.load_weights(list(load_file(os.path.join(d, "model.safetensors")).items()))
print(json.dumps({{n: bool(p.isnan().any()) for n, p in m.named_parameters()}}))
"""
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=str(tmp_path), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    unloaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert sorted(n for n, nan in unloaded.items() if nan) == \
        ["lm_head.weight", "model.embed_tokens.weight"]
    assert "model.layers.0.self_attn.qkv_proj.weight" in unloaded
    assert "model.layers.0.mlp.gate_up_proj.weight" in unloaded
    assert "model.fc.bias" in unloaded


def test_the_models_get_the_eagle_draft_when_eagle_is_served(tmp_path):
    """builds.ensure_models: a run with EAGLE builds draft-eagle beside the
    pair (in the child process), reuses it, and a pair built without it is
    built again with it."""
    needs_model_libs()
    r = ensure_models_in_child(tmp_path, (
        "lines = []\n"
        "metas = [builds.ensure_models(ns(speculative=s), lines.append)[1]\n"
        "         for s in (['EAGLE3', 'none'], ['EAGLE3'], ['EAGLE', 'none'], ['EAGLE'])]\n"
        "print(json.dumps({'metas': metas, 'lines': lines}))\n"))
    said = [line.split()[1] for line in r["lines"]]
    assert said == ["built", "reusing", "built", "reusing"]
    assert "eagle_draft" not in r["metas"][0]
    assert r["metas"][2]["eagle_draft"]["hot_vocab_size"] == 2048
    assert r["metas"][3] == r["metas"][2]
    assert (tmp_path / "draft-eagle" / "token_map.pt").exists()
    assert builds.wants_eagle_draft(argparse.Namespace(speculative="EAGLE3")) is False
    assert builds.wants_eagle_draft(argparse.Namespace(speculative=["none", "EAGLE"]))
