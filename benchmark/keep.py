"""Servers that outlive a call: `e2e.py run --side-by-side --keep-servers`.

On the GPU machine a process that started its own session (every server
does: Server.launch) runs on after the call's command returns, until the
machine goes back. A server takes 100 to 500 s to start and a call lasts
ten minutes, so the next call on the warm machine can measure the same
servers again instead of starting them anew. The run that keeps its
servers lists them in WORK/kept-servers.json, with those still starting
when its time ran out (a start-up longer than a call is then paid once);
the next run adopts each one whose launch is the same (`fingerprint`) and
still runs, waits for it to serve, and stops
every other one first, so no stale server holds GPU memory beside the new
ones. A run without --keep-servers stops them all at its start.
A run goes through KeptServers, with each server's fingerprint.

    python3 benchmark/keep.py prune-logs WORK

deletes the logs under WORK (and WORK/pair*/) of an earlier call, except
those the kept servers still write.
"""

import glob
import hashlib
import json
import os
import sys

from server import KeptProcess, group_alive, stop_group

REGISTRY = "kept-servers.json"
# the environment that changes what a server runs (its site, its GPUs,
# the project's probes, sglang's debug switches)
_ENV_KEYS = ("PYTHONPATH", "CUDA_VISIBLE_DEVICES")
_ENV_PREFIXES = ("SGLPATCH_", "SGLANG_")
# but the harness's own pacing (benchmark/pace.py), which no server reads
_ENV_HARNESS = "SGLPATCH_BENCH_"


def _site_identity(env):
    """The site the server imports from, as a directory identity: a site
    made anew (rm -rf, then a copy) gets another inode, one that had files
    added another mtime."""
    site = (env.get("PYTHONPATH") or "").split(os.pathsep)[0]
    try:
        st = os.stat(site)
    except OSError:
        return None
    return [site, st.st_ino, st.st_mtime_ns]


def fingerprint(tag, cmd, env, cpus=None):
    """What makes two launches the same server: its name in the run (the
    build and setting), the command without its port, the environment
    that matters, the site's identity and the CPUs it may use."""
    portless = list(cmd)
    if "--port" in portless:
        portless[portless.index("--port") + 1] = "PORT"
    keep_env = {k: v for k, v in sorted(env.items())
                if (k in _ENV_KEYS or k.startswith(_ENV_PREFIXES))
                and not k.startswith(_ENV_HARNESS)}
    blob = json.dumps([tag, portless, keep_env, _site_identity(env),
                       sorted(cpus) if cpus else None])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load(work_dir):
    path = os.path.join(work_dir, REGISTRY)
    try:
        with open(path) as fh:
            records = json.load(fh)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: not a kept-servers list ({e}); delete it to go on")
    if not isinstance(records, list):
        raise SystemExit(f"{path}: not a kept-servers list; delete it to go on")
    return records


def save(work_dir, records):
    path = os.path.join(work_dir, REGISTRY)
    if not records:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path + ".tmp", "w") as fh:
        json.dump(records, fh, indent=1)
    os.replace(path + ".tmp", path)


def stop(pgid):
    """Stop a kept server by its process group (server.stop_group)."""
    stop_group(KeptProcess(pgid))


class KeptServers:
    """One run's dealings with kept servers: at its start it takes those an
    earlier run kept (take), as its groups serve it adopts them (record_for,
    adopt) and lists the ones it keeps in turn (keep), and at its end it
    stops those none of its groups adopted (stop_unadopted). A member is
    one of the run's servers: its `tag`, launch `fingerprint` and `srv`
    (server.Server)."""

    def __init__(self, work_dir, log):
        self.work_dir, self.log = work_dir, log
        self.by_fingerprint = {}  # the records this run may adopt, by fingerprint
        self.records = []  # the servers this run keeps for the next

    def take(self, wanted):
        """Servers an earlier run kept: those whose launch is one of the
        fingerprints `wanted` (this run's servers, with --keep-servers) and
        that still run are held for adoption; every other one is stopped
        now, before this run's servers need the GPU."""
        for r in load(self.work_dir):
            if (r.get("fingerprint") in wanted and r["fingerprint"] not in self.by_fingerprint
                    and group_alive(r["pgid"])):
                self.by_fingerprint[r["fingerprint"]] = r
            else:
                self.log(f"stop the server an earlier run kept: {r.get('tag')} "
                         f"(port {r.get('port')})")
                stop(r["pgid"])
                if r.get("log_path") and os.path.exists(r["log_path"]):
                    os.remove(r["log_path"])  # an earlier call's: not this run's evidence
        save(self.work_dir, [])  # rewritten as this run keeps its servers

    def record_for(self, fingerprint):
        """The record of the kept server a member with this launch would
        reuse, None for none."""
        return self.by_fingerprint.get(fingerprint)

    def adopt(self, m):
        """Member m's server is the kept one of its launch: taken from the
        list (one left there when its group fails is stopped at the end of
        the run) and adopted as m.srv."""
        kept = self.by_fingerprint.pop(m.fingerprint)
        m.srv.adopt(kept["pgid"], kept["start_s"], kept.get("launched_at"))
        self.log(f"reuse {m.tag}: the server an earlier run kept (port {kept['port']})")

    def keep_starting(self, m, kept_now):
        """--keep-servers: member m's server was still starting when the
        run's time ran out. It runs on, listed with no start time and its
        launch's, and the next run adopts it once it serves: a start-up
        longer than one call (six TP=2 servers at once, say) is paid once
        instead of being stopped and started again in every call."""
        self._list(m, kept_now, "starting", start_s=None, launched_at=m.srv.launched_at)
        save(self.work_dir, self.records)

    def _list(self, m, kept_now, state, **start):
        """Member m's server runs on after the group: its record (with
        `start`, its start time or launch) for the next run."""
        kept_now.add(m.tag)
        if m.srv.log is not None:
            m.srv.log.close()  # ours only: the server writes through its own
        self.records.append({"tag": m.tag, "fingerprint": m.fingerprint,
                             "port": m.srv.port, "pgid": m.srv.proc.pid,
                             "log_path": m.srv.log_path, **start})
        self.log(f"  keep {m.tag} {state} (port {m.srv.port}) for the next run")

    def keep(self, group, kept_now):
        """--keep-servers: list the group's running servers in the work dir's
        registry for the next run, and leave them running (their tags join
        kept_now, the servers the group's end leaves alone)."""
        for m in group:
            if m.srv.proc is None or m.srv.proc.poll() is not None:
                continue
            self._list(m, kept_now, "running", start_s=round(m.srv.start_s, 1))
        save(self.work_dir, self.records)

    def stop_unadopted(self):
        """At the run's end: stop the kept servers held for a group that
        did not run."""
        for r in self.by_fingerprint.values():
            self.log(f"stop the server an earlier run kept: {r['tag']} (its group did not run)")
            stop(r["pgid"])


def prune_logs(work_dir):
    """Deletes *.log under work_dir and work_dir/pair*/ but the kept servers'."""
    keep = set()
    for d in [work_dir] + sorted(glob.glob(os.path.join(work_dir, "pair*"))):
        keep.update(os.path.abspath(r["log_path"]) for r in load(d) if r.get("log_path"))
    removed = 0
    for path in glob.glob(os.path.join(work_dir, "*.log")) + \
            glob.glob(os.path.join(work_dir, "pair*", "*.log")):
        if os.path.abspath(path) not in keep:
            os.remove(path)
            removed += 1
    return removed, len(keep)


def main(argv):
    if len(argv) != 2 or argv[0] != "prune-logs":
        print("usage: keep.py prune-logs WORK", file=sys.stderr)
        return 2
    if not os.path.isdir(argv[1]):
        print(f"keep.py: {argv[1]}: not a directory", file=sys.stderr)
        return 2
    removed, kept = prune_logs(argv[1])
    print(f"removed {removed} logs, kept {kept} of running servers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
