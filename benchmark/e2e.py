"""GPU evidence harness: greedy equivalence and decode latency, per variant.

    python benchmark/e2e.py run [options]      # needs a GPU and sglang
    python benchmark/e2e.py plot RESULTS.json [--png FILE]
    python benchmark/e2e.py table RESULTS.json
    python benchmark/e2e.py merge INTO.json FROM.json...

`run` builds (or reuses) a synthetic target/EAGLE3 pair (benchmark/models),
then for each variant x attention backend x overlap x setting launches
`python -m sglang.launch_server` on 127.0.0.1, checks greedy equivalence of
EAGLE3 against the same model without speculation, and measures
`python -m sglang.bench_serving --dataset-name random-ids` at each
concurrency, `--repeats` times (round robin over the concurrencies, so drift
spreads over all points).  With --side-by-side all of the call's servers
start at once on the one GPU (each with the fixed KV pool
--max-total-tokens) and are measured in turn at every (repeat, concurrency),
so a slow spell of the machine hits every build alike.  Results merge into
<out-dir>/<yyyy-mm-dd>-<card>.json after every point, so a run stopped by a
time limit still leaves what it measured.

A variant is NAME or NAME=SITE: SITE is a directory put first on PYTHONPATH
(an sglang installed with `pip install --target SITE`); without it the
current environment's sglang is used.  `patched` applies the series first
with `python -m sglpatch apply --sglang-dir SITE/sglang` (--no-apply: the
site is already patched).  See benchmark/README.md.
"""

import argparse
import contextlib
import datetime
import hashlib
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import greedy  # noqa: E402
import profiling  # noqa: E402
import results  # noqa: E402
import sizing  # noqa: E402
import trace_steps  # noqa: E402
from server import Server, free_port, server_command  # noqa: E402


def csv(kind):
    def parse(s):
        return [kind(x) for x in s.split(",") if x]
    return parse


def onoff(s):
    return {"on": True, "off": False, "default": True, "disabled": False}[s]


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__[__doc__.index("A variant"):])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="launch servers, check, measure")
    r.add_argument("--variant", action="append", default=None,
                   help="base | patched | upstream-0.5.13, optionally =SITE "
                   "(repeatable; default: base)")
    r.add_argument("--no-apply", action="store_true",
                   help="patched: do not run sglpatch apply")
    r.add_argument("--preset", default="small",
                   help="tiny | small | llama-8b-shape")
    r.add_argument("--models-dir", default=None,
                   help="where the model pair is built/reused "
                   "(default: <work-dir>/models-<preset>)")
    r.add_argument("--accept-steps", type=int, default=3,
                   help="draft right for its first K tokens (3 = all)")
    r.add_argument("--draft-accuracy", type=float, default=0.8,
                   help="per-token chance a draft token is right "
                   "(0.8 with K=3 gives accept length ~2.95)")
    r.add_argument("--attention-backend", type=csv(str), default=["triton"],
                   help="comma list: triton[,flashinfer]")
    r.add_argument("--overlap", type=csv(onoff), default=[True],
                   help="comma list of on/off (off = --disable-overlap-schedule)")
    r.add_argument("--piecewise", type=csv(onoff), default=[True, False],
                   help="comma list of default/disabled (--disable-piecewise-cuda-graph)")
    r.add_argument("--speculative", type=csv(str), default=["none", "EAGLE3"],
                   help="comma list of EAGLE3/none")
    r.add_argument("--nospec-piecewise", choices=["first", "all"], default="first",
                   help="no-spec servers only at the first --piecewise setting "
                   "(default, saves a server start per call) or at all")
    r.add_argument("--concurrency", type=csv(int), default=[1, 8, 32])
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--min-seconds", type=float, default=10.0,
                   help="size each bench point to last at least this long")
    r.add_argument("--input-len", type=int, default=256)
    r.add_argument("--output-len", type=int, default=256)
    r.add_argument("--seed", type=int, default=1, help="bench_serving --seed")
    r.add_argument("--greedy-prompts", type=int, default=64)
    r.add_argument("--greedy-new-tokens", type=int, default=64)
    r.add_argument("--spec-steps", type=int, default=3)
    r.add_argument("--tp", type=int, default=1)
    r.add_argument("--mem-fraction-static", type=float, default=None)
    r.add_argument("--max-total-tokens", type=int, default=None,
                   help="fixed KV pool per server (needed with --side-by-side)")
    r.add_argument("--side-by-side", action="store_true",
                   help="start all of the call's servers at once on the one GPU and "
                        "measure them in turn, repeat by repeat")
    r.add_argument("--server-arg", action="append", default=[],
                   help="extra launch_server argument (repeatable, e.g. "
                   "--server-arg=--enable-metrics)")
    r.add_argument("--no-bench", action="store_true", help="greedy check only")
    r.add_argument("--profile-steps", type=int, default=0,
                   help="after the greedy check, a torch-profiler trace of this many "
                   "decode forwards per server (GPU activity only) -> \"profiles\"")
    r.add_argument("--profile-stack-steps", type=int, default=0,
                   help="and one of this many forwards with CPU ops and Python frames")
    r.add_argument("--profile-concurrency", type=csv(int), default=[1],
                   help="requests decoding during each profile (comma list)")
    r.add_argument("--bench-runner", choices=["worker", "process"], default="worker",
                   help="worker: one process imports sglang.bench_serving once and runs "
                   "it as `-m` per point (saves ~10 s a point); process: a new "
                   "`python -m sglang.bench_serving` per point")
    r.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    r.add_argument("--work-dir", default="/tmp/sglpatch-bench")
    r.add_argument("--card", default=None, help="default: GPU name from nvidia-smi")
    r.add_argument("--deadline-s", type=float, default=None,
                   help="start no new server / point after this many seconds")
    r.add_argument("--model-device", default="cuda",
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
    return ap


# ---------------------------------------------------------------------------
def detect_card():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
        if out.strip():
            return out.strip().splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "unknown"


def parse_variant(spec):
    name, _, site = spec.partition("=")
    if name not in results.VARIANTS:
        raise SystemExit(f"unknown variant {name!r}: one of {results.VARIANTS}")
    return name, (os.path.abspath(site) if site else None)


def variant_env(site):
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if site:
        env["PYTHONPATH"] = os.pathsep.join(
            [site] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def apply_series(site, env, log):
    """Apply the series to SITE/sglang with the project's own tool."""
    if not site:
        raise SystemExit("patched needs =SITE (a pip --target install to patch)")
    e = dict(env)
    e["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"), e.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "sglpatch", "apply", "--sglang-dir",
           os.path.join(site, "sglang")]
    log(" ".join(cmd))
    res = subprocess.run(cmd, env=e, capture_output=True, text=True)
    log(res.stdout + res.stderr)
    if res.returncode != 0:
        raise RuntimeError(f"sglpatch apply failed ({res.returncode})")
    st = subprocess.run(cmd[:3] + ["status", "--sglang-dir", cmd[-1]], env=e,
                        capture_output=True, text=True)
    return st.stdout.strip()


def ensure_models(a, log):
    d = a.models_dir or os.path.join(a.work_dir, f"models-{a.preset}")
    want = {"preset": a.preset, "accept_steps": a.accept_steps,
            "draft_accuracy": a.draft_accuracy, "spec_steps": a.spec_steps}
    meta_path = os.path.join(d, "draft", "synthetic.json")
    if os.path.exists(meta_path):
        meta = json.load(open(meta_path))
        if all(meta.get(k) == v for k, v in want.items()):
            log(f"models: reusing {d}")
            return d, meta
    sys.path.insert(0, os.path.join(HERE, "models"))
    import make_models

    t0 = time.time()
    meta = make_models.build(a.preset, d, a.accept_steps, a.draft_accuracy,
                             device=a.model_device, spec_steps=a.spec_steps)
    log(f"models: built {d} in {time.time() - t0:.1f}s: {json.dumps(meta)}")
    return d, meta


def load_fmap(models_dir):
    try:
        import torch

        return torch.load(os.path.join(models_dir, "token_map.pt"))["f"].tolist()
    except Exception:
        return None


# ---------------------------------------------------------------------------
def probe_throughput(url, conc, input_len, output_len, vocab):
    """Output tok/s at `conc` parallel requests (also warms that batch size)."""
    prompts = greedy.make_prompts(conc, vocab, seed=123, min_len=input_len,
                                  max_len=input_len)
    t0 = time.time()
    threads, errors = greedy.decode_in_background(url, prompts, output_len)
    for th in threads:
        th.join()
    wall = time.time() - t0
    if errors:
        raise RuntimeError(f"probe failed: {errors[0]}")
    return conc * output_len / wall


class BenchRunner:
    """Runs bench_serving points: in a persistent worker (default) or as one
    `python -m sglang.bench_serving` process per point.

    The worker (bench_worker.py) executes the module as `-m` does but pays
    its ~10 s import once per variant instead of once per point.  If it
    fails, this point and the rest fall back to a process per point.
    """

    def __init__(self, mode, log):
        self.mode, self.log = mode, log
        self.workers = {}  # PYTHONPATH -> Popen

    def _worker(self, env):
        key = env.get("PYTHONPATH", "")
        w = self.workers.get(key)
        if w is None or w.poll() is not None:
            w = subprocess.Popen([sys.executable, os.path.join(HERE, "bench_worker.py")],
                                 env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, bufsize=1)
            ready = w.stdout.readline()
            if '"ready"' not in ready:
                raise RuntimeError(f"bench worker did not start: {ready!r}")
            self.workers[key] = w
        return w

    def run(self, argv, env, log_path):
        if self.mode == "worker":
            try:
                w = self._worker(env)
                w.stdin.write(json.dumps({"argv": argv, "log": log_path}) + "\n")
                w.stdin.flush()
                res = json.loads(w.stdout.readline())
                if res["rc"] == 0:
                    return 0
                self.log(f"  bench worker: {res['error']}; process per point from now on")
            except Exception as e:
                self.log(f"  bench worker failed ({e}); process per point from now on")
            self.mode = "process"
        with open(log_path, "a") as fh:
            return subprocess.run([sys.executable, "-m", "sglang.bench_serving"] + argv,
                                  env=env, stdout=fh, stderr=subprocess.STDOUT).returncode

    def close(self):
        for w in self.workers.values():
            if w.poll() is None:
                w.stdin.close()
                try:
                    w.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    w.kill()
        self.workers = {}


def run_bench(runner, srv, env, a, target, conc, num_prompts, out_file):
    argv = ["--backend", "sglang", "--host", "127.0.0.1", "--port", str(srv.port),
            "--model", target, "--tokenizer", target,
            "--dataset-name", "random-ids", "--tokenize-prompt",
            "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
            "--random-range-ratio", "1.0", "--num-prompts", str(num_prompts),
            "--max-concurrency", str(conc), "--seed", str(a.seed),
            "--output-file", out_file, "--disable-tqdm"]
    srv.reset_spec_counters()  # accept length of this point only
    t0 = time.time()
    rc = runner.run(argv, env, out_file[:-6] + ".log")
    if rc != 0:
        raise RuntimeError(f"bench_serving failed ({rc}); log {out_file[:-6]}.log")
    with open(out_file) as fh:
        rec = json.loads(fh.read().strip().splitlines()[-1])
    sample = {"tpot_ms": rec["median_tpot_ms"], "itl_ms": rec["median_itl_ms"],
              "output_tok_per_s": rec["output_throughput"],
              "accept_length": rec.get("accept_length"),
              "duration_s": rec.get("duration"), "num_prompts": num_prompts,
              "wall_s": round(time.time() - t0, 1)}
    return sample, "python -m sglang.bench_serving " + " ".join(argv)


# ---------------------------------------------------------------------------
class Run:
    """State of one `run`: collected samples and greedy outputs; writes."""

    def __init__(self, a):
        self.a = a
        self.t0 = time.time()
        self.card = a.card or detect_card()
        self.date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        os.makedirs(a.out_dir, exist_ok=True)
        os.makedirs(a.work_dir, exist_ok=True)
        self.path = results.results_path(a.out_dir, self.date, self.card)
        self.samples = {}  # run key -> [sample]
        self.greedy_out = {}  # (variant, backend, overlap, spec, pw) -> ids
        self.greedy_meta = {}
        self.commands = []
        self.server_starts = []
        self.profiles = []
        self.errors = []
        self.fmap, self.prompts, self.model_meta = None, [], {}
        self.runner = BenchRunner(a.bench_runner, self.log)
        self.log_file = open(os.path.join(a.out_dir, "e2e-log.txt"), "a")

    def log(self, msg):
        line = f"[{time.time() - self.t0:7.1f}s] {msg}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def time_left(self):
        if self.a.deadline_s is None:
            return math.inf
        return self.a.deadline_s - (time.time() - self.t0)

    def prompts_off_chain(self, ids):
        """Prompts whose output leaves the token chain the weights encode."""
        chain = greedy.expected_chain(self.prompts, self.fmap, self.a.greedy_new_tokens)
        return len(greedy.compare(ids, chain))

    def _greedy_fields(self, key, ids):
        """What every greedy record says of one server's outputs."""
        var, be, ov, spec, pw = key
        r = {"variant": var, "attention_backend": be, "overlap": ov,
             "piecewise_cuda_graph": pw, "tp": self.a.tp, "prompts": len(ids),
             "accept_length": self.greedy_meta.get(key)}
        if self.fmap:
            r["prompts_off_constructed_f"] = self.prompts_off_chain(ids)
        return r

    def greedy_entries(self):
        out = []
        for key, ids in self.greedy_out.items():
            var, be, ov, spec, _ = key
            if spec != "EAGLE3":
                continue
            # the no-spec reference of the same build, backend and overlap
            ref = next((v for (rv, rb, ro, rs, _), v in self.greedy_out.items()
                        if (rv, rb, ro, rs) == (var, be, ov, "none")), None)
            if ref is None:
                continue
            bad = greedy.compare(ids, ref)
            entry = self._greedy_fields(key, ids)
            entry.update({"mismatched_prompts": len(bad), "mismatches": bad,
                          "new_tokens": self.a.greedy_new_tokens})
            out.append(entry)
        return out

    def greedy_runs(self):
        """Per server: a digest of its greedy ids (equal digests = equal
        outputs, also across variants) and the prompts off the constructed
        chain; kept even when no no-spec reference was served."""
        out = []
        for key, ids in self.greedy_out.items():
            r = self._greedy_fields(key, ids)
            r.update({"speculative": key[3],
                      "sha256": hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]})
            out.append(r)
        return out

    def write(self):
        runs = []
        for key, samples in self.samples.items():
            if not samples:
                continue
            r = dict(zip(results.RUN_KEY, key), tp=self.a.tp)
            r.update(results.summarize_point(samples))
            r["samples"] = samples
            runs.append(r)
        data = {"card": self.card, "date": self.date, "model_preset": self.a.preset,
                "runs": runs, "greedy_equivalence": self.greedy_entries(),
                "greedy_runs": self.greedy_runs(),
                "model": self.model_meta, "commands": self.commands,
                "server_starts": self.server_starts,
                "profiles": self.profiles,
                "bench": {"input_len": self.a.input_len, "output_len": self.a.output_len,
                          "min_seconds": self.a.min_seconds, "seed": self.a.seed,
                          "dataset": "random-ids", "runner": self.runner.mode,
                          "side_by_side": self.a.side_by_side,
                          "max_total_tokens": self.a.max_total_tokens}}
        if self.errors:
            data["errors"] = self.errors
        return results.write_merged(self.path, data)


def settings(a):
    """(speculative, piecewise) pairs, the no-spec reference last."""
    out = []
    # EAGLE3 first: it is what the series changes; the no-spec server then
    # still gets its greedy reference in before a --deadline-s cuts benches
    for spec in sorted(a.speculative, key=lambda s: s == "none"):
        pws = a.piecewise if (spec == "EAGLE3" or a.nospec_piecewise == "all") else a.piecewise[:1]
        out += [(spec, pw) for pw in pws]
    return out


def cmd_run(a):
    st = Run(a)
    st.log(f"card {st.card}; results {st.path}")
    st.commands.append("python benchmark/e2e.py " + " ".join(sys.argv[1:]))
    models, st.model_meta = ensure_models(a, st.log)
    target, draft = os.path.join(models, "target"), os.path.join(models, "draft")
    vocab = st.model_meta["vocab"]
    st.fmap = load_fmap(models)
    st.prompts = greedy.make_prompts(a.greedy_prompts, vocab)
    members = []
    for var, site in [parse_variant(v) for v in (a.variant or ["base"])]:
        env = variant_env(site)
        if var == "patched" and not a.no_apply:
            try:
                st.log("sglpatch status:\n" + apply_series(site, env, st.log))
            except Exception as e:
                st.errors.append(f"{var}: {e}")
                st.log(f"SKIP {var}: {e}")
                continue
        members += [Member(var, env, be, ov, spec, pw)
                    for be in a.attention_backend for ov in a.overlap
                    for spec, pw in settings(a)]
    for group in server_groups(members, a.side_by_side):
        need = 60 if all(m.spec == "none" for m in group) else 90
        if st.time_left() < need:
            for m in group:
                st.log(f"deadline: skip {m.tag}")
                st.errors.append(f"not run (deadline): {m.var} {m.be} overlap={m.ov} "
                                 f"{m.spec} pcg={m.pw}")
            continue
        try:
            serve_group(st, a, group, target, draft, vocab)
        except Exception as e:
            names = ", ".join(m.tag for m in group)
            st.errors.append(f"{names}: {e}"[:2000])
            st.log(f"ERROR {names}: {e}")
        st.write()
    st.runner.close()
    data = st.write()
    print(results.table(data))
    try:
        results.plot(data, st.path[:-5] + ".png")
        st.log(f"plot: {st.path[:-5]}.png")
    except Exception as e:  # no matplotlib on the device, or nothing to plot
        st.log(f"no plot ({type(e).__name__}: {e}): run `python benchmark/e2e.py plot` elsewhere")
    return 1 if st.errors else 0


class Member:
    """One server of a run: a build (variant + its environment) and a setting."""

    def __init__(self, var, env, be, ov, spec, pw):
        self.var, self.env, self.be, self.ov, self.spec, self.pw = var, env, be, ov, spec, pw
        self.tag = f"{var}-{be}-ov{int(ov)}-{spec}-pcg{int(pw)}"
        self.srv = None
        self.nprompts = {}  # concurrency -> bench prompts (only grows)

    @property
    def greedy_key(self):
        return (self.var, self.be, self.ov, self.spec, self.pw)

    def run_key(self, c):
        return (self.var, self.be, self.spec, self.ov, self.pw, c)


def server_groups(members, side_by_side):
    """Servers that run at the same time: one at a time by default; with
    --side-by-side all of the call's servers together, so their repeats
    interleave and drift on the machine hits every build alike."""
    return [members] if side_by_side else [[m] for m in members]


def bench_order(members, repeats, concurrency):
    """(rep, c, member) in the order they are measured: round robin over
    the concurrencies, and within one (rep, c) over the servers."""
    return [(rep, c, m) for rep in range(repeats) for c in concurrency for m in members]


def serve_group(st, a, group, target, draft, vocab):
    with contextlib.ExitStack() as stack:
        used = set()
        for i, m in enumerate(group):
            port = free_port(30000 + 10 * len(st.server_starts) + 10 * i)
            while port in used:
                port = free_port(port + 1)
            used.add(port)
            cmd = server_command(sys.executable, target, draft, port, m.be, m.spec, m.ov, m.pw,
                                 tp=a.tp, spec_steps=a.spec_steps, draft_tokens=a.spec_steps + 1,
                                 mem_fraction=a.mem_fraction_static,
                                 max_total_tokens=a.max_total_tokens, extra=a.server_arg)
            st.log(f"launch {m.tag}: {' '.join(cmd[1:])}")
            m.srv = Server(cmd, m.env, os.path.join(a.work_dir, f"server-{m.tag}.log"))
            stack.callback(m.srv.__exit__)
            m.srv.launch()
            if i + 1 < len(group):
                time.sleep(3)  # staggered: no two start-ups pick ports in the same instant
        for m in group:
            m.srv.wait_ready()
            st.server_starts.append({"setting": m.tag, "start_s": round(m.srv.start_s, 1),
                                     "side_by_side": len(group)})
            st.log(f"  {m.tag} ready in {m.srv.start_s:.0f}s")
        for m in group:
            greedy_check(st, a, m)
        for c, stack, m in profile_order(group, a):
            profile_point(st, a, m, c, stack, vocab)
        if a.no_bench:
            return
        for rep, c, m in bench_order(group, a.repeats, a.concurrency):
            if st.time_left() < 30:
                st.log(f"  deadline: stop at rep {rep} c={c} ({m.tag})")
                return
            bench_point(st, a, m, rep, c, target, vocab)


def greedy_check(st, a, m):
    m.srv.reset_spec_counters()
    t0 = time.time()
    ids, acc = greedy.generate(m.srv.url, st.prompts, a.greedy_new_tokens)
    st.greedy_out[m.greedy_key] = ids
    st.greedy_meta[m.greedy_key] = acc
    st.log(f"  {m.tag}: greedy {len(ids)}x{a.greedy_new_tokens} in {time.time() - t0:.1f}s"
           f", accept length {acc}")


def profile_order(members, a):
    """(concurrency, with_stack, member) of the profiles to take: for each
    concurrency, the plain trace of every server, then the stack traces."""
    kinds = [(False, a.profile_steps), (True, a.profile_stack_steps)]
    return [(c, stack, m) for c in a.profile_concurrency
            for stack, steps in kinds if steps for m in members]


def profile_point(st, a, m, c, with_stack, vocab):
    steps = a.profile_stack_steps if with_stack else a.profile_steps
    kind = "stack" if with_stack else "gpu"
    t0 = time.time()
    try:
        traces = profiling.capture(m.srv.url, os.path.join(a.work_dir, "profiles"), steps,
                                   with_stack, c, vocab, input_len=a.input_len, ranks=a.tp)
        summaries = {}
        for rank, trace in traces.items():
            rk = "" if a.tp == 1 else f"-rank{rank}"
            name = f"{m.tag}-c{c}-{kind}{rk}.trace.json.gz"
            named = os.path.join(os.path.dirname(trace), name)  # which server, kind, rank
            os.replace(trace, named)
            summaries[rank] = (name, trace_steps.summarize(trace_steps.load(named), steps))
    except Exception as e:  # a profile is evidence, not a gate: keep measuring
        st.errors.append(f"profile {m.tag} c={c} {kind}: {e}"[:2000])
        st.log(f"  {m.tag} c={c}: profile ({kind}) failed: {e}")
        return
    for rank, (name, summary) in summaries.items():
        st.profiles.append({"variant": m.var, "attention_backend": m.be, "speculative": m.spec,
                            "overlap": m.ov, "piecewise_cuda_graph": m.pw, "concurrency": c,
                            "tp": a.tp, "rank": rank, "with_stack": with_stack, "trace": name,
                            **summary})
        st.log(f"  {m.tag} c={c} rank {rank}: profile ({kind}, {steps} forwards, "
               f"{time.time() - t0:.0f}s): "
               f"{summary['window_us_per_step']:.0f} us/forward, GPU busy "
               f"{summary['gpu_busy_us_per_step']:.0f} us, idle {summary['gpu_idle_us_per_step']:.0f} us, "
               f"D2H copies {summary['device_to_host_copies_per_step']}, host syncs "
               f"{summary['host_sync_calls_per_step']} ({summary['host_sync_us_per_step']:.0f} us)")
    st.write()


def bench_point(st, a, m, rep, c, target, vocab):
    srv = m.srv
    if c not in m.nprompts:
        # twice: the first pass at a new batch size runs cold
        probe_throughput(srv.url, c, a.input_len, a.output_len, vocab)
        tps = probe_throughput(srv.url, c, a.input_len, a.output_len, vocab)
        m.nprompts[c] = sizing.from_probe(tps, a.output_len, c, a.min_seconds)
        st.log(f"  {m.tag} c={c}: probe {tps:.0f} tok/s -> {m.nprompts[c]} prompts")
    out = os.path.join(a.work_dir, f"bench-{m.tag}-c{c}-r{rep}.jsonl")
    if os.path.exists(out):
        os.remove(out)
    sample, bcmd = run_bench(st.runner, srv, m.env, a, target, c, m.nprompts[c], out)
    if not any("bench_serving" in x for x in st.commands):
        st.commands.append(bcmd)  # one example; the others differ in port/prompts
    dur = sample.get("duration_s") or 0
    m.nprompts[c] = sizing.grown(m.nprompts[c], c, dur, a.min_seconds)
    if sizing.is_short(dur, a.min_seconds) and st.time_left() > 30:
        # every kept repeat lasts >= min_seconds: measure this one again
        st.log(f"  {m.tag} rep {rep} c={c}: {dur:.1f}s < {a.min_seconds:g}s, "
               f"again with {m.nprompts[c]} prompts")
        os.remove(out)
        sample, _ = run_bench(st.runner, srv, m.env, a, target, c, m.nprompts[c], out)
        m.nprompts[c] = sizing.grown(m.nprompts[c], c, sample.get("duration_s") or 0,
                                     a.min_seconds)
    st.samples.setdefault(m.run_key(c), []).append(sample)
    st.log(f"  {m.tag} rep {rep} c={c}: TPOT {sample['tpot_ms']:.3f} ms ITL "
           f"{sample['itl_ms']:.3f} ms {sample['output_tok_per_s']:.0f} tok/s "
           f"accept {sample['accept_length']} ({sample['duration_s']:.1f}s)")
    st.write()


def cmd_sweep(a):
    """Accept length each draft setting really gives on a served model."""
    t0 = time.time()
    card = a.card or detect_card()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    path = results.results_path(a.out_dir, date, card)
    var, site = parse_variant(a.variant)
    env = variant_env(site)
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


# ---------------------------------------------------------------------------
def main(argv=None):
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.cmd == "run" and a.side_by_side and not a.max_total_tokens:
        ap.error("--side-by-side needs --max-total-tokens: each server's KV pool "
                 "must be fixed, or the first to start takes the whole GPU")
    if a.cmd == "run":
        return cmd_run(a)
    if a.cmd == "sweep":
        return cmd_sweep(a)
    if a.cmd == "merge":
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
    if a.cmd == "table":
        with open(a.results_json) as fh:
            data = json.load(fh)
        results.validate(data)
        print(results.table(data))
        return 0
    datas = []
    for path in a.results_json:
        with open(path) as fh:
            datas.append(json.load(fh))
        results.validate(datas[-1])
    data = dict(datas[0])
    if len(datas) > 1:  # one picture of several files: label with all dates
        data["date"] = " + ".join(sorted({d["date"] for d in datas}))
        data["runs"] = [r for d in datas for r in d["runs"]]
    png = a.png or os.path.splitext(a.results_json[0])[0] + ".png"
    results.plot(data, png)
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
