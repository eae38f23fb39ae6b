"""Kill one tensor-parallel rank of a serving sglang and time the server's end.

For each build (--variant NAME=SITE, as `e2e.py run`; several run one after
another on the same GPUs) and each scenario:

  idle  the server serves, and no request is in flight
  busy  --busy-clients streamed long greedy generations are in flight, each
        past its first token

a server starts (`python -m sglang.launch_server`, launched as `e2e.py run`
launches it: benchmark/server.py, EAGLE3 by default, TP=--tp, from the model
pair `e2e.py run` builds or reuses in <work-dir>/models-<preset>), and once
it serves, the scheduler process of TP rank --kill-rank gets SIGKILL. That
process is found by its title: sglang 0.5.12.post1 names each scheduler
`sglang::scheduler` + its ranks (configure_scheduler_process, setproctitle:
`sglang::scheduler_TP1` at --tp 2, `sglang::scheduler_DP1_TP1` with DP
attention at --tp 2 --dp 2), and only processes of the server's own process
group are searched. From the kill the harness measures, up to --cap-s:

  seconds    until the launch process (the process group's leader) exits;
             exited false: it still ran at the cap ("hung")
  exit_code  the launch process's exit status (negative: killed by a signal)
  group_gone_s  until no process of the group is left (a launcher that exits
             and leaves a rank behind holds its GPU)
  left       titles of the group's processes still there when the launcher
             exited, or at the cap
  clients    busy: how the streams ended (finish event, error event, closed
             without [DONE], reset) or whether still open at the cap

and the last lines of the server's log. Then whatever is left of the group
is killed, and the next scenario starts a fresh server.

    python benchmark/kill_rank.py --variant base=/tmp/sb --variant patched=/tmp/sp \\
        --no-apply --tp 2 --scenarios idle,busy --cap-s 120 --out kill-rank.json

Output: --out, a JSON object {"card", "date", "commands", "model_preset",
"kills": [one record per variant and scenario]}, rewritten after each one.
Standard library only (the model pair is built in a child process).
"""

import argparse
import datetime
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import greedy  # noqa: E402
from builds import (apply_series, detect_card, ensure_models, parse_variant,  # noqa: E402
                    variant_env)
from server import (Server, free_port, group_processes, server_command,  # noqa: E402
                    stop_group, tail)

SCENARIOS = ("idle", "busy")
BUSY_SETTLE_S = 0.5  # busy: from every client's first token to the kill
LOG_TAIL_LINES = 40


# ---------------------------------------------------------------------------
# the server's processes, from /proc (server.group_processes)
def find_by_title(title, pgid, proc="/proc"):
    """PIDs of group `pgid`'s processes titled exactly `title`, leaving out
    those whose parent bears the title too (a helper a scheduler forked
    inherits its title; the scheduler is the one to kill)."""
    same = [(pid, ppid) for pid, ppid, t in group_processes(pgid, proc) if t == title]
    pids = {pid for pid, _ in same}
    return [pid for pid, ppid in same if ppid not in pids]


def scheduler_title(tp, rank, dp=1, dp_attention=False):
    """sglang 0.5.12.post1's title of TP rank `rank`'s scheduler
    (scheduler.py, configure_scheduler_process): " DP<d>" where a DP rank
    is set, " TP<r>" at tp > 1, spaces made underscores. With DP attention
    TP rank r serves DP rank r // (tp // dp); DP replicas number their TP
    ranks from 0 each, and the first replica's is named."""
    prefix = ""
    if dp > 1:
        prefix += f"_DP{rank // (tp // dp) if dp_attention else 0}"
    if tp > 1:
        prefix += f"_TP{rank}"
    return "sglang::scheduler" + prefix


# ---------------------------------------------------------------------------
# the busy scenario's clients
class StreamClient(threading.Thread):
    """One streamed long greedy generation; how and when its stream ended."""

    def __init__(self, port, prompt, new_tokens, timeout):
        super().__init__(daemon=True)
        self.port, self.prompt, self.new_tokens, self.timeout = port, prompt, new_tokens, timeout
        self.decoding = threading.Event()  # its first token came
        self.t_end = None
        self.outcome = None  # finished | error_event | closed | reset
        self.detail = None
        self.conn = None

    def run(self):
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        done, last = False, None
        try:
            body = json.dumps({"input_ids": self.prompt, "stream": True,
                               "sampling_params": {"temperature": 0.0, "ignore_eos": True,
                                                   "max_new_tokens": self.new_tokens}})
            self.conn.request("POST", "/generate", body.encode(),
                              {"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            if resp.status != 200:
                self.outcome, self.detail = "error_event", f"HTTP {resp.status}"
                return
            buf = b""
            while True:
                data = resp.read1(65536)
                if not data:
                    break
                *events, buf = (buf + data).split(b"\n\n")
                for ev in events:
                    if ev == b"data: [DONE]":
                        done = True
                    elif ev.startswith(b"data: "):
                        last = ev[6:]
                        self.decoding.set()
            self.outcome, self.detail = stream_outcome(done, last)
        except Exception as e:  # reset by the peer, or our own close at the cap
            self.outcome, self.detail = "reset", f"{type(e).__name__}: {e}"[:200]
        finally:
            self.t_end = time.monotonic()
            self.decoding.set()

    def close(self):
        if self.conn is not None:
            try:
                if self.conn.sock is not None:
                    self.conn.sock.shutdown(2)
            except OSError:
                pass
            self.conn.close()


def stream_outcome(done, last):
    """How a stream the server closed ended: ("finished" | "error_event" |
    "closed", detail)."""
    if last is not None:
        try:
            out = json.loads(last)
        except ValueError:
            out = {}
        if "error" in out:
            return "error_event", str(out["error"])[:200]
        fin = (out.get("meta_info") or {}).get("finish_reason") or {}
        if done and fin:
            return ("error_event" if fin.get("type") == "abort" else "finished"), \
                str(fin.get("message") or fin.get("type"))[:200]
    return "closed", "the stream ended without a finish event and [DONE]"


def decoding(clients):
    """Clients whose stream has brought a token and still runs."""
    return sum(c.decoding.is_set() and c.t_end is None for c in clients)


def clients_summary(clients, t_kill, decoding_at_kill, open_after):
    ended = [c for c in clients if c.outcome is not None and c.t_end is not None]
    counts = {}
    for c in ended:
        counts[c.outcome] = counts.get(c.outcome, 0) + 1
    return {"clients": len(clients), "decoding_at_kill": decoding_at_kill,
            "ended": counts, "open_at_cap": open_after,
            "last_end_s": (round(max(c.t_end for c in ended) - t_kill, 2) if ended else None),
            "details": sorted({c.detail for c in ended if c.detail})[:5]}


# ---------------------------------------------------------------------------
# one kill
def measure_exit(proc, pgid, cap_s, t_kill, poll_s=0.05, proc_root="/proc"):
    """After the kill at t_kill (time.monotonic()): when the launcher (`proc`,
    the group's leader) exited and when the group was gone, each within
    cap_s, and the titles left at the launcher's exit (or at the cap)."""
    exited_at = gone_at = left = None
    while True:
        now = time.monotonic() - t_kill
        if exited_at is None and proc.poll() is not None:
            exited_at = now
            left = [t for _, _, t in group_processes(pgid, proc_root)]
        if gone_at is None and not group_processes(pgid, proc_root):
            gone_at = now
        if (exited_at is not None and gone_at is not None) or now >= cap_s:
            break
        time.sleep(poll_s)
    if left is None:
        left = [t for _, _, t in group_processes(pgid, proc_root)]
    return {"exited": exited_at is not None,
            "seconds": None if exited_at is None else round(exited_at, 2),
            "exit_code": proc.returncode,
            "group_gone_s": None if gone_at is None else round(gone_at, 2),
            "left": left}


def kill_scenario(a, var, env, scenario, target, draft, port, log, deadline):
    """Start a server, kill its rank in `scenario`, measure: one record."""
    title = a.kill_title or scheduler_title(a.tp, a.kill_rank, a.dp, a.enable_dp_attention)
    rec = {"variant": var, "scenario": scenario, "tp": a.tp, "dp": a.dp,
           "dp_attention": a.enable_dp_attention, "speculative": a.speculative,
           "attention_backend": a.attention_backend, "cap_s": a.cap_s,
           "killed_title": title}
    cmd = server_command(sys.executable, target, draft, port, a.attention_backend,
                         a.speculative, True, a.piecewise == "default", tp=a.tp,
                         spec_steps=a.spec_steps, draft_tokens=a.spec_steps + 1,
                         mem_fraction=a.mem_fraction_static,
                         max_total_tokens=a.max_total_tokens, extra=a.server_arg,
                         dp=a.dp, dp_attention=a.enable_dp_attention)
    log_path = os.path.join(a.work_dir, f"kill-{var}-{scenario}.log")
    rec["log"] = os.path.basename(log_path)
    start_timeout = max(10.0, min(a.start_timeout, deadline - time.time() - a.cap_s - 30))
    srv = Server(cmd, env, log_path, start_timeout=start_timeout)
    clients = []
    log(f"{var} {scenario}: launch {' '.join(cmd[1:])}")
    try:
        srv.launch()
        rec["pgid"] = srv.proc.pid
        srv.wait_ready()
        rec["start_s"] = round(srv.start_s, 1)
        log(f"{var} {scenario}: ready in {srv.start_s:.0f}s")
        if scenario == "busy":
            prompts = greedy.make_prompts(a.busy_clients, a.vocab, seed=11)
            clients = [StreamClient(port, p, a.busy_new_tokens, a.cap_s + 120) for p in prompts]
            for c in clients:
                c.start()
            until = time.time() + 120
            for c in clients:
                c.decoding.wait(max(until - time.time(), 0))
            waiting = sum(not c.decoding.is_set() for c in clients)
            if waiting:
                rec["note"] = f"{waiting} of {len(clients)} clients had no token at the kill"
        # idle: the scheduler back in its idle loop; busy: the clients decoding
        time.sleep(a.settle_s if scenario == "idle" else BUSY_SETTLE_S)
        procs = group_processes(srv.proc.pid)
        rec["group_before"] = [t for _, _, t in procs]
        pids = find_by_title(title, srv.proc.pid)
        if len(pids) != 1:
            raise RuntimeError(f"{len(pids)} processes titled {title!r} in the server's "
                               f"group (titles: {sorted(set(rec['group_before']))}); "
                               "pass --kill-title")
        rec["killed_pid"] = pids[0]
        log(f"{var} {scenario}: SIGKILL {title} (pid {pids[0]})")
        decoding_at_kill = decoding(clients)
        t_kill = time.monotonic()
        os.kill(pids[0], signal.SIGKILL)
        rec.update(measure_exit(srv.proc, srv.proc.pid, a.cap_s, t_kill))
        if clients:
            # a client may still read a stream the launcher's exit closed: a moment
            for c in clients:
                c.join(max(0.0, min(2.0, a.cap_s - (time.monotonic() - t_kill))))
            open_after = sum(c.is_alive() for c in clients)
            rec["clients"] = clients_summary(clients, t_kill, decoding_at_kill, open_after)
        said = (f"exited after {rec['seconds']}s (code {rec['exit_code']})" if rec["exited"]
                else f"still running after {a.cap_s:g}s (hung)")
        log(f"{var} {scenario}: launcher {said}; group gone after {rec['group_gone_s']}s; "
            f"left at exit/cap: {rec['left']}")
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
        log(f"ERROR {var} {scenario}: {rec['error']}")
    finally:
        for c in clients:
            c.close()
        if srv.proc is not None:
            stop_group(srv.proc)  # whatever is left of the group, the launcher gone or not
        if srv.log is not None:
            srv.log.close()
        rec["log_tail"] = [line[:300] for line in tail(log_path, LOG_TAIL_LINES).splitlines()]
    wait_gpus_free(log)
    return rec


def wait_gpus_free(log, limit_mib=2000, timeout=60):
    """Until every visible GPU holds under limit_mib (a killed process's
    memory returns a moment after it is gone), or timeout; no nvidia-smi:
    at once."""
    deadline = time.time() + timeout
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    while True:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used",
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return
        used = {}
        for line in out.strip().splitlines():
            idx, mib = [x.strip() for x in line.split(",")]
            used[idx] = int(mib)
        if seen:
            used = {i: m for i, m in used.items() if i in seen.split(",")}
        if all(m < limit_mib for m in used.values()) or time.time() >= deadline:
            if any(m >= limit_mib for m in used.values()):
                log(f"GPU memory still in use after {timeout}s: {used} MiB")
            return
        time.sleep(1)


# ---------------------------------------------------------------------------
def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", default=None,
                    help="NAME=SITE as for e2e.py run (repeatable; default: base)")
    ap.add_argument("--no-apply", action="store_true", help="patched: already applied")
    ap.add_argument("--scenarios", default="idle,busy",
                    help="comma list of idle, busy")
    ap.add_argument("--cap-s", type=float, default=120.0,
                    help="seconds after the kill the launcher may take to exit (then: hung)")
    ap.add_argument("--kill-rank", type=int, default=1, help="the TP rank to kill")
    ap.add_argument("--kill-title", default=None,
                    help="the title of the process to kill (default: that sglang gives "
                    "the --kill-rank's scheduler)")
    ap.add_argument("--busy-clients", type=int, default=8)
    ap.add_argument("--busy-new-tokens", type=int, default=7000,
                    help="new tokens of each busy client's generation: long enough to "
                    "outlast the kill, short enough for the model's 8192-token context "
                    "(prompts of 16-160 tokens)")
    ap.add_argument("--settle-s", type=float, default=3.0,
                    help="idle: seconds between the server's readiness and the kill")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--models-dir", default=None)
    ap.add_argument("--accept-steps", type=int, default=3)
    ap.add_argument("--draft-accuracy", type=float, default=0.8)
    ap.add_argument("--spec-steps", type=int, default=3)
    ap.add_argument("--model-device", default="cuda")
    ap.add_argument("--speculative", choices=["EAGLE3", "none"], default="EAGLE3")
    ap.add_argument("--attention-backend", default="triton",
                    help="triton, fa3, ...; `default`: no flag, sglang's choice")
    ap.add_argument("--piecewise", choices=["default", "disabled"], default="default")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--enable-dp-attention", action="store_true")
    ap.add_argument("--mem-fraction-static", type=float, default=None)
    ap.add_argument("--max-total-tokens", type=int, default=None)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra launch_server argument (repeatable)")
    ap.add_argument("--port-base", type=int, default=30500)
    ap.add_argument("--start-timeout", type=float, default=900.0)
    ap.add_argument("--work-dir", default="/tmp/sglpatch-kill")
    ap.add_argument("--out", default=None, help="default: <work-dir>/kill-rank.json")
    ap.add_argument("--card", default=None)
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="start no scenario that could not end (start, cap) by then")
    return ap


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--render"]:
        for path in argv[1:]:
            render(path)
        return 0
    ap = build_parser()
    a = ap.parse_args(argv)
    scenarios = [s for s in a.scenarios.split(",") if s]
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad or not scenarios:
        ap.error(f"--scenarios: one or more of {', '.join(SCENARIOS)} (got {a.scenarios!r})")
    if a.tp < 2 and not a.kill_title:
        ap.error("--tp 2 or more: a rank to kill beside rank 0")
    if not 0 <= a.kill_rank < a.tp:
        ap.error(f"--kill-rank must be a TP rank below --tp {a.tp}")
    variants = [parse_variant(v) for v in (a.variant or ["base"])]
    t0 = time.time()
    deadline = t0 + (a.deadline_s if a.deadline_s is not None else 1e9)
    os.makedirs(a.work_dir, exist_ok=True)
    out_path = a.out or os.path.join(a.work_dir, "kill-rank.json")

    def log(msg):
        print(f"[{time.time() - t0:7.1f}s] {msg}", flush=True)

    models, meta = ensure_models(a, log)
    a.vocab = meta["vocab"]
    target, draft = os.path.join(models, "target"), os.path.join(models, "draft")
    data = {"card": a.card or detect_card(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "model_preset": a.preset, "model": meta,
            "commands": ["python benchmark/kill_rank.py " + " ".join(argv)],
            "kills": []}
    rc = 0
    n = 0
    for var, site in variants:
        env = variant_env(site, a.work_dir)
        if var == "patched" and not a.no_apply:
            try:
                log("sglpatch status:\n" + apply_series(site, env, log))
            except Exception as e:
                data["kills"] += [{"variant": var, "scenario": s, "error": str(e)}
                                  for s in scenarios]
                rc = 1
                continue
        for scenario in scenarios:
            if deadline - time.time() < a.cap_s + 90:
                log(f"deadline: {var} {scenario} not run")
                data["kills"].append({"variant": var, "scenario": scenario,
                                      "error": "not run (deadline)"})
                rc = 1
                continue
            port = free_port(a.port_base + 10 * n)
            n += 1
            rec = kill_scenario(a, var, env, scenario, target, draft, port, log, deadline)
            rc |= "error" in rec
            data["kills"].append(rec)
            write(out_path, data)
    write(out_path, data)
    for r in data["kills"]:
        print(summary_line(r))
    return rc


def summary_line(r):
    if "error" in r:
        return f"kill {r['variant']} {r['scenario']}: ERROR {r['error'][:200]}"
    end = (f"launcher exited after {r['seconds']}s, code {r['exit_code']}" if r["exited"]
           else f"launcher still running after {r['cap_s']:g}s (hung)")
    gone = r.get("group_gone_s")
    out = f"kill {r['variant']} {r['scenario']}: {end}; group gone " + \
        (f"after {gone}s" if gone is not None else "not by the cap")
    if r.get("clients"):
        c = r["clients"]
        out += f"; clients {c['ended']}, open {c['open_at_cap']}"
    return out


def render(path):
    """PATH.json (this script's output) -> PATH.md, a page of its numbers."""
    with open(path) as fh:
        data = json.load(fh)
    name = os.path.basename(path)
    lines = ["<!-- generated by `python benchmark/kill_rank.py --render`; do not edit -->", "",
             f"# {name}", "",
             f"Rendered from [`{name}`]({name}); every number below is in that file.", "",
             f"- card: {data['card']}", f"- date: {data['date']} (UTC)",
             f"- model preset: `{data['model_preset']}`", "",
             "TP rank 1's scheduler gets SIGKILL once the server serves (idle: no "
             "request in flight; busy: streamed greedy generations in flight). Seconds "
             "until the launch process exits, and until no process of its group is left.",
             "", "| build | scenario | tp | backend | launcher exited after s | exit code "
             "| group gone after s | left | busy clients' ends |", "|---|---|---|---|---|---|---|---|---|"]
    for r in data["kills"]:
        if "error" in r:
            lines.append(f"| {r['variant']} | {r['scenario']} | | | error: {r['error']} | | | | |")
            continue
        ends = r.get("clients", {}).get("ended", "")
        exited = r["seconds"] if r["exited"] else f"running at the {r['cap_s']:g} s cap"
        lines.append(f"| {r['variant']} | {r['scenario']} | {r['tp']} | {r['attention_backend']} "
                     f"| {exited} | {r['exit_code']} | {r.get('group_gone_s')} "
                     f"| {len(r.get('left') or [])} | {ends} |")
    lines += ["", "## Commands", ""] + [f"    {c}" for c in data.get("commands", [])]
    with open(os.path.splitext(path)[0] + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")


def write(path, data):
    tmp = path + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
