"""`e2e.py sweep`: the accept length each draft setting really gives on a
served model (EAGLE3 server, CUDA graphs off for a fast start)."""

import argparse
import datetime
import json
import os
import sys
import time

import greedy
import results
from builds import detect_card, ensure_models, load_fmap, parse_variant, variant_env
from server import Server, free_port, server_command


def cmd_sweep(a):
    """Accept length each draft setting really gives on a served model."""
    t0 = time.time()
    card = a.card or detect_card()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    path = results.results_path(a.out_dir, date, card)
    var, site = parse_variant(a.variant)
    env = variant_env(site, a.work_dir)
    rows = []
    for point in a.points:
        k, _, p = point.partition(":")
        if a.deadline_s is not None and time.time() - t0 > a.deadline_s - 60:
            print(f"deadline: skip sweep point {point}", flush=True)
            continue
        ns = argparse.Namespace(models_dir=os.path.join(a.work_dir, f"sweep-{a.preset}-{k}-{p}"),
                                work_dir=a.work_dir, preset=a.preset, accept_steps=int(k),
                                draft_accuracy=float(p or 1), spec_steps=a.spec_steps,
                                model_device=a.model_device)
        models, meta = ensure_models(ns, print)
        target = os.path.join(models, "target")
        cmd = server_command(sys.executable, target, os.path.join(models, "draft"),
                             free_port(), a.attention_backend, "EAGLE3", True, False,
                             spec_steps=a.spec_steps, draft_tokens=a.spec_steps + 1,
                             extra=["--disable-cuda-graph"])
        prompts = greedy.make_prompts(a.greedy_prompts, meta["vocab"])
        row = {"variant": var, "preset": a.preset, "accept_steps": int(k),
               "draft_accuracy": float(p or 1), "spec_steps": a.spec_steps,
               "expected_accept_length": round(meta["expected_accept_length"], 4)}
        try:
            with Server(cmd, env, os.path.join(a.work_dir, f"server-sweep-{k}-{p}.log")) as srv:
                ids, acc = greedy.generate(srv.url, prompts, a.greedy_new_tokens)
            fmap = load_fmap(models)
            row.update(measured_accept_length=round(acc, 4) if acc else None,
                       prompts=len(ids), start_s=round(srv.start_s, 1))
            if fmap:
                row["prompts_off_constructed_f"] = len(greedy.compare(
                    ids, greedy.expected_chain(prompts, fmap, a.greedy_new_tokens)))
        except Exception as e:
            row["error"] = str(e)[:1500]
        print(json.dumps(row), flush=True)
        rows.append(row)
        results.write_merged(path, {"card": card, "date": date, "model_preset": a.preset,
                                    "runs": [], "greedy_equivalence": [],
                                    "accept_sweep": rows})
    return 0 if rows and all("error" not in r for r in rows) else 1
