"""FR-Spec (sglang's --speculative-token-map) in the GPU harness, on CPU.

`e2e.py run --speculative EAGLE` serves the EAGLE (v1) draft make_models.py
builds beside the pair (test_eagle_draft_cpu.py), and `--token-map` gives
it the draft's token map: the launch with and without it, sglang
0.5.12.post1's ServerArgs taking it, the `token_map` key of the records and
"fr-spec" in the pages, the options refused, and a run against the stand-in
sglang (standin_sglang.py) whose greedy records compare EAGLE with no
speculation and with the chain.
"""

import json
import os
import subprocess
import sys

import pytest

from standin_sglang import E2E, model_configs, run_e2e

sys.path.insert(0, os.path.dirname(E2E))
import e2e  # noqa: E402
import report  # noqa: E402
from options import RunOptions  # noqa: E402
import results  # noqa: E402
import run  # noqa: E402
from server import eagle_draft, server_command  # noqa: E402


def test_the_eagle_launch_with_and_without_a_token_map():
    base = dict(python="python3", target="M/target", draft="M/draft", port=30000,
                attention_backend="default", overlap=True, piecewise=True)
    assert eagle_draft("M/draft") == ("M/draft-eagle", "M/draft-eagle/token_map.pt")
    plain = server_command(speculative="EAGLE", **base)
    assert plain[plain.index("--speculative-algorithm") + 1] == "EAGLE"
    assert plain[plain.index("--speculative-draft-model-path") + 1] == "M/draft-eagle"
    assert "--speculative-token-map" not in plain
    assert plain[plain.index("--speculative-eagle-topk") + 1] == "1"
    assert "--attention-backend" not in plain  # the default backend: sglang's choice
    fr = server_command(speculative="EAGLE", token_map=True, **base)
    assert fr[fr.index("--speculative-token-map") + 1] == "M/draft-eagle/token_map.pt"
    assert [x for x in fr if x not in ("--speculative-token-map",
                                       "M/draft-eagle/token_map.pt")] == plain
    # EAGLE3 ignores a token map (sglang would too); no speculation gets none
    e3 = server_command(speculative="EAGLE3", token_map=True, **base)
    assert e3 == server_command(speculative="EAGLE3", **base)
    assert e3[e3.index("--speculative-draft-model-path") + 1] == "M/draft"
    assert "--speculative-token-map" not in e3
    none = server_command(speculative="none", token_map=True, **base)
    assert not any(x.startswith("--speculative") for x in none)


def test_sglang_takes_the_fr_spec_launch(tmp_path, monkeypatch):
    """sglang 0.5.12.post1's own argument checks (ServerArgs) take the
    launch as one of Hopper's: EAGLE with the draft-eagle draft and its
    token map, topk 1, fa3 as the default backend, the overlap (spec v2)
    schedule kept."""
    S = pytest.importorskip("sglang.srt.server_args")
    model_configs(tmp_path, "tiny", ("target", "draft", "draft-eagle"))
    # a Hopper card of 80 GB, as far as ServerArgs asks
    monkeypatch.setattr(S, "get_device_memory_capacity", lambda *a, **k: 81559, raising=False)
    monkeypatch.setattr(S, "is_hopper_with_cuda_12_3", lambda *a, **k: True, raising=False)
    monkeypatch.setattr(S, "is_sm100_supported", lambda *a, **k: False, raising=False)
    cmd = server_command("python3", str(tmp_path / "target"), str(tmp_path / "draft"), 31000,
                         "default", "EAGLE", True, True, token_map=True)
    sa = S.prepare_server_args(cmd[3:] + ["--device", "cuda"])
    assert sa.speculative_algorithm == "EAGLE" and sa.speculative_eagle_topk == 1
    assert sa.speculative_draft_model_path == str(tmp_path / "draft-eagle")
    assert sa.speculative_token_map == str(tmp_path / "draft-eagle" / "token_map.pt")
    assert sa.attention_backend == "fa3" and not sa.disable_overlap_schedule


def _ns(**kw):
    return RunOptions(**kw)


def test_the_token_map_keys_the_records_apart():
    assert run.deployment_fields(_ns()) == {"tp": 1}  # old records' keys stay
    assert run.deployment_fields(_ns(token_map=False)) == {"tp": 1}
    assert run.deployment_fields(_ns(token_map=True)) == {"tp": 1, "token_map": True}
    point = {"variant": "base", "attention_backend": "default", "speculative": "EAGLE",
             "overlap": True, "piecewise_cuda_graph": True, "concurrency": 1, "tp": 1}
    fr = dict(point, token_map=True)
    assert results._key(fr, results.RUN_KEY) != results._key(point, results.RUN_KEY)
    old = dict(point, speculative="EAGLE3")
    assert results._key(old, results.RUN_KEY) == results._key(dict(old, token_map=None),
                                                              results.RUN_KEY)
    # greedy entries: an old one (no `speculative`) is EAGLE3's, apart from EAGLE's
    g = {"variant": "base", "attention_backend": "default", "overlap": True,
         "piecewise_cuda_graph": True, "tp": 1}
    assert results._key(g, results.GREEDY_KEY) == \
        results._key(dict(g, speculative="EAGLE3"), results.GREEDY_KEY)
    assert results._key(g, results.GREEDY_KEY) != \
        results._key(dict(g, speculative="EAGLE"), results.GREEDY_KEY)
    assert report.setting(fr) == "base EAGLE fr-spec default pcg"
    assert report.setting(point) == "base EAGLE default pcg"
    # the call's no-spec servers carry token_map, but ran without one
    assert report.setting(dict(fr, speculative="none")) == "base none default pcg"


@pytest.mark.parametrize("args,said", [
    (["--speculative", "EAGLE3,none", "--token-map"], "FR-Spec applies to EAGLE drafts only"),
    (["--speculative", "EAGLE2"], "--speculative: a comma list of"),
    # small's token map would hold every token: nothing of FR-Spec is tested
    (["--preset", "small", "--speculative", "EAGLE", "--token-map"],
     "--preset small's hot vocab is its whole vocab; use a preset with a smaller one"),
])
def test_speculative_options_refused(tmp_path, args, said):
    res = subprocess.run([sys.executable, E2E, "run", "--work-dir", str(tmp_path),
                          "--preset", "tiny", *args],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and said in res.stderr, res.stderr
    assert not list(tmp_path.glob("models-*"))  # refused before any build


def test_the_fr_spec_preset_has_a_hot_vocab_and_fa3s_head_dim():
    """small-fr, the preset of FR-Spec on the GPU: a hot vocab smaller than
    the vocab (the token map cuts the draft's head) and head dim 128, the
    one the FA3 add-on kit carries (tiny's 64 stops fa3 at graph capture)."""
    p = e2e.preset_shape("small-fr")
    assert p["draft_vocab"] < p["vocab"]
    assert p["hidden"] // p["heads"] == 128
    assert e2e.preset_arch("small-fr") == "llama"


@pytest.mark.slow
def test_an_fr_spec_run_on_the_standin(tmp_path):
    """e2e run --speculative EAGLE,none --token-map: the EAGLE server gets
    the EAGLE draft and its token map, the no-spec one neither; the greedy
    records compare EAGLE with no speculation and follow the chain, and
    every record says token_map."""
    pytest.importorskip("torch")
    events, data = run_e2e(tmp_path, "--speculative", "EAGLE,none", "--token-map",
                           "--attention-backend", "default", "--concurrency", "1",
                           "--repeats", "1", token_map=True, variants=("base",))
    assert not data.get("errors")
    models = tmp_path / "work" / "models-tiny"
    argvs = [e["argv"] for e in events if e["event"] == "up"]
    (eagle,) = [a for a in argvs if "--speculative-algorithm" in a]
    (plain,) = [a for a in argvs if "--speculative-algorithm" not in a]
    assert eagle[eagle.index("--speculative-algorithm") + 1] == "EAGLE"
    assert eagle[eagle.index("--speculative-draft-model-path") + 1] == str(models / "draft-eagle")
    assert eagle[eagle.index("--speculative-token-map") + 1] == \
        str(models / "draft-eagle" / "token_map.pt")
    assert "--speculative-token-map" not in plain
    (g,) = data["greedy_equivalence"]
    assert (g["speculative"], g["token_map"], g["mismatched_prompts"]) == ("EAGLE", True, 0)
    assert g["prompts_off_constructed_f"] == 0
    assert {r["speculative"] for r in data["greedy_runs"]} == {"EAGLE", "none"}
    assert all(r["prompts_off_constructed_f"] == 0 and r["token_map"]
               for r in data["greedy_runs"])
    assert {r["speculative"] for r in data["runs"]} == {"EAGLE", "none"}
    assert all(r["token_map"] for r in data["runs"])
    results.validate(data)
    page = report.render(data, "x.json")
    assert "base EAGLE fr-spec default pcg" in page
    assert "Greedy equivalence (speculative decoding vs no speculation)" in page
    assert "greedy base EAGLE fr-spec default pcg" in results.table(data)
