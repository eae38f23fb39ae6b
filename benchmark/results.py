"""Results file of the GPU evidence harness: schema, merge, table, plot.

One file per day and card: benchmark/results/<yyyy-mm-dd>-<card>.json.
A later run on the same day and card merges into it: a run (or greedy entry)
with the same key replaces the old one, the others are kept, so a second
device call (e.g. an upstream release after base) adds to the first one's file.
Only the standard library is imported here (matplotlib lazily for the plot).
"""

import json
import math
import os
import re
import statistics

RUN_KEY = ("variant", "attention_backend", "speculative", "overlap",
           "piecewise_cuda_graph", "concurrency", "tp", "disaggregation", "spec_params",
           "dp", "dp_attention", "token_map")
GREEDY_KEY = ("variant", "attention_backend", "overlap", "piecewise_cuda_graph", "tp",
              "disaggregation", "spec_params", "dp", "dp_attention", "token_map",
              "speculative")
# key fields that older results files lack, and the value they then mean
# (spec_params "auto": sglang chose the EAGLE steps, topk and draft tokens;
# dp: sglang's --dp-size where above 1, dp_attention: True with
# --enable-dp-attention; absent, a server without data parallelism;
# token_map: True where the EAGLE servers ran FR-Spec; speculative: a
# greedy-equivalence entry without it compared EAGLE3 with no speculation;
# storm: a fault record without it was its server's only storm)
KEY_DEFAULTS = {"tp": 1, "rank": 0, "disaggregation": None, "spec_params": None,
                "dp": None, "dp_attention": None, "token_map": None,
                "speculative": "EAGLE3", "storm": 0, "arrivals": None}
# a record's `speculative`: EAGLE3 (the pair's draft), EAGLE (the EAGLE v1
# draft, with `token_map` FR-Spec) or none
SPECULATIVE = ("EAGLE3", "EAGLE", "none")
VARIANTS = ("base", "patched", "upstream-0.5.13")
# A second server of unpatched 0.5.12.post1 from base's own site, measured
# beside the others: an A/A control. Its ratio to base is what the
# comparison's placement (CPU set, place in the turn) alone makes of two
# copies of one build.
BASE_AGAIN = "base-again"
# A second server of the series from the patched build's own site: the same
# A/A control for the patched build (is a difference of its logprobs from
# base's the series' code or its own run-to-run scatter?).
PATCHED_AGAIN = "patched-again"
# Upstream sglang of a release, unpatched: upstream-X.Y.Z or upstream-X.Y.Z.postN
# (device_compare.sh installs each from a kit of that version).
UPSTREAM = re.compile(r"upstream-(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")
# A site with only the series' first NNNN patches, measured beside the others
# (device_compare.sh with SIDE_BY_SIDE): a bisection of the series.
THROUGH = re.compile(r"patched-through-(\d{4})$")
# A site with every patch of the series and then a trial patch that is not
# in it (benchmark/candidates/NAME.patch), measured beside the patched build;
# candidate-A+B has trial patches A and then B on top of the series.
CANDIDATE = re.compile(r"candidate-([a-z0-9][a-z0-9-]*(?:\+[a-z0-9][a-z0-9-]*)*)$")


def is_variant(name):
    return name in VARIANTS or name in (BASE_AGAIN, PATCHED_AGAIN) \
        or bool(THROUGH.match(str(name))) \
        or bool(CANDIDATE.match(str(name))) or bool(UPSTREAM.match(str(name)))


def over_patched(name):
    """A build measured against the patched build too: the series' A/A copy,
    or the series with trial patches."""
    return name == PATCHED_AGAIN or bool(CANDIDATE.match(str(name)))


def variant_order(name):
    """Sort key: base, its A/A copy, the partial series by length, patched,
    its A/A copy, trial patches (by name), upstream releases (by version)."""
    if name == BASE_AGAIN:
        return (0, 1)
    if name == PATCHED_AGAIN:
        return (2, 1)
    m = THROUGH.match(str(name))
    if m:
        return (1, int(m.group(1)))
    if CANDIDATE.match(str(name)):
        return (3, str(name))
    m = UPSTREAM.match(str(name))
    if m:
        return (4, tuple(int(g or 0) for g in m.groups()))
    return (VARIANTS.index(name) * 2 if name in VARIANTS else 9, 0)


def upstreams(data):
    """The upstream releases (variant names) that ran in a results file, oldest first."""
    names = {r.get("variant") for r in data.get("runs", [])}
    return sorted((v for v in names if UPSTREAM.match(str(v))), key=variant_order)


def card_slug(card):
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3'."""
    s = re.sub(r"^nvidia\s+", "", card.strip(), flags=re.I).lower()
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "unknown"


def results_path(out_dir, date, card):
    return os.path.join(out_dir, f"{date}-{card_slug(card)}.json")


def summarize_point(samples):
    """Median of the repeats and their spread (max - min), per metric.

    samples: list of dicts with tpot_ms, itl_ms, output_tok_per_s,
    accept_length (None without speculation), optionally duration_s.
    """
    tpots = [s["tpot_ms"] for s in samples]
    acc = [s["accept_length"] for s in samples if s.get("accept_length") is not None]
    durations = [s["duration_s"] for s in samples if s.get("duration_s")]
    out = {
        "tpot_ms_median": round(statistics.median(tpots), 4),
        "itl_ms_median": round(statistics.median(s["itl_ms"] for s in samples), 4),
        "output_tok_per_s": round(statistics.median(s["output_tok_per_s"] for s in samples), 2),
        "accept_length": round(statistics.median(acc), 4) if acc else None,
        "repeats": len(samples),
        "tpot_ms_spread": round(max(tpots) - min(tpots), 4),
    }
    if durations:  # the shortest repeat: shows whether every one met --min-seconds
        out["duration_s_min"] = round(min(durations), 1)
    for key in ("ttft_ms", "p99_itl_ms"):  # samples of older harnesses lack them
        if samples and all(s.get(key) is not None for s in samples):
            out[key + "_median"] = round(statistics.median(s[key] for s in samples), 4)
    return out


def _key(entry, fields):
    return tuple(entry.get(f, KEY_DEFAULTS.get(f)) for f in fields)


SWEEP_KEY = ("variant", "preset", "accept_steps", "draft_accuracy", "spec_steps")
# a profile taken with requests arriving (e2e --profile-arrivals) is another
# measurement than one of steady decode at the same concurrency
PROFILE_KEY = RUN_KEY + ("with_stack", "rank", "arrivals")
GREEDY_RUN_KEY = GREEDY_KEY  # `speculative` included
KEYED = (("runs", RUN_KEY), ("greedy_equivalence", GREEDY_KEY),
         ("greedy_runs", GREEDY_RUN_KEY), ("accept_sweep", SWEEP_KEY),
         ("profiles", PROFILE_KEY), ("faults", GREEDY_RUN_KEY + ("storm",)),
         ("mixed_load", GREEDY_RUN_KEY))


def merge(old, new):
    """Merge result dict `new` into `old` (same card and date expected).

    Keyed lists (runs, greedy entries, accept sweep) merge by key, a new
    entry replacing an old one; commands accumulate.  Top-level fields
    (model_preset, model, ...) come from `new` only if it measured runs: an
    accept sweep on the tiny model must not relabel the main runs.
    """
    if old is None:
        return new
    if (old.get("card"), old.get("date")) != (new.get("card"), new.get("date")):
        raise ValueError("merge: card/date differ: %r vs %r" % (
            (old.get("card"), old.get("date")), (new.get("card"), new.get("date"))))
    out = dict(old)
    lists = {f for f, _ in KEYED} | {"commands"}
    if new.get("runs") or new.get("greedy_equivalence"):
        out.update({k: v for k, v in new.items() if k not in lists})
    for field, key in KEYED:
        merged = {_key(e, key): e for e in old.get(field, [])}
        for e in new.get(field, []):
            merged[_key(e, key)] = e
        if merged or field in ("runs", "greedy_equivalence"):
            out[field] = list(merged.values())
    commands = list(old.get("commands", []))
    commands += [c for c in new.get("commands", []) if c not in commands]
    if commands:
        out["commands"] = commands
    return out


# records that belong to one call: pooled calls keep all of them, labelled
PER_CALL = ("greedy_equivalence", "greedy_runs", "server_starts", "profiles", "faults",
            "mixed_load")


def pool(old, new, label):
    """Merge `new` (one device call, named `label`) into `old` for the same
    machine: a point measured again in another call keeps both calls'
    repeats, re-summarized, and `calls` says which calls they came from.
    Greedy records and profiles are all kept, each with its call: equal keys
    from two calls are two separate checks (e.g. 64 and 16 prompts), not one.
    Pool only calls of one machine: repeats from two machines never mix.
    """
    new = dict(new)
    for field in PER_CALL:
        new[field] = [dict(e, call=label) for e in new.get(field, [])]
    # each repeat says which call made it, so repeats pair up across builds
    new["runs"] = [dict(r, samples=[dict(x, call=label) for x in r.get("samples", [])])
                   for r in new.get("runs", [])]
    if old is None:
        out = dict(new)
        out["runs"] = [dict(r, calls=[label]) for r in new.get("runs", [])]
        return out
    runs = {_key(r, RUN_KEY): r for r in old.get("runs", [])}
    for r in new.get("runs", []):
        k = _key(r, RUN_KEY)
        if k in runs:
            had = runs[k]
            samples = had.get("samples", []) + r.get("samples", [])
            r = dict(r)
            r.update(summarize_point(samples))
            r["samples"] = samples
            r["calls"] = had.get("calls", []) + [label]
        else:
            r = dict(r, calls=[label])
        runs[k] = r
    out = merge(old, {k: v for k, v in new.items()
                      if k not in ("runs",) + PER_CALL})
    out["runs"] = list(runs.values())
    for field in PER_CALL:
        out[field] = old.get(field, []) + new[field]
    out["greedy_equivalence"] += equivalence_by_digest(out, new_label=label)
    return out


def _pair_keys(samples):
    """How a point's repeats line up with another build's: by (call, rep)
    where every sample says which repeat it was, else by position (older
    files: each build's samples are in repeat order, pooled calls one after
    the other)."""
    if samples and all("rep" in x for x in samples):
        return [(x.get("call"), x["rep"]) for x in samples], "repeat"
    return list(range(len(samples))), "position"


# Two-sided 90% Student t quantiles (t_0.95) by degrees of freedom; past 30
# the value at 30 is used, which errs on the wide side.
T90 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
       1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
       1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697)


def t90(df):
    return T90[min(df, len(T90)) - 1]


def ratio_interval(ratios, resolve=0.03):
    """What a point's paired ratios say, read as draws of one build's speed
    over base's: the geometric mean, its 90% interval (Student t on the log
    ratios), and how many paired repeats, at the same scatter, would make
    that interval ±`resolve` wide (a 3% difference told apart from none).
    The interval covers the scatter within one call only: machines and
    calls differ by more, so it never licenses a number across calls.
    None for the last two with fewer than two ratios."""
    logs = [math.log(x) for x in ratios]
    mean = statistics.fmean(logs)
    geo = round(math.exp(mean), 4)
    if len(logs) < 2:
        return {"geo_mean": geo, "interval_90": None, "repeats_for_3pct": None}
    sd = statistics.stdev(logs)
    half = t90(len(logs) - 1) * sd / math.sqrt(len(logs))
    width = math.log(1 + resolve)
    n = 2
    while t90(n - 1) * sd / math.sqrt(n) > width:
        n += 1
    return {"geo_mean": geo,
            "interval_90": [round(math.exp(mean - half), 4), round(math.exp(mean + half), 4)],
            "repeats_for_3pct": n}


def paired_ratios(data, base="base", metric="tpot_ms"):
    """For a side-by-side run: each other build's TPOT (or `metric`, a
    sample's field such as "ttft_ms") over base's in the same repeat of the
    same point; repeats without the field on both sides are left out. The
    servers of a repeat are measured one after the other, so a pair cancels
    the machine's drift from one repeat to the next, not its noise within
    one. One dict per (build, point): variant, concurrency, the point's other
    key fields, ratios (in repeat order), median, below_1 (how many), paired_by, and
    `ratio_interval`'s geo_mean, interval_90 and repeats_for_3pct."""
    point = [f for f in RUN_KEY if f != "variant"]
    bases = {_key(r, point): r for r in data.get("runs", []) if r["variant"] == base}
    out = []
    for r in data.get("runs", []):
        b = bases.get(_key(r, point))
        if r["variant"] == base or b is None:
            continue
        keys, how = _pair_keys(r.get("samples", []))
        bkeys, bhow = _pair_keys(b.get("samples", []))
        if how != bhow:  # one build's file is older: fall back to positions
            keys, bkeys, how = list(range(len(keys))), list(range(len(bkeys))), "position"
        theirs = dict(zip(bkeys, b.get("samples", [])))
        matched = [(k, round(x[metric] / theirs[k][metric], 4))
                   for k, x in zip(keys, r.get("samples", []))
                   if k in theirs and x.get(metric) and theirs[k].get(metric)]
        if not matched:
            continue
        ratios = [x for _, x in matched]
        entry = {f: r.get(f, KEY_DEFAULTS.get(f)) for f in RUN_KEY}
        entry.update(ratios=ratios, median=round(statistics.median(ratios), 4),
                     below_1=sum(x < 1 for x in ratios), paired_by=how,
                     **ratio_interval(ratios))
        if how == "repeat" and (data.get("bench") or {}).get("turn") == "alternating":
            entry["by_turn"] = by_turn(matched)
        places = {k: x.get("cpus") for k, x in zip(keys, r.get("samples", []))}
        if how == "repeat" and all(places.get(k) for k, _ in matched):
            entry["by_place"] = by_place(matched, places)
        out.append(entry)
    return out


def by_place(matched, places):
    """Paired ratios split by the CPU set the build ran on in each repeat
    (e2e --rotate-cpus: each sample records its `cpus`). [((call, rep),
    ratio)], {(call, rep): cpus} -> {cpus: {"n", "geo_mean"}}, sets by their
    first CPU. A build whose ratio moves with its set measured the place as
    well as the patch."""
    out = {}
    for k, x in matched:
        out.setdefault(places[k], []).append(x)
    first_cpu = lambda cpus: int(cpus.split(",")[0].split("-")[0])  # noqa: E731
    return {cpus: {"n": len(out[cpus]), "geo_mean": ratio_interval(out[cpus])["geo_mean"]}
            for cpus in sorted(out, key=first_cpu)}


def by_turn(matched):
    """Paired ratios split by the servers' turn, for a call that alternates
    it (run.bench_order): base, listed first, is measured first in even
    repeats and last in odd ones. [((call, rep), ratio)] -> {"base_first",
    "base_last"}: each {"n", "geo_mean"} (geo_mean None without a repeat).
    A ratio that moves with the turn is partly the turn's."""
    out = {}
    for name, parity in (("base_first", 0), ("base_last", 1)):
        xs = [x for (_, rep), x in matched if rep % 2 == parity]
        out[name] = {"n": len(xs), "geo_mean": ratio_interval(xs)["geo_mean"] if xs else None}
    return out


def equivalence_by_digest(data, new_label=None):
    """Greedy-equivalence entries for EAGLE3 and no-spec servers of one build
    that ran in different calls: each call keeps only a digest of its output
    ids, and equal digests over the same prompts mean identical outputs.
    Only pairs that involve call `new_label` (None: any) and have no entry
    yet are returned; unequal digests give no entry (a count of differing
    prompts needs the ids) and are left for the greedy_runs to show."""
    runs = data.get("greedy_runs", [])
    entry_key = GREEDY_KEY + ("prompts",)  # one check per server setting and prompt set
    have = {_key(g, entry_key) for g in data.get("greedy_equivalence", [])}
    out = []
    for e in runs:
        if e.get("speculative") in (None, "none"):
            continue
        key = _key(e, entry_key)
        # the no-spec reference: the same server but for speculation (any piecewise setting)
        same = tuple(f for f in entry_key if f not in ("piecewise_cuda_graph", "speculative"))
        refs = [r for r in runs if r.get("speculative") == "none"
                and _key(r, same) == _key(e, same)]
        # the reference with the same piecewise setting first
        refs.sort(key=lambda r: r.get("piecewise_cuda_graph") != e.get("piecewise_cuda_graph"))
        if key in have or not refs:
            continue
        ref = refs[0]
        if new_label is not None and new_label not in (e.get("call"), ref.get("call")):
            continue
        if ref.get("sha256") != e.get("sha256"):
            continue
        have.add(key)
        out.append({"variant": e["variant"], "attention_backend": e["attention_backend"],
                    "overlap": e["overlap"], "piecewise_cuda_graph": e.get("piecewise_cuda_graph"),
                    "prompts": e["prompts"], "mismatched_prompts": 0, "tp": e.get("tp", 1),
                    "by": "sha256", "sha256": e["sha256"],
                    "calls": [e.get("call"), ref.get("call")],
                    "reference_piecewise_cuda_graph": ref.get("piecewise_cuda_graph"),
                    **{k: e[k] for k in ("disaggregation", "dp", "dp_attention", "token_map")
                       if e.get(k)},
                    **({"speculative": e["speculative"]} if e["speculative"] != "EAGLE3" else {})})
    return out


def write_merged(path, new):
    old = None
    if os.path.exists(path):
        with open(path) as fh:
            old = json.load(fh)
    return write(path, merge(old, new))


def write(path, data):
    tmp = path + ".tmp"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)  # a reader (or a timeout) never sees half a file
    return data


def validate(data):
    """Raise ValueError if `data` does not follow the results schema."""
    def need(obj, key, types, where):
        types = types if isinstance(types, tuple) else (types,)
        v = obj.get(key)
        # bool is an int in Python: only a bool field may hold one
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise ValueError(f"{where}: {key!r} missing or not {types}")

    for k in ("card", "date", "model_preset"):
        need(data, k, str, "top")
    for i, r in enumerate(data["runs"]):
        w = f"runs[{i}]"
        if not is_variant(r.get("variant")):
            raise ValueError(f"{w}: variant {r.get('variant')!r}")
        if r.get("speculative") not in SPECULATIVE:
            raise ValueError(f"{w}: speculative {r.get('speculative')!r}")
        need(r, "attention_backend", str, w)
        need(r, "overlap", bool, w)
        need(r, "piecewise_cuda_graph", bool, w)
        need(r, "concurrency", int, w)
        need(r, "repeats", int, w)
        if "tp" in r:  # older files lack it: tensor parallel 1
            need(r, "tp", int, w)
        for k in ("tpot_ms_median", "itl_ms_median", "output_tok_per_s", "tpot_ms_spread"):
            need(r, k, (int, float), w)
        if r["accept_length"] is not None:
            need(r, "accept_length", (int, float), w)
    for i, g in enumerate(data["greedy_equivalence"]):
        w = f"greedy_equivalence[{i}]"
        need(g, "variant", str, w)
        need(g, "attention_backend", str, w)
        need(g, "overlap", bool, w)
        need(g, "prompts", int, w)
        need(g, "mismatched_prompts", int, w)
    for i, f in enumerate(data.get("faults", [])):
        w = f"faults[{i}]"
        need(f, "variant", str, w)
        need(f, "alive", bool, w)
        for k in ("clients", "completed", "disconnected", "aborted", "errors"):
            need(f, k, int, w)
        if "storm" in f:
            need(f, "storm", int, w)


def _setting(r):
    pw = "pcg" if r["piecewise_cuda_graph"] else "no-pcg"
    ov = "" if r["overlap"] else " no-overlap"
    tp = "" if r.get("tp", 1) == 1 else f" tp{r['tp']}"
    pd = " disagg-decode" if r.get("disaggregation") == "decode" else ""
    dp = dp_label(r)
    return (f"{r['variant']} {r['speculative']}{fr_spec_label(r)} {r['attention_backend']} "
            f"{pw}{ov}{tp}{pd}{dp}")


def fr_spec_label(r):
    """The label of a record of an EAGLE server with a token map (FR-Spec),
    " fr-spec", else ""; the call's no-spec servers carry `token_map` too,
    but ran without one."""
    return " fr-spec" if r.get("token_map") and r.get("speculative", "EAGLE3") == "EAGLE" else ""


def dp_label(r):
    """The setting's data parallelism in words: dp2-attn (DP attention),
    dp2 (DP replicas), nothing without DP."""
    if not r.get("dp"):
        return ""
    return f" dp{r['dp']}" + ("-attn" if r.get("dp_attention") else "")


def table(data):
    """Short text table: one line per run, grouped by setting."""
    lines = [f"card: {data['card']}  date: {data['date']}  model: {data['model_preset']}",
             "| setting | c | TPOT ms (spread) | ITL ms | out tok/s | accept len | n |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(data["runs"], key=lambda r: (_setting(r), r["concurrency"])):
        acc = "-" if r["accept_length"] is None else f"{r['accept_length']:.2f}"
        lines.append(f"| {_setting(r)} | {r['concurrency']} | {r['tpot_ms_median']:.3f} "
                     f"({r['tpot_ms_spread']:.3f}) | {r['itl_ms_median']:.3f} | "
                     f"{r['output_tok_per_s']:.0f} | {acc} | {r['repeats']} |")
    for g in data["greedy_equivalence"]:
        pw = g.get("piecewise_cuda_graph")
        pw = "" if pw is None else (" pcg" if pw else " no-pcg")
        pw += "" if g.get("tp", 1) == 1 else f" tp{g['tp']}"
        pw += dp_label(g)
        spec = g.get("speculative", "EAGLE3")
        spec = "" if spec == "EAGLE3" else f" {spec}{fr_spec_label(g)}"
        lines.append(f"greedy {g['variant']}{spec} {g['attention_backend']}{pw} "
                     f"overlap={g['overlap']}: "
                     f"{g['mismatched_prompts']}/{g['prompts']} prompts differ")
    for w in data.get("accept_sweep", []):
        got = w.get("measured_accept_length")
        got = "error" if got is None else f"{got:.2f}"
        lines.append(f"accept sweep {w['variant']} {w['preset']} K={w['accept_steps']} "
                     f"p={w['draft_accuracy']}: expected {w['expected_accept_length']:.2f}, "
                     f"measured {got}")
    return "\n".join(lines)


def plot(data, png):
    """TPOT vs concurrency, one line per variant/setting (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = {}
    for r in data["runs"]:
        lines.setdefault(_setting(r), []).append(r)
    fig, ax = plt.subplots(figsize=(8, 5))
    for name in sorted(lines):
        pts = sorted(lines[name], key=lambda r: r["concurrency"])
        xs = [r["concurrency"] for r in pts]
        ys = [r["tpot_ms_median"] for r in pts]
        err = [r["tpot_ms_spread"] / 2 for r in pts]
        style = "--" if name.split()[1] == "none" else "-"
        ax.errorbar(xs, ys, yerr=err, fmt="o" + style, capsize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["concurrency"] for r in data["runs"]}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("concurrency")
    ax.set_ylabel("median TPOT (ms), bar = spread of repeats")
    ax.set_title(f"{data['card']} {data['date']} model={data['model_preset']}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
