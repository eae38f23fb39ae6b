"""`e2e.py run`: serve each build x setting, check greedy equivalence,
profile, and measure bench_serving points; results merge into
<out-dir>/<yyyy-mm-dd>-<card>.json after every point, so a run stopped by a
time limit still leaves what it measured."""

import contextlib
import datetime
import hashlib
import json
import math
import os
import subprocess
import sys
import threading
import time

import faults
import keep
import pace
import greedy
import mixed
import profiling
import results
import sizing
import trace_steps
from bench import BenchRunner, probe_throughput, run_bench
from builds import apply_series, detect_card, ensure_models, load_fmap, parse_variant, variant_env
from cpus import cpu_list, pin_cpus, rotated_place
from options import RunOptions
from server import (NCCL_PORT_DELTA, Server, move_group, prefill_graph_counts,
                    prefill_graphs_captured, server_command, server_ports,
                    sglpatch_line)


class Run:
    """State of one `run`: collected samples and greedy outputs; writes."""

    def __init__(self, opts: RunOptions):
        self.opts = opts
        self.t0 = time.time()
        self.card = opts.card or detect_card()
        self.date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        os.makedirs(opts.out_dir, exist_ok=True)
        os.makedirs(opts.work_dir, exist_ok=True)
        self.path = results.results_path(opts.out_dir, self.date, self.card)
        self.samples = {}  # run key -> [sample]
        self.greedy_out = {}  # (variant, backend, overlap, spec, pw) -> ids
        self.greedy_meta = {}
        self.commands = []
        self.server_starts = []
        self.profiles = []
        self.faults = []
        self.mixed = []  # --mixed-load records
        self.errors = []
        self.fmap, self.prompts, self.model_meta = None, [], {}
        self.greedy_debug = {}  # greedy key -> debug-check counts of that server
        self.greedy_logprobs = {}  # greedy key -> top logprobs (--greedy-logprobs)
        self.greedy_logprob_errors = {}  # greedy key -> why its logprobs were not taken
        self.server_cpus = None  # --pin-cpus: a CPU set per server of a group
        self.client = None  # --one-client: the member whose bench_serving times every server
        self.kept = keep.KeptServers(opts.work_dir, self.log)  # --keep-servers
        self.runner = BenchRunner(opts.bench_runner, self.log)
        self.log_file = open(os.path.join(opts.out_dir, "e2e-log.txt"), "a")

    def log(self, msg):
        line = f"[{time.time() - self.t0:7.1f}s] {msg}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def time_left(self):
        if self.opts.deadline_s is None:
            return math.inf
        return self.opts.deadline_s - (time.time() - self.t0)

    def prompts_off_chain(self, ids):
        """Prompts whose output leaves the token chain the weights encode."""
        chain = greedy.expected_chain(self.prompts, self.fmap, self.opts.greedy_new_tokens)
        return len(greedy.compare(ids, chain))

    def _greedy_fields(self, key, ids):
        """What every greedy record says of one server's outputs."""
        var, be, ov, spec, pw = key
        r = {"variant": var, "attention_backend": be, "overlap": ov,
             "piecewise_cuda_graph": pw, **deployment_fields(self.opts), "prompts": len(ids),
             "accept_length": self.greedy_meta.get(key)}
        if self.fmap:
            r["prompts_off_constructed_f"] = self.prompts_off_chain(ids)
            r["prompts_off_own_chain"] = greedy.prompts_off_own_chain(ids, self.fmap)
        r.update(self.greedy_debug.get(key, {}))
        return r

    def _logprob_fields(self, key):
        """--greedy-logprobs: the server's largest logprob difference from
        base's server of the same setting (0.0 for base itself), or why it
        has none; for a server of a build on top of the series (its A/A
        copy, a trial patch), from the patched server's too."""
        if key in self.greedy_logprob_errors:
            return {"logprob_error": self.greedy_logprob_errors[key]}
        mine = self.greedy_logprobs.get(key)
        if mine is None:
            return {}
        references = ["base"] + (["patched"] if results.over_patched(key[0]) else [])
        out = {}
        for reference in references:
            theirs = self.greedy_logprobs.get((reference,) + tuple(key[1:]))
            if theirs is not None:
                out[f"logprob_max_diff_vs_{reference}"] = greedy.logprob_max_diff(mine, theirs)
        return out

    def greedy_entries(self):
        out = []
        for key, ids in self.greedy_out.items():
            var, be, ov, spec, _ = key
            if spec == "none":
                continue
            # the no-spec reference of the same build, backend and overlap
            ref = next((v for (rv, rb, ro, rs, _), v in self.greedy_out.items()
                        if (rv, rb, ro, rs) == (var, be, ov, "none")), None)
            if ref is None:
                continue
            bad = greedy.compare(ids, ref)
            entry = dict(self._greedy_fields(key, ids), speculative=spec)
            entry.update({"mismatched_prompts": len(bad), "mismatches": bad,
                          "new_tokens": self.opts.greedy_new_tokens})
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
            r.update(self._logprob_fields(key))
            out.append(r)
        return out

    def write(self):
        runs = []
        for key, samples in self.samples.items():
            if not samples:
                continue
            r = dict(zip(results.RUN_KEY, key), **deployment_fields(self.opts))
            r.update(results.summarize_point(samples))
            r["samples"] = samples
            runs.append(r)
        data = {"card": self.card, "date": self.date, "model_preset": self.opts.preset,
                "runs": runs, "greedy_equivalence": self.greedy_entries(),
                "greedy_runs": self.greedy_runs(),
                "model": self.model_meta, "commands": self.commands,
                "server_starts": self.server_starts,
                "profiles": self.profiles, "faults": self.faults,
                **({"mixed_load": self.mixed} if self.mixed else {}),
                "bench": {"input_len": self.opts.input_len, "output_len": self.opts.output_len,
                          "min_seconds": self.opts.min_seconds, "seed": self.opts.seed,
                          "dataset": "random-ids", "runner": self.runner.mode,
                          # --one-client: the build whose bench_serving timed every server
                          **({"client": self.client.var} if self.client else {}),
                          **({"request_body": json.loads(self.opts.request_body)}
                             if self.opts.request_body else {}),
                          "side_by_side": self.opts.side_by_side,
                          # the servers' order within each (repeat, c): bench_order
                          "turn": "alternating" if self.opts.side_by_side else None,
                          # side by side: how the servers' starts were spaced (start_gate)
                          "start": (("together" if self.opts.start_together else "after capture")
                                    if self.opts.side_by_side else None),
                          "max_total_tokens": self.opts.max_total_tokens,
                          # each server and the bench client on cores of its own
                          "pin_cpus": self.server_cpus is not None,
                          # each repeat moved every server to the next one's CPU set
                          "rotate_cpus": bool(self.opts.rotate_cpus and self.server_cpus),
                          "debug_env": debug_env()}}
        if self.errors:
            data["errors"] = self.errors
        return results.write_merged(self.path, data)


def deployment_fields(opts: RunOptions):
    """The call's deployment shape, part of every record's key: tensor
    parallel size, "disaggregation" only for a decode-only server,
    "spec_params" only when sglang chose the speculative parameters ("auto")
    or the EAGLE tree is not a chain ("5/4/8": steps / topk / draft tokens), "dp"
    only with data parallelism (--dp above 1) and "dp_attention" only with
    DP attention."""
    fields = {"tp": opts.tp}
    if opts.disaggregation_decode:
        fields["disaggregation"] = "decode"
    if opts.spec_auto:
        fields["spec_params"] = "auto"
    elif spec_params(opts)[1:] != (1, opts.spec_steps + 1):
        fields["spec_params"] = "/".join(map(str, spec_params(opts)))
    if opts.dp > 1:
        fields["dp"] = opts.dp
    if opts.enable_dp_attention:
        fields["dp_attention"] = True
    if opts.token_map:  # FR-Spec: EAGLE servers got --speculative-token-map
        fields["token_map"] = True
    return fields


def spec_params(opts: RunOptions):
    """(steps, topk, draft tokens) of the EAGLE3 servers given on the command
    line; the default is a chain, topk 1 and steps + 1 draft tokens."""
    steps, draft = opts.spec_steps, opts.spec_draft_tokens
    return steps, opts.spec_topk, steps + 1 if draft is None else draft


def debug_env():
    """The sglang debug switches set for this run's servers (they change
    timings: a run with any of them measures correctness, not speed)."""
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith("SGLANG_DEBUG_") or k in PROBE_SWITCHES}


# the project's probes (benchmark/probes/) that time or trace the servers
PROBE_SWITCHES = ("SGLPATCH_HOST_TIME", "SGLPATCH_HOST_TIME_EXTRA", "SGLPATCH_SYNC_TRACE",
                  "SGLPATCH_STARTUP_STACKS")


def server_extra_args(opts: RunOptions):
    """launch_server arguments beyond the setting's own."""
    extra = list(opts.server_arg)
    if opts.side_by_side:
        # An idle server's scheduler otherwise busy-polls its sockets: on a
        # machine whose vCPUs share physical cores that slows the server
        # being measured, by a different amount from one moment to the next.
        extra.append("--sleep-on-idle")
    if opts.disaggregation_decode:
        # sglang's decode-only mode; the fake transfer builds each request's
        # prebuilt batch without a prefill server
        extra += ["--disaggregation-mode", "decode",
                  "--disaggregation-transfer-backend", "fake"]
    return extra


def settings(opts: RunOptions):
    """(speculative, piecewise) pairs, the no-spec reference last."""
    out = []
    # EAGLE3 first: it is what the series changes; the no-spec server then
    # still gets its greedy reference in before a --deadline-s cuts benches
    for spec in sorted(opts.speculative, key=lambda s: s == "none"):
        every_pw = spec != "none" or opts.nospec_piecewise == "all"
        pws = opts.piecewise if every_pw else opts.piecewise[:1]
        out += [(spec, pw) for pw in pws]
    return out


def cmd_run(opts: RunOptions):
    st = Run(opts)
    st.log(f"card {st.card}; results {st.path}")
    st.commands.append("python benchmark/e2e.py " + " ".join(sys.argv[1:]))
    models, st.model_meta = ensure_models(opts, st.log)
    target, draft = os.path.join(models, "target"), os.path.join(models, "draft")
    vocab = st.model_meta["vocab"]
    st.fmap = load_fmap(models)
    st.prompts = greedy.make_prompts(opts.greedy_prompts, vocab)
    members = []
    for var, site in [parse_variant(v) for v in opts.variant]:
        env = variant_env(site, opts.work_dir)
        if var == "patched" and not opts.no_apply:
            try:
                st.log("sglpatch status:\n" + apply_series(site, env, st.log))
            except Exception as e:
                st.errors.append(f"{var}: {e}")
                st.log(f"SKIP {var}: {e}")
                continue
        members += [Member(var, env, be, ov, spec, pw)
                    for be in opts.attention_backend for ov in opts.overlap
                    for spec, pw in settings(opts)]
    if opts.one_client and members:
        st.client = members[0]
    if opts.pin_cpus:
        st.server_cpus = pin_cpus(st.log, len(members) if opts.side_by_side else 1)
    fingerprint_members(st, opts, members, target, draft)
    st.kept.take({m.fingerprint for m in members} if opts.keep_servers else set())
    for group in server_groups(members, opts.side_by_side):
        need = 60 if all(m.spec == "none" for m in group) else 90
        if st.time_left() < need:
            for m in group:
                st.log(f"deadline: skip {m.tag}")
                st.errors.append(f"not run (deadline): {m.var} {m.be} overlap={m.ov} "
                                 f"{m.spec} pcg={m.pw}")
            continue
        try:
            serve_group(st, opts, group, target, draft, vocab)
        except Exception as e:
            names = ", ".join(m.tag for m in group)
            st.errors.append(f"{names}: {e}"[:2000])
            st.log(f"ERROR {names}: {e}")
        st.write()
    st.kept.stop_unadopted()
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
        self.cpus_now = None  # --rotate-cpus: the CPU set it runs on now (rotate_places)
        # (retraction lines, requests) its log held after its last storm
        self.retractions_seen = (0, 0)

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
    the concurrencies, and within one (rep, c) over the servers, in the
    call's order on even repeats and reversed on odd ones. Side by side,
    the first server of a turn is the one just woken from its idle sleep
    and the one whose neighbour has not run yet; alternating the order
    keeps that place from belonging to one build (base, listed first)."""
    return [(rep, c, m) for rep in range(repeats) for c in concurrency
            for m in (members if rep % 2 == 0 else members[::-1])]


def member_command(opts: RunOptions, m, target, draft, port, nccl_port=None):
    return server_command(sys.executable, target, draft, port, m.be, m.spec, m.ov, m.pw,
                          tp=opts.tp, spec_steps=None if opts.spec_auto else opts.spec_steps,
                          topk=spec_params(opts)[1], draft_tokens=spec_params(opts)[2],
                          mem_fraction=opts.mem_fraction_static,
                          max_total_tokens=opts.max_total_tokens,
                          token_map=opts.token_map,
                          grammar=opts.faults and opts.fault_grammar_clients > 0,
                          extra=server_extra_args(opts), dp=opts.dp,
                          dp_attention=opts.enable_dp_attention, nccl_port=nccl_port)


def fingerprint_members(st, opts: RunOptions, members, target, draft):
    """Each member's launch fingerprint (keep.fingerprint), by which a server
    an earlier run kept is matched to it (benchmark/keep.py)."""
    for group in server_groups(members, opts.side_by_side):  # serve_group goes by it
        for i, m in enumerate(group):  # i: its CPU set's index within its group
            cpus = st.server_cpus[i] if st.server_cpus else None
            cmd = member_command(opts, m, target, draft, 0)
            m.fingerprint = keep.fingerprint(m.tag, cmd, m.env, cpus)


def serve_group(st, opts: RunOptions, group, target, draft, vocab):
    group = list(group)  # a server that fails leaves this list (leave_group)
    kept_now = set()  # tags of servers left running when the group ends
    with contextlib.ExitStack() as stack:
        used = set()
        # tag -> the record of the kept server it reuses (st.kept.adopt)
        kept_for = {m.tag: st.kept.record_for(m.fingerprint) for m in group}
        for i, m in enumerate(group):
            cpus = st.server_cpus[i] if st.server_cpus else None
            kept = kept_for[m.tag]
            if kept:
                port, nccl_port = kept["port"], None
            else:
                port, nccl_port = server_ports(
                    opts.port_base + 10 * len(st.server_starts) + 10 * i, used)
            # a kept server's store port is its HTTP port's (server_ports)
            used.update((port, port + NCCL_PORT_DELTA))
            cmd = member_command(opts, m, target, draft, port, nccl_port)
            log_path = (kept["log_path"] if kept
                        else os.path.join(opts.work_dir, f"server-{m.tag}.log"))
            m.srv = Server(cmd, m.env, log_path, start_timeout=start_timeout(st), cpus=cpus)
            stack.callback(lambda m=m: m.tag in kept_now or m.srv.__exit__())
            if kept:
                st.kept.adopt(m)
                continue
            st.log(f"launch {m.tag}: {' '.join(cmd[1:])}")
            m.srv.launch()
            if any(not kept_for[n.tag] for n in group[i + 1:]):  # another start follows
                start_gate(st, opts, m)

        if not opts.no_bench:
            st.runner.prestart([client_env(st, m) for m in group])

        def keep_on_success(exc_type, exc, tb):
            # runs before the servers' own callbacks (last in, first out)
            if exc_type is None and opts.keep_servers:
                st.kept.keep(group, kept_now)
            return False

        stack.push(keep_on_success)  # it keeps the servers left in group
        launched = len(group)
        for m in list(group):
            try:
                m.srv.wait_ready()
            except Exception as e:
                if (opts.keep_servers and isinstance(e, TimeoutError)
                        and m.srv.proc.poll() is None):
                    # still starting when the call's time ran out: it runs
                    # on, and the next run adopts it once it serves
                    st.kept.keep_starting(m, kept_now)
                    group.remove(m)
                    st.errors.append(f"{m.tag}: not serving at the deadline; "
                                     "kept starting for the next run")
                    continue
                # a build that cannot start (a module its kit lacks, a
                # refusal at start-up) is an error of its own: the servers
                # beside it are measured as if it had never been listed
                leave_group(st, m, group, str(e))
                continue
            start = {"setting": m.tag, "start_s": round(m.srv.start_s, 1),
                     "side_by_side": launched}
            if m.srv.adopted:
                start["reused"] = True  # started by an earlier run: start_s is that start's
            if m.srv.start_spans_calls:
                # launched by a run whose time ran out first: start_s runs from
                # that launch to this run's first look that found it serving
                start["start_spans_calls"] = True
            if m.srv.cpus:
                start["cpus"] = cpu_list(m.srv.cpus)
            said = sglpatch_line(m.srv.log_path)
            if said:  # a patched server: the series and its seq_lens host pull
                start["sglpatch_line"] = said
            st.server_starts.append(start)
            # once the group is done: how its prefills ran, from the server's log
            stack.callback(note_prefill_graphs, start, m.srv.log_path)
            st.log(f"  {m.tag} ready in {m.srv.start_s:.0f}s")
        if not group:
            return
        for m in list(group):
            survives(st, m, group, "greedy", lambda m=m: greedy_check(st, opts, m))
        st.runner.wait_started()  # no worker's import beside a timed check or point
        if opts.mixed_load:
            for m in group:
                mixed_check(st, opts, m, vocab)
        if opts.faults:
            for storm, m in storm_order(group, opts.fault_storms):
                if st.time_left() < opts.fault_deadline_s + opts.fault_idle_s + 60:
                    st.log(f"  deadline: no fault check of {m.tag} (storm {storm})")
                    st.errors.append(f"faults not run (deadline): {m.tag} (storm {storm})")
                    continue
                fault_check(st, opts, m, vocab, storm)
        for c, with_stack, m in profile_order(group, opts):
            profile_point(st, opts, m, c, with_stack, vocab)
        if opts.no_bench:
            return
        if opts.rotate_cpus and st.server_cpus:
            # however the loop ends, each server goes back to its launch set
            # (a kept server's fingerprint names that set)
            stack.callback(place_back, st, group)
        placed = None
        for rep, c, m in bench_order(list(group), opts.repeats, opts.concurrency):
            if m not in group:  # its server failed an earlier point
                continue
            if st.time_left() < 30:
                st.log(f"  deadline: stop at rep {rep} c={c} ({m.tag})")
                return
            if opts.rotate_cpus and st.server_cpus and placed != rep:
                rotate_places(st, group, rep)
                placed = rep
            survives(st, m, group, f"rep {rep} c={c}",
                     lambda: bench_point(st, opts, m, rep, c, target, vocab))


def note_prefill_graphs(start, log_path):
    """Add to a server's start record how many of its prefill batches its
    log says ran in a CUDA graph and how many without one, and whose
    prefills (the EAGLE target's, the draft's) it captured graphs for."""
    counts = prefill_graph_counts(log_path)
    if counts:
        start.update(counts)
    captured = prefill_graphs_captured(log_path)
    if captured:
        start["prefill_graphs"] = ", ".join(captured)


def place_group(st, m, cpus):
    """Server m's processes, all their threads, onto `cpus`; m.cpus_now is
    where it runs."""
    if m.srv is None or m.srv.proc is None:
        return
    move_group(m.srv.proc.pid, cpus)
    m.cpus_now = cpus


def place_back(st, group):
    """Each server of the group back onto the CPU set it was launched on."""
    for m in group:
        place_group(st, m, m.srv.cpus)


def rotate_places(st, group, rep):
    """--rotate-cpus, before repeat `rep`: every server of the group onto
    the CPU set rotated_place gives it, so that over as many repeats as
    there are sets each build is measured on each place. A server's place
    is its launch set's index in the pinned sets."""
    sets = st.server_cpus
    for m in group:
        index = sets.index(m.srv.cpus)
        place_group(st, m, sets[rotated_place(index, rep, len(sets))])
    st.log(f"  rep {rep}: " + ", ".join(f"{m.tag} on {cpu_list(m.cpus_now)}" for m in group))


def survives(st, m, group, what, measure):
    """measure() of one server of a side-by-side group. A server that fails
    it (unpatched 0.5.12.post1 stops at its first decode of a topk-4 tree
    on spec v2) is an error of its own, with whether its process exited; it
    is stopped and leaves the group, and the servers beside it go on."""
    try:
        measure()
    except Exception as e:
        try:  # a scheduler's crash takes the server down within seconds
            rc = m.srv.proc.wait(timeout=10) if m.srv.proc is not None else None
        except subprocess.TimeoutExpired:
            rc = None
        fate = "its process exited" if rc is not None else "its process was still running"
        leave_group(st, m, group, f"{what}: {e} ({fate})")


def leave_group(st, m, group, why):
    """Server m failed: an error of its own; it is stopped and leaves group."""
    st.errors.append(f"{m.tag}: {why}"[:2000])
    st.log(f"ERROR {m.tag}: {why}")
    m.srv.stop()
    group.remove(m)


def greedy_check(st, opts: RunOptions, m):
    m.srv.reset_spec_counters()
    t0 = time.time()
    ids, acc = greedy.generate(m.srv.url, st.prompts, opts.greedy_new_tokens,
                               fake_bootstrap=opts.disaggregation_decode)
    st.greedy_out[m.greedy_key] = ids
    st.greedy_meta[m.greedy_key] = acc
    counts = truth_counts(m)
    if counts:
        st.greedy_debug[m.greedy_key] = counts
        st.log(f"  {m.tag}: seq_lens truth check {counts}")
    st.log(f"  {m.tag}: greedy {len(ids)}x{opts.greedy_new_tokens} in {time.time() - t0:.1f}s"
           f", accept length {acc}")
    if opts.greedy_logprobs:
        # evidence, not a gate: a server that cannot give them still measures
        try:
            st.greedy_logprobs[m.greedy_key] = greedy.top_logprobs(
                m.srv.url, st.prompts, opts.greedy_new_tokens, opts.greedy_logprobs,
                fake_bootstrap=opts.disaggregation_decode)
        except Exception as e:
            st.greedy_logprob_errors[m.greedy_key] = f"{type(e).__name__}: {e}"[:300]
            st.log(f"  {m.tag}: greedy logprobs failed: {e}")


def truth_counts(m):
    """The server's seq_lens truth-check counts since its start, {} when it
    keeps none (SGLANG_DEBUG_CHECK_SEQ_LENS_TRUTH=1 on a patched build)."""
    state = m.srv.internal_state()
    return {k: state[k] for k in ("seq_lens_truth_checks", "seq_lens_truth_violations")
            if k in state}


def mixed_check(st, opts: RunOptions, m, vocab):
    """--mixed-load: new prompts prefill on one DP rank while the others
    decode long generations (benchmark/mixed.py), outputs against the chain,
    then liveness -> one "mixed_load" record."""
    # its own deadline within the call's, leaving time for its long
    # generations to end and the results to be written
    budget = min(opts.mix_deadline_s, st.time_left() - 60)
    if budget < 20:
        st.log(f"  deadline: no mixed load on {m.tag}")
        st.errors.append(f"mixed load not run (deadline): {m.tag}")
        return
    try:
        out = mixed.run(m.srv.port, opts.dp, vocab, st.fmap, decodes=opts.mix_decodes,
                        decode_tokens=opts.mix_decode_tokens, want=opts.mix_prompts,
                        prompt_len=opts.mix_prompt_len, new_tokens=opts.mix_new_tokens,
                        deadline_s=budget, log=st.log)
    except Exception as e:
        out = {"errors": [f"{type(e).__name__}: {e}"[:300]]}
    alive, health = m.srv.alive()
    var, be, ov, spec, pw = m.greedy_key
    entry = {"variant": var, "attention_backend": be, "speculative": spec, "overlap": ov,
             "piecewise_cuda_graph": pw, **deployment_fields(opts), **out,
             "alive": alive, "health_status": health, **truth_counts(m)}
    st.mixed.append(entry)
    st.log(f"  {m.tag}: mixed load {out.get('prompts')} prompts ({out.get('overlapped')} "
           f"while the other ranks decoded, per rank {out.get('prompts_per_rank')}), off "
           f"chain {out.get('prompts_off_chain')}; {out.get('long_generations')} long "
           f"generations, off chain {out.get('long_off_chain')}; alive {alive}")
    for e in out.get("errors", []):
        st.errors.append(f"mixed load {m.tag}: {e}"[:2000])
    if not alive:
        st.errors.append(f"mixed load {m.tag}: server not alive after the mixed load")
    off = (out.get("prompts_off_chain") or 0) + (out.get("long_off_chain") or 0)
    if off:
        st.errors.append(f"mixed load {m.tag}: {off} outputs off the constructed chain")
    if out.get("overlapped", 0) < opts.mix_prompts:
        st.errors.append(f"mixed load {m.tag}: {out.get('overlapped', 0)} of "
                         f"{opts.mix_prompts} prompts served while the other ranks decoded")
    st.write()


def greedy_off_chain(st, opts: RunOptions, m, what):
    """One greedy pass over the check's prompts: (prompts off the chain,
    error).  Off the chain: the constructed chain from the prompt, or for a
    disaggregated decode server each token's own predecessor's (no real
    prefill made its first token); None without the token map."""
    try:
        ids, _ = greedy.generate(m.srv.url, st.prompts, opts.greedy_new_tokens,
                                 fake_bootstrap=opts.disaggregation_decode)
    except Exception as e:
        return None, f"greedy {what}: {type(e).__name__}: {e}"[:300]
    if not st.fmap:
        return None, None
    if opts.disaggregation_decode:
        return greedy.prompts_off_own_chain(ids, st.fmap), None
    return st.prompts_off_chain(ids), None


def storm_order(members, storms):
    """(storm, member) in the order the storms run: storm k goes over the
    servers starting with the k-th (mod their number), so that with several
    storms no build always storms first, right after the greedy checks, or
    last, after the others' storms warmed the machine."""
    n = len(members)
    return [(k, members[(k + i) % n]) for k in range(storms) for i in range(n)]


def fault_check(st, opts: RunOptions, m, vocab, storm):
    """--faults: a storm of clients (cut, aborted, complete; grammar ones
    with --fault-grammar-clients) with a greedy check running through it, an
    idle pause, a last greedy check, liveness. The record's retractions are
    the server's since its storm before (its first: since it started)."""
    clients = faults.make_clients(opts.fault_clients, vocab, opts.fault_new_tokens, opts.seed,
                                  grammar=opts.fault_grammar_clients, storm=storm)
    t0 = time.time()
    out = {}
    th = threading.Thread(target=lambda: out.update(faults.storm(
        m.srv.port, clients, opts.fault_deadline_s, fake_bootstrap=opts.disaggregation_decode)),
        daemon=True)
    th.start()
    time.sleep(0.1)  # the storm's clients are in flight
    during, err_during = greedy_off_chain(st, opts, m, "during the storm")
    th.join(opts.fault_deadline_s + 30)
    if not out:
        out = {"clients": len(clients), "errors": 1, "error_messages": ["storm did not end"]}
    st.log(f"  {m.tag}: fault storm {out.get('storm_s')}s: completed {out.get('completed')}, "
           f"disconnected {out.get('disconnected')}, aborted {out.get('aborted')}, grammar "
           f"exact {out.get('grammar_exact')} of {out.get('grammar_clients')}, errors "
           f"{out.get('errors')}, max silence {out.get('max_silence_s')}s, max output gap "
           f"{out.get('max_output_gap_s')}s at {out.get('output_gap_window_s')}, max ttfb "
           f"{out.get('max_ttfb_s')}s, /v1/loads slowest {out.get('loads_max_answer_s')}s "
           f"({out.get('loads_unanswered')} unanswered); greedy during: {during} off chain")
    time.sleep(opts.fault_idle_s)
    after, err_after = greedy_off_chain(st, opts, m, "after the idle pause")
    alive, health = m.srv.alive()
    retract_lines, retracted = faults.count_retractions(m.srv.log_path)
    seen_lines, seen_reqs = m.retractions_seen
    if retract_lines is not None:
        m.retractions_seen = (retract_lines, retracted)
        retract_lines, retracted = retract_lines - seen_lines, retracted - seen_reqs
    var, be, ov, spec, pw = m.greedy_key
    entry = {"variant": var, "attention_backend": be, "speculative": spec, "overlap": ov,
             "piecewise_cuda_graph": pw, **deployment_fields(opts), **out,
             "greedy_prompts": len(st.prompts),
             "prompts_off_chain_during": during, "prompts_off_chain_after": after,
             "greedy_errors": [e for e in (err_during, err_after) if e],
             "idle_s": opts.fault_idle_s, "alive": alive, "health_status": health,
             "retractions": retract_lines, "retracted_requests": retracted,
             "new_tokens": opts.fault_new_tokens, "check_s": round(time.time() - t0, 1),
             "storm": storm,
             # since the server started: the greedy checks, the storm and the idle pause
             **truth_counts(m)}
    st.faults.append(entry)
    st.log(f"  {m.tag}: storm {storm}, after {opts.fault_idle_s:g}s idle: greedy {after} off "
           f"chain, alive {alive} (/health {health}), retractions {retract_lines} "
           f"({retracted} requests)")
    for e in entry["greedy_errors"]:
        st.errors.append(f"faults {m.tag}: {e}")
    if not alive:
        st.errors.append(f"faults {m.tag}: server not alive after the storm and idle pause")
    st.write()


# What a server logs once its target model's CUDA graphs are captured, or
# once it serves (a server without CUDA graphs logs no capture).
CAPTURE_DONE = ("Capture cuda graph end", "The server is fired up")


def start_gate(st, opts: RunOptions, m):
    """Side by side, the next server starts once server m has captured its
    CUDA graphs (or serves, or has failed). The capture's first batch size
    is where a fresh server JIT-compiles its kernels (flashinfer, sglang's
    tvm-ffi modules: benchmark/results/2026-11-27-h100x2-probes/); servers
    doing it at the same time took 195 to 399 s for it on an H100 x4
    (2026-11-27-h100x4-probes/), one after another 67 to 79 s each on an
    H100 x2, and a later server finds the kernels the first one compiled
    (lib.sh, share_site). The model's imports still overlap.
    --start-together starts them all at once, 3 s apart (no two start-ups
    pick ports in the same instant)."""
    t0 = time.time()
    spacing = pace.start_spacing_s()
    if opts.start_together:
        time.sleep(spacing)
        return
    why = m.srv.wait_for_log(CAPTURE_DONE, start_timeout(st))
    st.log(f"  {m.tag}: {why or 'no capture end'} after {time.time() - t0:.0f}s, "
           "the next server starts")
    time.sleep(max(0.0, spacing - (time.time() - t0)))


def start_timeout(st, longest=900, margin=20):
    """Seconds a server may take to start: at most `longest`, and never past
    the call's deadline less `margin`, so a start-up that hangs (seen: four
    TP=4 servers side by side on four GPUs, none ready after nine minutes)
    still leaves time to write the results and the logs."""
    return pace.start_timeout_s(max(10.0, min(longest, st.time_left() - margin)))


def profile_order(members, opts: RunOptions):
    """(concurrency, with_stack, member) of the profiles to take: for each
    concurrency, the plain trace of every server, then the stack traces."""
    kinds = [(False, opts.profile_steps), (True, opts.profile_stack_steps)]
    return [(c, with_stack, m) for c in opts.profile_concurrency
            for with_stack, steps in kinds if steps for m in members]


def profile_point(st, opts: RunOptions, m, c, with_stack, vocab):
    steps = opts.profile_stack_steps if with_stack else opts.profile_steps
    kind = "stack" if with_stack else "gpu"
    t0 = time.time()
    try:
        out = os.path.join(opts.work_dir, "profiles")
        if opts.profile_arrivals:  # requests arriving: the window holds their prefills
            traces = profiling.capture_arrivals(
                m.srv.url, out, steps, with_stack, c, vocab, input_len=opts.input_len,
                output_len=opts.output_len, ranks=opts.tp,
                fake_bootstrap=opts.disaggregation_decode)
            where, opening, mode = {"arrivals": True}, "with requests arriving", "-arrivals"
        else:
            traces, start = profiling.capture(
                m.srv.url, out, steps, with_stack, c, vocab, input_len=opts.input_len,
                ranks=opts.tp, fake_bootstrap=opts.disaggregation_decode)
            where = {"window_start_tokens": start}
            opening, mode = f"from {start[0]}-{start[1]} tokens decoded", ""
        summaries = {}
        for rank, trace in traces.items():
            rk = "" if opts.tp == 1 else f"-rank{rank}"
            name = f"{m.tag}-c{c}{mode}-{kind}{rk}.trace.json.gz"
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
                            **deployment_fields(opts), "rank": rank, "with_stack": with_stack,
                            "trace": name, **where, **summary})
        st.log(f"  {m.tag} c={c} rank {rank}: profile ({kind}, {steps} forwards {opening}, "
               f"{time.time() - t0:.0f}s): "
               f"{summary['window_us_per_step']:.0f} us/forward, GPU busy "
               f"{summary['gpu_busy_us_per_step']:.0f} us, idle {summary['gpu_idle_us_per_step']:.0f} us, "
               f"D2H copies {summary['device_to_host_copies_per_step']}, host syncs "
               f"{summary['host_sync_calls_per_step']} ({summary['host_sync_us_per_step']:.0f} us)")
    st.write()


def client_env(st, m):
    """The environment m's bench points run in: m's own, so its build's
    bench_serving times it, or with --one-client the first build's, so one
    client times every server and a difference between two builds'
    clients (0.5.17's parses each streamed chunk with orjson, 0.5.12.post1's
    with json) stays out of their ratio."""
    return st.client.env if st.client else m.env


def bench_point(st, opts: RunOptions, m, rep, c, target, vocab):
    srv = m.srv
    first = c not in m.nprompts  # this repeat checks the probe's count
    if first:
        # twice: the first pass at a new batch size runs cold
        probe = (srv.url, c, opts.input_len, opts.output_len, vocab, opts.disaggregation_decode)
        probe_throughput(*probe)
        tps = probe_throughput(*probe)
        m.nprompts[c] = sizing.from_probe(tps, opts.output_len, c, opts.min_seconds)
        st.log(f"  {m.tag} c={c}: probe {tps:.0f} tok/s -> {m.nprompts[c]} prompts")
    out = os.path.join(opts.work_dir, f"bench-{m.tag}-c{c}-r{rep}.jsonl")
    if os.path.exists(out):
        os.remove(out)
    sample, bcmd = run_bench(st.runner, srv, client_env(st, m), opts, target, c, m.nprompts[c], out)
    if not any("bench_serving" in x for x in st.commands):
        st.commands.append(bcmd)  # one example; the others differ in port/prompts
    dur = sample.get("duration_s") or 0
    resize = sizing.after_first if first else sizing.grown
    m.nprompts[c] = resize(m.nprompts[c], c, dur, opts.min_seconds)
    if sizing.is_short(dur, opts.min_seconds) and st.time_left() > 30:
        # every kept repeat lasts >= min_seconds: measure this one again
        st.log(f"  {m.tag} rep {rep} c={c}: {dur:.1f}s < {opts.min_seconds:g}s, "
               f"again with {m.nprompts[c]} prompts")
        os.remove(out)
        sample, _ = run_bench(st.runner, srv, client_env(st, m), opts, target, c,
                              m.nprompts[c], out)
        m.nprompts[c] = sizing.grown(m.nprompts[c], c, sample.get("duration_s") or 0,
                                     opts.min_seconds)
    sample["rep"] = rep  # pairs it with the other builds' same repeat (results.paired_ratios)
    if opts.rotate_cpus and m.cpus_now:
        sample["cpus"] = cpu_list(m.cpus_now)  # this repeat's place (rotate_places)
    st.samples.setdefault(m.run_key(c), []).append(sample)
    st.log(f"  {m.tag} rep {rep} c={c}: TPOT {sample['tpot_ms']:.3f} ms ITL "
           f"{sample['itl_ms']:.3f} ms {sample['output_tok_per_s']:.0f} tok/s "
           f"accept {sample['accept_length']} ({sample['duration_s']:.1f}s)")
    st.write()
