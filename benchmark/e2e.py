"""GPU evidence harness: greedy equivalence and decode latency, per variant.

    python benchmark/e2e.py run [options]      # needs a GPU and sglang
    python benchmark/e2e.py sweep [options]    # accept length per draft setting (GPU)
    python benchmark/e2e.py plot RESULTS.json [--png FILE]
    python benchmark/e2e.py table RESULTS.json
    python benchmark/e2e.py merge INTO.json FROM.json...
    python benchmark/e2e.py report RESULTS.json [--md FILE] | --index DIR | --summary
    python benchmark/e2e.py reprofile RESULTS.json TRACE_DIR [--call LABEL] [--skip-missing]

`run` builds (or reuses) a synthetic target/EAGLE3 pair (benchmark/models),
then for each variant x attention backend x overlap x setting launches
`python -m sglang.launch_server` on 127.0.0.1, checks greedy equivalence of
EAGLE3 against the same model without speculation, and measures
`python -m sglang.bench_serving --dataset-name random-ids` at each
concurrency, `--repeats` times (round robin over the concurrencies, so drift
spreads over all points).  With --side-by-side all of the call's servers
start at once on the one GPU (each with the fixed KV pool
--max-total-tokens) and are measured in turn at every (repeat, concurrency),
so a slow spell of the machine hits every build alike.  With --faults each
server also gets a storm of clients that disconnect, are aborted or complete,
with greedy checks through it and after an idle pause.  With --mixed-load
new long prompts prefill on one DP rank while the others decode long
generations (--dp N --enable-dp-attention --preset qwen3-small: sglang's DP
attention; benchmark/mixed.py), outputs checked.  --speculative EAGLE serves
an EAGLE (v1) draft built beside the pair, and --token-map gives it FR-Spec
(--speculative-token-map).  Results merge into
<out-dir>/<yyyy-mm-dd>-<card>.json after every point, so a run stopped by a
time limit still leaves what it measured.  `report` renders a results file
as Markdown (benchmark/results/*.md), the index of a results directory, and
benchmark/RESULTS.md with README.md's summary of it, from the settings
benchmark/current.json names.
`reprofile` reads a call's traces again (the `profiles.tgz` of a device
call, unpacked) and rewrites the summaries of the results file's profiles
with the current `trace_steps.py`, so a measure added later covers traces
already taken.

Modules: run.py (the run loop), options.py (its options), builds.py
(variants, models), bench.py (bench_serving points), faults.py (--faults),
mixed.py (--mixed-load), sweep.py, report.py, results.py (schema, merge).

A variant is NAME or NAME=SITE: SITE is a directory put first on PYTHONPATH
(an sglang installed with `pip install --target SITE`); without it the
current environment's sglang is used.  `patched` applies the series first
with `python -m sglpatch apply --sglang-dir SITE/sglang` (--no-apply: the
site is already patched).  See benchmark/README.md.
"""

import argparse
import functools
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import report  # noqa: E402
import results  # noqa: E402
import trace_steps  # noqa: E402
from builds import parse_variant  # noqa: E402
from options import RunOptions  # noqa: E402
from run import cmd_run  # noqa: E402
from sweep import cmd_sweep  # noqa: E402


def csv(kind):
    def parse(s):
        return [kind(x) for x in s.split(",") if x]
    return parse


def json_object(s):
    """A JSON object given on the command line, kept as its canonical text."""
    try:
        obj = json.loads(s)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return json.dumps(obj, sort_keys=True)


def onoff(s):
    return {"on": True, "off": False, "default": True, "disabled": False}[s]


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__[__doc__.index("A variant"):])
    sub = ap.add_subparsers(dest="cmd", required=True)
    # no defaults here: an option not given is left out of the namespace and
    # takes its default from options.RunOptions
    r = sub.add_parser("run", help="launch servers, check, measure",
                       argument_default=argparse.SUPPRESS)
    r.add_argument("--variant", action="append",
                   help="base | patched | upstream-X.Y.Z (e.g. upstream-0.5.17), optionally =SITE "
                   "(repeatable; default: base)")
    r.add_argument("--no-apply", action="store_true",
                   help="patched: do not run sglpatch apply")
    r.add_argument("--preset",
                   help="tiny | small | small-fr (small with a hot vocab of 8000: FR-Spec "
                   "on fa3) | llama-8b-shape | qwen3-small (a Qwen3 target: "
                   "the preset for --enable-dp-attention) | qwen3-tiny")
    r.add_argument("--models-dir",
                   help="where the model pair is built/reused "
                   "(default: <work-dir>/models-<preset>)")
    r.add_argument("--accept-steps", type=int,
                   help="draft right for its first K tokens (3 = all)")
    r.add_argument("--draft-accuracy", type=float,
                   help="per-token chance a draft token is right "
                   "(0.8 with K=3 gives accept length ~2.95)")
    r.add_argument("--attention-backend", type=csv(str),
                   help="comma list, e.g. triton,flashinfer,fa3; `default`: no flag, "
                        "the backend sglang picks for the model and GPU")
    r.add_argument("--overlap", type=csv(onoff),
                   help="comma list of on/off (off = --disable-overlap-schedule)")
    r.add_argument("--piecewise", type=csv(onoff),
                   help="comma list of default/disabled (--disable-piecewise-cuda-graph)")
    r.add_argument("--speculative", type=csv(str),
                   help="comma list of EAGLE3/EAGLE/none (EAGLE: the model dir's EAGLE v1 "
                   "draft, draft-eagle, built on demand)")
    r.add_argument("--token-map", action="store_true",
                   help="FR-Spec: the EAGLE servers get --speculative-token-map "
                   "(draft-eagle/token_map.pt, the hot tokens); records carry token_map")
    r.add_argument("--nospec-piecewise", choices=["first", "all"],
                   help="no-spec servers only at the first --piecewise setting "
                   "(default, saves a server start per call) or at all")
    r.add_argument("--concurrency", type=csv(int))
    r.add_argument("--repeats", type=int)
    r.add_argument("--min-seconds", type=float,
                   help="size each bench point to last at least this long")
    r.add_argument("--input-len", type=int)
    r.add_argument("--output-len", type=int)
    r.add_argument("--seed", type=int, help="bench_serving --seed")
    r.add_argument("--request-body", type=json_object, metavar="JSON",
                   help="fields every bench request carries (bench_serving "
                   "--extra-request-body), e.g. sampling penalties: "
                   "'{\"frequency_penalty\": 0.5}'; the greedy check is unchanged")
    r.add_argument("--greedy-prompts", type=int)
    r.add_argument("--greedy-new-tokens", type=int)
    r.add_argument("--greedy-logprobs", type=int, metavar="K",
                   help="after each server's greedy check, the same prompts again with the K "
                   "most likely tokens' logprobs at every output position; each server's "
                   "greedy record gives its largest difference from base's server of the "
                   "same setting (the synthetic models' greedy tokens do not depend on "
                   "attention; their logprobs do)")
    r.add_argument("--spec-steps", type=int)
    r.add_argument("--spec-topk", type=int,
                   help="--speculative-eagle-topk of the EAGLE3 servers (above 1: sglang "
                   "turns the overlap schedule off and runs spec v1)")
    r.add_argument("--spec-draft-tokens", type=int,
                   help="--speculative-num-draft-tokens (default: --spec-steps + 1); "
                   "e.g. --spec-steps 5 --spec-topk 4 --spec-draft-tokens 8 are the "
                   "parameters sglang picks itself for a Llama target")
    r.add_argument("--spec-auto", action="store_true",
                   help="EAGLE3 servers get only the draft model path: sglang picks the "
                   "number of steps, EAGLE topk and draft tokens itself (5 / 4 / 8 for a "
                   "Llama target, which turns the overlap schedule off)")
    r.add_argument("--tp", type=int)
    r.add_argument("--dp", type=int,
                   help="sglang --dp-size: with --enable-dp-attention, DP attention "
                   "within the --tp GPUs (tp a multiple of dp); without, dp replicas of "
                   "TP=--tp (tp x dp GPUs)")
    r.add_argument("--enable-dp-attention", action="store_true",
                   help="sglang --enable-dp-attention (with --dp > 1 and a model that "
                   "supports it: --preset qwen3-small; sglang then turns piecewise CUDA "
                   "graphs off, so pass --piecewise disabled)")
    r.add_argument("--disaggregation-decode", action="store_true",
                   help="serve as a prefill/decode-disaggregated decode server with "
                   "sglang's fake KV transfer (no prefill server)")
    r.add_argument("--mem-fraction-static", type=float)
    r.add_argument("--max-total-tokens", type=int,
                   help="fixed KV pool per server (needed with --side-by-side)")
    r.add_argument("--side-by-side", action="store_true",
                   help="start all of the call's servers at once on the one GPU and "
                        "measure them in turn, repeat by repeat")
    r.add_argument("--start-together", action="store_true",
                   help="with --side-by-side: start the servers at once (3 s apart) "
                        "rather than each once the one before has captured its CUDA "
                        "graphs")
    r.add_argument("--keep-servers", action="store_true",
                   help="with --side-by-side: leave the servers running when the run "
                        "ends, and reuse those an earlier run kept whose launch is the "
                        "same (benchmark/keep.py); a run without it stops them first")
    r.add_argument("--pin-cpus", action="store_true",
                   help="give each server that runs at a time, and the bench client, "
                        "whole physical cores of its own (sched_setaffinity), so one "
                        "server's host work never shares a core with another's")
    r.add_argument("--rotate-cpus", action="store_true",
                   help="with --side-by-side and --pin-cpus: before each repeat, move "
                        "every server to the next server's CPU set, so each build is "
                        "measured on every place in turn; each sample records its set")
    r.add_argument("--port-base", type=int,
                   help="first port the servers try (runs at the same time on one "
                        "machine need bases far apart, e.g. benchmark/pairs.py)")
    r.add_argument("--server-arg", action="append",
                   help="extra launch_server argument (repeatable, e.g. "
                   "--server-arg=--enable-metrics)")
    r.add_argument("--no-bench", action="store_true", help="greedy check only")
    r.add_argument("--faults", action="store_true",
                   help="after each server's greedy check: a storm of clients that "
                   "disconnect mid-stream, are aborted by rid or complete, with a greedy "
                   "check through it, an idle pause, a last greedy check -> \"faults\"")
    r.add_argument("--fault-clients", type=int,
                   help="storm clients: a third cut, a third aborted, a third complete")
    r.add_argument("--fault-grammar-clients", type=int,
                   help="storm clients beside those: each generates under a regex that "
                   "only one token sequence meets, checked (benchmark/faults.py)")
    r.add_argument("--fault-idle-s", type=float,
                   help="idle pause after the storm (sglang's idle self-check)")
    r.add_argument("--fault-new-tokens", type=int,
                   help="max new tokens of each storm request")
    r.add_argument("--fault-deadline-s", type=float,
                   help="the storm's deadline; every storm request times out by then")
    r.add_argument("--fault-storms", type=int,
                   help="storms per server, each with its checks and idle pause; side by "
                   "side the servers take turns, each storm starting with the next server; "
                   "each record counts the retractions since the server's storm before")
    r.add_argument("--mixed-load", action="store_true",
                   help="after each server's greedy check: new long prompts, one at a time, "
                   "pinned to each DP rank in turn (routed_dp_rank), while every rank "
                   "decodes long generations; outputs checked -> \"mixed_load\" "
                   "(benchmark/mixed.py)")
    r.add_argument("--mix-decodes", type=int,
                   help="long generations per DP rank in each round")
    r.add_argument("--mix-decode-tokens", type=int,
                   help="new tokens of each long generation")
    r.add_argument("--mix-prompts", type=int,
                   help="prompts to serve while the other ranks decode")
    r.add_argument("--mix-prompt-len", type=int)
    r.add_argument("--mix-new-tokens", type=int)
    r.add_argument("--mix-deadline-s", type=float)
    r.add_argument("--profile-steps", type=int,
                   help="after the greedy check, a torch-profiler trace of this many "
                   "decode forwards per server (GPU activity only) -> \"profiles\"")
    r.add_argument("--profile-stack-steps", type=int,
                   help="and one of this many forwards with CPU ops and Python frames")
    r.add_argument("--profile-concurrency", type=csv(int),
                   help="requests decoding during each profile (comma list)")
    r.add_argument("--profile-arrivals", action="store_true",
                   help="profile while each of --profile-concurrency clients sends requests of "
                   "--input-len/--output-len one after another, so the window holds the "
                   "iterations that admit and prefill them (default: that many long "
                   "requests in steady decode)")
    r.add_argument("--bench-runner", choices=["worker", "process"],
                   help="worker: one process imports sglang.bench_serving once and runs "
                   "it as `-m` per point (saves ~10 s a point); process: a new "
                   "`python -m sglang.bench_serving` per point")
    r.add_argument("--one-client", action="store_true",
                   help="time every server with the first build's bench_serving "
                   "instead of each build's own (a build of another sglang release "
                   "brings another client: 0.5.17's parses streamed chunks with "
                   "orjson); the results file's bench names that build as client")
    r.add_argument("--out-dir")
    r.add_argument("--work-dir")
    r.add_argument("--card", help="default: GPU name from nvidia-smi")
    r.add_argument("--deadline-s", type=float,
                   help="start no new server / point after this many seconds")
    r.add_argument("--model-device",
                   help="where the synthetic weights are generated")
    w = sub.add_parser("sweep", help="measured accept length per --accept-steps / "
                       "--draft-accuracy (EAGLE3 server, CUDA graphs off: faster start)")
    w.add_argument("--points", type=csv(str), default=["0:1", "1:1", "2:1", "3:1", "3:0.9", "3:0.8"],
                   help="comma list of K:P (accept steps : draft accuracy)")
    w.add_argument("--variant", default="base")
    w.add_argument("--preset", default="tiny")
    w.add_argument("--attention-backend", default="triton")
    w.add_argument("--greedy-prompts", type=int, default=64)
    w.add_argument("--greedy-new-tokens", type=int, default=64)
    w.add_argument("--spec-steps", type=int, default=3)
    w.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    w.add_argument("--work-dir", default="/tmp/sglpatch-bench")
    w.add_argument("--card", default=None)
    w.add_argument("--deadline-s", type=float, default=None)
    w.add_argument("--model-device", default="cuda")
    p = sub.add_parser("plot", help="PNG of TPOT vs concurrency (several files: "
                       "one plot of all their runs, e.g. two calls across midnight)")
    p.add_argument("results_json", nargs="+")
    p.add_argument("--png", default=None, help="default: (first) RESULTS with .png")
    t = sub.add_parser("table", help="print the short table")
    t.add_argument("results_json")
    m = sub.add_parser("merge", help="merge results files of one day/card")
    m.add_argument("into")
    m.add_argument("sources", nargs="+")
    m.add_argument("--pool", action="store_true",
                   help="the sources are calls of one machine: pool the repeats of a "
                        "point measured in several of them (default: a later run replaces)")
    m.add_argument("--label", action="append", default=None,
                   help="with --pool: the name of each source's call, in order")
    o = sub.add_parser("report", help="Markdown of results files, the results index, "
                       "benchmark/RESULTS.md and README's summary")
    o.add_argument("results_json", nargs="*")
    o.add_argument("--md", default=None,
                   help="with one RESULTS: where to write (default: RESULTS with .md)")
    o.add_argument("--index", default=None, metavar="DIR",
                   help="write DIR/README.md, the index of DIR's results files")
    o.add_argument("--summary", action="store_true",
                   help="regenerate benchmark/RESULTS.md and README.md's summary block "
                   "from benchmark/current.json")
    f = sub.add_parser("reprofile", help="summarize a results file's profile traces "
                       "again with the current trace_steps.py")
    f.add_argument("results_json")
    f.add_argument("trace_dir", help="where the profiles' trace files are (unpacked)")
    f.add_argument("--call", default=None,
                   help="only the profiles of this call (a pooled file's `call` label)")
    f.add_argument("--skip-missing", action="store_true",
                   help="leave the profiles whose traces did not come back as they are "
                        "(a call whose profiles.tgz held only the GPU-only traces)")
    return ap


# ---------------------------------------------------------------------------
def main(argv=None):
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.cmd == "run":
        return cmd_run(run_options(a, ap))
    if a.cmd == "sweep":
        return cmd_sweep(a)
    if a.cmd == "report":
        return cmd_report(a, ap)
    return {"merge": cmd_merge, "table": cmd_table, "plot": cmd_plot,
            "reprofile": cmd_reprofile}[a.cmd](a, ap)


def run_options(ns, ap):
    """The options of `run`, checked: combinations the harness refuses fail
    here, before any model is built."""
    opts = RunOptions.from_namespace(ns)
    if opts.side_by_side and not opts.max_total_tokens:
        ap.error("--side-by-side needs --max-total-tokens: each server's KV pool "
                 "must be fixed, or the first to start takes the whole GPU")
    if opts.keep_servers and not opts.side_by_side:
        ap.error("--keep-servers needs --side-by-side: servers run one at a time "
                 "otherwise, and a kept one would hold the GPU beside the next")
    if opts.rotate_cpus and not (opts.side_by_side and opts.pin_cpus):
        ap.error("--rotate-cpus needs --side-by-side and --pin-cpus: it moves the "
                 "servers of a comparison between their pinned CPU sets")
    if opts.profile_arrivals and not (opts.profile_steps or opts.profile_stack_steps):
        ap.error("--profile-arrivals needs --profile-steps or --profile-stack-steps: "
                 "it says how a profile is taken, and none would be")
    check_dp(opts, ap)
    check_speculative(opts, ap)
    if opts.fault_storms < 1:
        ap.error("--fault-storms must be at least 1")
    if opts.mixed_load and opts.disaggregation_decode:
        ap.error("--mixed-load needs prefills: not with --disaggregation-decode")
    if opts.fault_grammar_clients and opts.disaggregation_decode:
        # the fake transfer's first token is 0 (its metadata buffers are
        # zeros), which no grammar accepts: every such request errors at
        # admission on every build, and the check would compare nothing
        ap.error("--fault-grammar-clients needs a real prefill: not with "
                 "--disaggregation-decode (the fake transfer's first token is 0)")
    for spec in opts.variant:
        parse_variant(spec)  # a bad name fails here, before any model is built
    return opts


def check_dp(opts, ap):
    """The DP options make a launch that sglang 0.5.12.post1 accepts and that
    the records describe as it ran."""
    if opts.dp < 1:
        ap.error("--dp must be at least 1")
    if not opts.enable_dp_attention:
        return
    if opts.dp < 2:
        ap.error("--enable-dp-attention needs --dp 2 or more (sglang turns it off at --dp 1)")
    if opts.tp % opts.dp:
        ap.error(f"--enable-dp-attention: --tp {opts.tp} must be a multiple of --dp {opts.dp} "
                 "(the GPUs are tp; each DP rank's attention runs on tp/dp of them)")
    if True in opts.piecewise:
        ap.error("--enable-dp-attention: sglang turns piecewise CUDA graphs off under DP "
                 "attention; pass --piecewise disabled so the records say what ran")
    arch = preset_arch(opts.preset)
    if arch == "llama":
        ap.error(f"--enable-dp-attention: --preset {opts.preset} is a Llama target, whose "
                 "attention sglang 0.5.12.post1 splits over all TP ranks; use --preset "
                 "qwen3-small")


def check_speculative(opts, ap):
    """Known speculative settings, and a token map only where an EAGLE
    server takes it (sglang's EAGLE3 worker ignores one)."""
    if not opts.speculative or any(s not in results.SPECULATIVE for s in opts.speculative):
        ap.error(f"--speculative: a comma list of {', '.join(results.SPECULATIVE)}")
    if opts.token_map and "EAGLE" not in opts.speculative:
        ap.error("--token-map: FR-Spec applies to EAGLE drafts only; add EAGLE to "
                 "--speculative")
    p = preset_shape(opts.preset)
    if opts.token_map and p is not None and p["draft_vocab"] >= p["vocab"]:
        # a map of every token cuts nothing: the draft's head keeps the full
        # vocabulary, and the run would not test FR-Spec at all
        hot = sorted(n for n, q in presets().items() if q["draft_vocab"] < q["vocab"])
        ap.error(f"--token-map: --preset {opts.preset}'s hot vocab is its whole vocab; "
                 f"use a preset with a smaller one ({', '.join(hot)})")


@functools.cache
def presets():
    """The model presets of benchmark/models/make_models.py, by name (the
    module is executed once however many checks ask; read, never changed)."""
    spec = importlib.util.spec_from_file_location(
        "make_models", os.path.join(HERE, "models", "make_models.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # imports torch only when it builds
    return mod.PRESETS


def preset_shape(preset):
    """A model preset's shape (benchmark/models/make_models.py), None for a
    preset it does not know."""
    return presets().get(preset)


def preset_arch(preset):
    """The target architecture of a model preset, None for a preset it does
    not know."""
    p = preset_shape(preset)
    return None if p is None else p.get("arch", "llama")


def load(path):
    with open(path) as fh:
        data = json.load(fh)
    results.validate(data)
    return data


def cmd_merge(a, ap):
    data = None
    if os.path.exists(a.into):
        with open(a.into) as fh:
            data = json.load(fh)
    labels = a.label or [os.path.basename(p) for p in a.sources]
    if len(labels) != len(a.sources):
        ap.error("merge: one --label per source")
    for src, label in zip(a.sources, labels):
        with open(src) as fh:
            new = json.load(fh)
        data = results.pool(data, new, label) if a.pool else results.merge(data, new)
    results.validate(data)
    results.write(a.into, data)  # `data` already holds what INTO held
    print(results.table(data))
    return 0


def cmd_reprofile(a, ap):
    data = load(a.results_json)
    profiles = [p for p in data.get("profiles") or []
                if a.call is None or p.get("call") == a.call]
    names = [p["trace"] for p in profiles]
    if len(set(names)) < len(names):
        ap.error("reprofile: calls of this file share trace names; name one with --call")
    if not profiles:
        ap.error(f"reprofile: {a.results_json} has no profiles"
                 + (f" of call {a.call!r}" if a.call else ""))
    missing = [n for n in names if not os.path.exists(os.path.join(a.trace_dir, n))]
    if missing and not a.skip_missing:
        ap.error(f"reprofile: {a.trace_dir} lacks {', '.join(missing)}")
    if len(missing) == len(names):
        ap.error(f"reprofile: {a.trace_dir} holds none of the file's traces")
    for name in missing:
        print(f"{name}: not in {a.trace_dir}, left as it was")
    for p in (p for p in profiles if p["trace"] not in missing):
        # the point's identity stays; every measure is read again
        p.update(trace_steps.summarize(trace_steps.load(os.path.join(a.trace_dir, p["trace"])),
                                       p["steps"]))
        print(f"{p['trace']}: {p['gpu_idle_us_per_step']:.0f} us idle a forward, "
              f"{p['idle_waiting_on_host_us_per_step']:.0f} us of it waiting on the host")
    results.validate(data)
    results.write(a.results_json, data)
    return 0


def cmd_table(a, ap):
    print(results.table(load(a.results_json)))
    return 0


def cmd_plot(a, ap):
    datas = [load(p) for p in a.results_json]
    data = dict(datas[0])
    if len(datas) > 1:  # one picture of several files: label with all dates
        data["date"] = " + ".join(sorted({d["date"] for d in datas}))
        data["runs"] = [r for d in datas for r in d["runs"]]
    png = a.png or os.path.splitext(a.results_json[0])[0] + ".png"
    results.plot(data, png)
    print(png)
    return 0


def write_text(path, text):
    with open(path, "w") as fh:
        fh.write(text)
    print(path)


def cmd_report(a, ap):
    if a.md and len(a.results_json) != 1:
        ap.error("report --md: one RESULTS file")
    if not (a.results_json or a.index or a.summary):
        ap.error("report: RESULTS files, --index DIR or --summary")
    for path in a.results_json:
        md = a.md or os.path.splitext(path)[0] + ".md"
        write_text(md, report.render(load(path), path))
    if a.index:
        write_text(os.path.join(a.index, "README.md"), report.index(a.index))
    if a.summary:
        current, results_dir = report.load_current(), os.path.join(HERE, "results")
        write_text(os.path.join(HERE, "RESULTS.md"), report.results_page(current, results_dir))
        path = os.path.join(REPO, "README.md")
        with open(path) as fh:
            text = fh.read()
        write_text(path, report.refresh_summary(text, current, results_dir, "benchmark/results"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
