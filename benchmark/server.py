"""Start and stop one `python -m sglang.launch_server` on 127.0.0.1.

The server runs in its own process session so that stopping it by its PID
(SIGTERM to its process group, then SIGKILL) also ends the scheduler and
detokenizer processes it spawned, and nothing else.  Standard library only.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pace
from cpus import pin_child


def port_is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port(start=30000):
    for port in range(start, start + 200):
        if port_is_free(port):
            return port
    raise RuntimeError("no free port")


# A server's torch.distributed store listens on --nccl-port. Without one,
# sglang takes a port the kernel hands out (bind to port 0) and listens on it
# seconds later: servers started together open many sockets meanwhile (NCCL's
# bootstrap, every TP rank's), and one may be given that very port, so the
# store fails with EADDRINUSE and its server exits. e2e.py gives each server
# HTTP port + NCCL_PORT_DELTA, a fixed port below the kernel's ephemeral range.
NCCL_PORT_DELTA = 5


def server_ports(start, used=()):
    """(HTTP port, NCCL port): the first port from `start` up that is free,
    not in `used`, and whose port + NCCL_PORT_DELTA is free and not in
    `used` either."""
    port = start
    while True:
        port = free_port(port)
        nccl = port + NCCL_PORT_DELTA
        if port not in used and nccl not in used and port_is_free(nccl):
            return port, nccl
        port += 1


def lines_with(log_path, *needles):
    """The lines of a log file that contain any of `needles`, in order, or
    None where the file cannot be read."""
    try:
        with open(log_path, errors="replace") as fh:
            return [line for line in fh if any(n in line for n in needles)]
    except OSError:
        return None


# patch 0008's start-up line: "sglpatch: <series>; per-step seq_lens host pull ..."
SGLPATCH_LINE = "sglpatch: "


def sglpatch_line(log_path):
    """What a patched scheduler said at start about the series and the
    seq_lens host pull (the text after "sglpatch: " on rank 0's line), or
    None: unpatched, or a series without that line."""
    for line in lines_with(log_path, SGLPATCH_LINE) or []:
        if "seq_lens host pull" in line:
            return line[line.find(SGLPATCH_LINE) + len(SGLPATCH_LINE):].strip()
    return None


# sglang's scheduler logs each prefill batch it runs (rank 0's line), with
# whether the batch ran in a (piecewise) CUDA graph:
# "Prefill batch, #new-seq: 1, ..., cuda graph: False, input throughput ..."
# ("Prefill batch [N], ..." where it numbers the forwards)
PREFILL_LINE = "Prefill batch"
PREFILL_GRAPH = "cuda graph: "


def prefill_graph_counts(log_path):
    """How many prefill batches the server's log says ran in a CUDA graph
    and how many ran without one: {"prefill_batches_with_graph": n,
    "prefill_batches_without_graph": m}, or None where the log names none."""
    counts = {True: 0, False: 0}
    for line in lines_with(log_path, PREFILL_LINE) or []:
        i = line.find(PREFILL_GRAPH)
        said = line[i + len(PREFILL_GRAPH):].split(",", 1)[0].strip() if i >= 0 else ""
        if said in ("True", "False"):
            counts[said == "True"] += 1
    if not counts[True] and not counts[False]:
        return None
    return {"prefill_batches_with_graph": counts[True],
            "prefill_batches_without_graph": counts[False]}


# which models' prefills a server captured CUDA graphs for, as its start says:
# the series (0023, and the trial pcg-eagle-draft-prefill) in the piecewise
# runner's words, upstream releases from 0.5.17 in their capture lines
PREFILL_GRAPH_ROLES = (
    ("target", ("Piecewise CUDA graph serves the EAGLE target's prefill",
                "Capture target prefill CUDA graph begin")),
    ("draft", ("Piecewise CUDA graph serves the EAGLE3 draft's prefill",
               "Capture draft prefill CUDA graph begin")),
)


def prefill_graphs_captured(log_path):
    """["target"], ["target", "draft"], ...: the EAGLE models whose prefill
    the server's log says it captured graphs for, or None where it names
    none (an EAGLE target of 0.5.12.post1 captures with the wrong hidden
    states mode and serves none)."""
    found = lines_with(log_path, *(n for _, needles in PREFILL_GRAPH_ROLES for n in needles))
    roles = [role for role, needles in PREFILL_GRAPH_ROLES
             if any(n in line for line in found or [] for n in needles)]
    return roles or None


def http_json(url, payload=None, timeout=600):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    return json.loads(body) if body else None


DEFAULT_BACKEND = "default"
# speculative algorithms a server can run, besides "none": EAGLE3 with the
# pair's draft, EAGLE (v1) with the draft make_models writes beside it
SPEC_ALGORITHMS = ("EAGLE3", "EAGLE")


def eagle_draft(draft):
    """The EAGLE (v1) draft beside the EAGLE3 draft `draft` (make_models.py
    --eagle-draft: MODELS/draft-eagle), and its token map for FR-Spec."""
    d = os.path.join(os.path.dirname(draft), "draft-eagle")
    return d, os.path.join(d, "token_map.pt")


def server_command(python, target, draft, port, attention_backend, speculative,
                   overlap, piecewise, tp=1, spec_steps=3, topk=1, draft_tokens=4,
                   mem_fraction=None, max_total_tokens=None, extra=(), dp=1,
                   dp_attention=False, token_map=False, grammar=False, nccl_port=None):
    """The launch_server command of one server. `speculative`: EAGLE3,
    EAGLE (the EAGLE draft beside `draft`, eagle_draft) or none; token_map:
    with EAGLE, FR-Spec (--speculative-token-map, the draft's hot tokens);
    grammar: the xgrammar backend, for requests with a regex (the 0.5.12.post1
    kit carries xgrammar; the others, but 0.5.17's, do not); nccl_port: the
    port of its torch.distributed store (NCCL_PORT_DELTA), None: sglang's
    own pick, which DP replicas without DP attention keep."""
    cmd = [python, "-m", "sglang.launch_server", "--model-path", target,
           "--host", "127.0.0.1", "--port", str(port), "--tp", str(tp),
           # "default": no flag, the backend sglang picks (fa3 on Hopper for
           # these Llama-style models with EAGLE topk 1, flashinfer elsewhere)
           *(() if attention_backend == DEFAULT_BACKEND else
             ("--attention-backend", attention_backend)),
           # the pytorch sampler needs no JIT; no grammar backend unless asked
           "--sampling-backend", "pytorch",
           "--grammar-backend", "xgrammar" if grammar else "none",
           "--dtype", "bfloat16", "--random-seed", "0",
           # concurrency <= 32 in the benchmark: capture no larger graphs
           "--cuda-graph-max-bs", "32", "--max-running-requests", "48"]
    # replicas of DP without DP attention are process groups of their own:
    # sglang gives each a store port (PortArgs.init_new per replica), and a
    # --nccl-port would be every replica's, so the second could not bind it
    if nccl_port is not None and (dp <= 1 or dp_attention):
        cmd += ["--nccl-port", str(nccl_port)]
    if speculative in SPEC_ALGORITHMS:
        eagle, hot = eagle_draft(draft)
        cmd += ["--speculative-algorithm", speculative,
                "--speculative-draft-model-path", eagle if speculative == "EAGLE" else draft]
        if token_map and speculative == "EAGLE":  # sglang's EAGLE3 ignores a token map
            cmd += ["--speculative-token-map", hot]
        if spec_steps is not None:  # None: sglang's own choice (e2e --spec-auto)
            cmd += ["--speculative-num-steps", str(spec_steps),
                    "--speculative-eagle-topk", str(topk),
                    "--speculative-num-draft-tokens", str(draft_tokens)]
    if dp > 1:
        # data parallelism: with DP attention, dp attention groups within the
        # --tp GPUs (tp must be a multiple of dp); without, dp replicas of TP=tp
        cmd += ["--dp-size", str(dp)]
    if dp_attention:
        cmd.append("--enable-dp-attention")
    if not overlap:
        cmd.append("--disable-overlap-schedule")
    if not piecewise:
        cmd.append("--disable-piecewise-cuda-graph")
    if mem_fraction:
        cmd += ["--mem-fraction-static", str(mem_fraction)]
    if max_total_tokens:
        # a fixed KV pool: servers that share one GPU do not each size
        # theirs from the memory the others happen to leave free
        cmd += ["--max-total-tokens", str(max_total_tokens)]
    return cmd + list(extra)


def process_title(cmdline):
    """A process's title from its /proc cmdline (bytes): the first word.
    setproctitle writes the title over argv, NUL- or space-padded."""
    words = cmdline.replace(b"\0", b" ").split()
    return words[0].decode(errors="replace") if words else ""


def group_processes(pgid, proc="/proc"):
    """[(pid, ppid, title)] of the live (not zombie) processes of process group
    `pgid`, by pid."""
    out = []
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as fh:
                stat = fh.read()
            with open(os.path.join(proc, name, "cmdline"), "rb") as fh:
                cmdline = fh.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2:].split()
        state, ppid, pgrp = fields[0], int(fields[1]), int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            out.append((int(name), ppid, process_title(cmdline)))
    return sorted(out)


def group_threads(pgid, proc="/proc"):
    """The thread ids of every live process of group `pgid` (a server
    launched in a session of its own, with the schedulers and detokenizer
    it forked), as /proc lists them now."""
    tids = []
    for pid, _, _ in group_processes(pgid, proc):
        try:
            tids += [int(t) for t in os.listdir(os.path.join(proc, str(pid), "task"))]
        except OSError:  # gone since the listing
            continue
    return tids


def move_group(pgid, cpus):
    """Every thread of process group `pgid` onto `cpus` (--rotate-cpus); the
    threads and processes they start later inherit it. Returns how many
    threads moved (one that ended meanwhile is skipped)."""
    moved = 0
    for tid in group_threads(pgid):
        try:
            os.sched_setaffinity(tid, cpus)
            moved += 1
        except (ProcessLookupError, FileNotFoundError):
            continue
    return moved


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_group(proc):
    """Stop a server's process group: SIGTERM, then SIGKILL, each given 30 s
    for the launcher (`proc`, a Popen or KeptProcess) to exit, then what is
    left of the group."""
    pgid = proc.pid  # start_new_session: the group id is the launcher's PID
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # children may outlive the launcher for a moment; reap the group
    for _ in range(20):
        if not group_alive(pgid):
            break
        time.sleep(pace.poll_s(0.5))
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class KeptProcess:
    """The launcher of a server an earlier run kept (benchmark/keep.py), seen
    from a later run: enough of Popen (pid, poll, wait, returncode) for
    Server to wait on and stop it. Not our child: it has exited once its
    process group is gone, and its exit status is not ours to read."""

    def __init__(self, pgid):
        self.pid = pgid
        self.returncode = None

    def poll(self):
        if self.returncode is None and not group_alive(self.pid):
            self.returncode = 0
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.time() + timeout
        while self.poll() is None:
            if deadline is not None and time.time() >= deadline:
                raise subprocess.TimeoutExpired("kept server", timeout)
            time.sleep(pace.poll_s(0.2))
        return self.returncode


class Server:
    """Context manager: launch, wait until it serves, stop by PID."""

    def __init__(self, cmd, env, log_path, start_timeout=900, cpus=None):
        self.cmd, self.env, self.log_path = cmd, env, log_path
        self.start_timeout = start_timeout
        self.cpus = cpus  # logical CPUs the server's processes may run on, or None
        self.port = int(cmd[cmd.index("--port") + 1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.log = None
        self.start_s = None
        self.adopted = False  # launched by an earlier run (adopt)
        self.launched_at = None  # time.time() at the launch, that run's or ours
        self.start_spans_calls = False  # start_s runs from an earlier run's launch

    def __enter__(self):
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def launch(self):
        """Start the process and return at once (several servers can then
        start side by side); wait_ready() waits for it to serve."""
        self._t0 = self.launched_at = time.time()
        self.log = open(self.log_path, "w")
        self.log.write(" ".join(self.cmd) + "\n")
        self.log.flush()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=pin_child(self.cpus))
        # Poll for readiness from now on, not from whenever wait_ready() is
        # called: side by side, the first server's wait_ready() comes only
        # after the later servers were launched and gated, and its start
        # would count their time too (288 s for a server that served after
        # ~187 s, H100 x2). The start timeout counts from the launch as well.
        self._ready = threading.Event()
        self._ready_at, self._ready_error = None, None
        threading.Thread(target=self._watch_ready, name=f"ready-{self.port}",
                         daemon=True).start()
        return self

    def _watch_ready(self):
        try:
            self._wait_ready()
            self._ready_at = time.time()
        except Exception as e:  # handed to wait_ready(), which raises it
            self._ready_error = e
        finally:
            self._ready.set()

    def wait_for_log(self, needles, timeout, poll_s=0.5):
        """Waits until the server's log holds one of `needles`, the process
        has exited, or `timeout` seconds have passed: the needle found,
        "exited" or None. Reads only what the log gained since the last look
        (a start-up's progress bars make it long)."""
        deadline = time.time() + timeout
        keep = max(len(n) for n in needles)
        seen, offset = "", 0
        while True:
            with open(self.log_path, errors="replace") as fh:
                fh.seek(offset)
                new = fh.read()
                offset = fh.tell()
            seen = seen[-keep:] + new  # a needle may straddle two reads
            found = next((n for n in needles if n in seen), None)
            if found:
                return found
            if self.proc.poll() is not None:
                return "exited"
            if time.time() >= deadline:
                return None
            time.sleep(pace.poll_s(poll_s))

    def adopt(self, pgid, start_s, launched_at=None):
        """Take over a server an earlier run launched and kept
        (benchmark/keep.py): its process group, and its own start time
        (None for one still starting then: wait_ready() counts it from
        `launched_at`, that run's launch)."""
        self.proc = KeptProcess(pgid)
        self._t0 = time.time()
        self.start_s, self.launched_at = start_s, launched_at
        self.adopted = True
        return self

    def wait_ready(self):
        """Returns once the server serves; start_s is then the seconds from
        its launch until it first did (an adopted server keeps the start
        time of the run that launched it). Raises what the readiness poll
        met: the server exited (with its log's tail), or the timeout."""
        if self.adopted:
            self._wait_ready()  # still serving? its start was another run's
            if self.start_s is None and self.launched_at is not None:
                # it was still starting when that run's time ran out: from
                # its launch to this look, at most the gap between the runs more
                self.start_s = time.time() - self.launched_at
                self.start_spans_calls = True
            return self
        self._ready.wait()
        if self._ready_error is not None:
            raise self._ready_error
        self.start_s = self._ready_at - self._t0
        return self

    def _wait_ready(self):
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; "
                                   f"log: {self.log_path}\n{tail(self.log_path)}")
            try:
                # /health_generate runs one real decode: ready means serving
                urllib.request.urlopen(self.url + "/health_generate", timeout=30).read()
                return
            except (urllib.error.URLError, ConnectionError, socket.timeout, OSError):
                time.sleep(pace.poll_s(1))
        raise TimeoutError(f"server not ready in {self.start_timeout}s; log: {self.log_path}")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        stop_group(self.proc)

    def __exit__(self, *exc):
        self.stop()
        if self.log is not None:
            self.log.close()
        return False

    def internal_state(self):
        """Scheduler rank 0's internal state (/get_server_info), {} if none."""
        try:
            info = http_json(self.url + "/get_server_info", timeout=60)
        except Exception as e:  # a debug read, not a gate
            print(f"  get_server_info failed: {e}", file=sys.stderr)
            return {}
        states = (info or {}).get("internal_states") or [{}]
        return states[0] or {}

    def alive(self):
        """(process running and its scheduler answers /get_server_info,
        the HTTP status of GET /health or the error's name)."""
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=60) as resp:
                health = resp.status
        except urllib.error.HTTPError as e:
            health = e.code
        except Exception as e:
            health = type(e).__name__
        if self.proc.poll() is not None:
            return False, health
        try:
            http_json(self.url + "/get_server_info", timeout=60)
        except Exception:
            return False, health
        return True, health

    def reset_spec_counters(self):
        """Zero the server's accept-length counters (best effort).

        sglang 0.5.12/0.5.13 reset them on a successful set_internal_state;
        the value set is the default, so nothing else changes.
        """
        try:
            http_json(self.url + "/set_internal_state",
                      {"server_args": {"speculative_accept_threshold_single": 1.0}},
                      timeout=60)
            return True
        except Exception as e:  # older/newer servers: fall back to cumulative
            print(f"  reset_spec_counters failed: {e}", file=sys.stderr)
            return False


def tail(path, n=40):
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-n:])
    except OSError:
        return ""
