"""benchmark/kill_rank.py on CPU: the process of the titled rank is found in
the server's own process group and killed, and the launcher's exit (or the
cap, when it hangs) is what the record says; a fake /proc checks the title
matching. The server is a stand-in launch_server that starts one child per
TP rank under sglang's scheduler titles (bash `exec -a`) and, like sglang's
subprocess watchdog, ends with its whole group when one of them dies
(FAKE_ON_RANK_DEATH=exit), ends alone (=exit-leave) or keeps running
(=hang)."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmark"))

import kill_rank  # noqa: E402
from standin_sglang import port_block  # noqa: E402

FAKE_LAUNCH_SERVER = textwrap.dedent('''
    import http.server, json, os, subprocess, sys, threading, time
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    tp = int(argv[argv.index("--tp") + 1])
    mode = os.environ.get("FAKE_ON_RANK_DEATH", "exit")
    ranks = []
    for r in range(tp):
        title = f"sglang::scheduler_TP{r}"
        # each rank forks a helper that inherits its title (as a forked
        # process inherits setproctitle's); the scheduler is the outer one
        inner = f"exec -a {title} sleep 3600"
        ranks.append(subprocess.Popen(["bash", "-c", f"exec -a {title} bash -c '{inner} & wait'"]))
    subprocess.Popen(["bash", "-c", "exec -a sglang::detokenizer sleep 3600"])
    dead = threading.Event()

    def titles():
        out = []
        for name in os.listdir("/proc"):
            try:
                if name.isdigit() and os.getpgid(int(name)) == os.getpgid(0):
                    with open(f"/proc/{name}/cmdline", "rb") as fh:
                        out.append(fh.read().split(b"\\0")[0].decode())
            except OSError:
                pass
        return out

    # serve once every rank and its helper bear the title
    while not all(titles().count(f"sglang::scheduler_TP{r}") == 2 for r in range(tp)):
        time.sleep(0.01)

    def kill_the_others():
        me = os.getpid()
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != me:
                try:
                    if os.getpgid(int(name)) == os.getpgid(0):
                        os.kill(int(name), 9)
                except OSError:
                    pass

    def watchdog():
        while not dead.is_set():
            for p in ranks:
                if p.poll() is not None:
                    print(f"Subprocess scheduler (pid={p.pid}) crashed with exit code "
                          f"{p.returncode}", flush=True)
                    dead.set()
                    if mode == "exit":  # as sglang: the process tree, then itself
                        kill_the_others()
                    if mode in ("exit", "exit-leave"):
                        os._exit(7)
            time.sleep(0.05)

    threading.Thread(target=watchdog, daemon=True).start()

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            last = req["input_ids"][-1]
            for i in range(req["sampling_params"]["max_new_tokens"]):
                while dead.is_set():  # a hung server sends nothing more
                    time.sleep(0.1)
                chunk = {"output_ids": [last + i + 1], "meta_info": {"finish_reason": None}}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\\n\\n")
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"data: [DONE]\\n\\n")

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    print("The server is fired up and ready to roll!", flush=True)
    srv.serve_forever()
''')


def fake_site(tmp_path):
    site = tmp_path / "site" / "sglang"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "launch_server.py").write_text(FAKE_LAUNCH_SERVER)
    models = tmp_path / "work" / "models-tiny"
    (models / "draft").mkdir(parents=True)  # reused by ensure_models: no weights built
    (models / "draft" / "synthetic.json").write_text(json.dumps(
        {"preset": "tiny", "accept_steps": 3, "draft_accuracy": 0.8, "spec_steps": 3,
         "vocab": 50}))
    return str(tmp_path / "site")


def run_kill(tmp_path, *extra, mode="exit"):
    site = fake_site(tmp_path)
    out = tmp_path / "kill.json"
    env = dict(os.environ, PYTHONPATH=site, FAKE_ON_RANK_DEATH=mode)
    # a block of ports of its own: tests that run at once never race for one
    with port_block() as port_base:
        res = subprocess.run(
            [sys.executable, os.path.join(REPO, "benchmark", "kill_rank.py"),
             "--variant", f"base={site}", "--variant", f"upstream-0.5.13={site}",
             "--preset", "tiny", "--card", "FAKE", "--settle-s", "0.2",
             "--busy-clients", "3", "--busy-new-tokens", "2000",
             "--port-base", str(port_base),
             "--work-dir", str(tmp_path / "work"), "--out", str(out), *extra],
            env=env, capture_output=True, text=True, timeout=300)
    return res, json.loads(out.read_text())


def group_gone(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
def test_a_killed_rank_that_ends_the_server(tmp_path):
    res, data = run_kill(tmp_path, "--cap-s", "60")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    kills = data["kills"]
    assert [(k["variant"], k["scenario"]) for k in kills] == [
        ("base", "idle"), ("base", "busy"), ("upstream-0.5.13", "idle"),
        ("upstream-0.5.13", "busy")]
    for k in kills:
        assert k["killed_title"] == "sglang::scheduler_TP1"
        # the rank's scheduler and its helper bear the title; the scheduler was killed
        assert k["group_before"].count("sglang::scheduler_TP1") == 2
        assert k["exited"] is True and k["exit_code"] == 7
        assert isinstance(k["seconds"], float) and isinstance(k["group_gone_s"], float)
        assert any("crashed" in line for line in k["log_tail"])
        assert group_gone(k["pgid"])  # what the launcher left was stopped after it
    busy = [k for k in kills if k["scenario"] == "busy"]
    for k in busy:
        assert k["clients"]["clients"] == 3 and k["clients"]["decoding_at_kill"] == 3
        # the launcher's exit closed every stream before its end
        assert sum(k["clients"]["ended"].values()) == 3
        assert "finished" not in k["clients"]["ended"]
    assert "launcher exited after" in res.stdout


@pytest.mark.slow
def test_a_launcher_that_exits_and_leaves_its_ranks(tmp_path):
    # the cap bounds how long the stand-in launcher may take to see its rank
    # die and exit: generous, so that a loaded machine does not fail it
    res, data = run_kill(tmp_path, "--cap-s", "8", "--scenarios", "idle", mode="exit-leave")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for k in data["kills"]:
        assert k["exited"] is True and k["exit_code"] == 7
        assert k["group_gone_s"] is None  # rank 0 and the rest ran on past the cap
        assert "sglang::scheduler_TP0" in k["left"] and "sglang::detokenizer" in k["left"]
        assert group_gone(k["pgid"])  # stopped after the cap
    assert "group gone not by the cap" in res.stdout


@pytest.mark.slow
def test_a_killed_rank_that_leaves_the_server_hung(tmp_path):
    res, data = run_kill(tmp_path, "--cap-s", "1.5", "--scenarios", "busy", mode="hang")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for k in data["kills"]:
        assert k["exited"] is False and k["seconds"] is None and k["exit_code"] is None
        assert k["group_gone_s"] is None
        assert "sglang::scheduler_TP0" in k["left"] and "sglang::scheduler_TP1" in k["left"]
        assert k["clients"]["open_at_cap"] == 3 and k["clients"]["ended"] == {}
        assert group_gone(k["pgid"])  # stopped after the cap
    assert "(hung)" in res.stdout


def fake_proc(tmp_path, procs):
    """A /proc of (pid, ppid, pgrp, state, cmdline bytes)."""
    root = tmp_path / "proc"
    for pid, ppid, pgrp, state, cmdline in procs:
        d = root / str(pid)
        d.mkdir(parents=True)
        (d / "stat").write_text(f"{pid} (python3 (x) y) {state} {ppid} {pgrp} 0 0 0\n")
        (d / "cmdline").write_bytes(cmdline)
    (root / "self").mkdir()
    return str(root)


def test_the_rank_is_found_by_its_exact_title_in_the_server_group(tmp_path):
    proc = fake_proc(tmp_path, [
        (100, 1, 100, "S", b"python3\0-m\0sglang.launch_server\0"),
        (101, 100, 100, "S", b"sglang::scheduler_TP0" + b"\0" * 20),
        (102, 100, 100, "S", b"sglang::scheduler_TP1" + b" " * 20),
        (103, 102, 100, "S", b"sglang::scheduler_TP1\0"),  # its forked helper
        (104, 100, 100, "S", b"sglang::scheduler_TP10\0"),
        (105, 100, 100, "Z", b"sglang::scheduler_TP1\0"),  # a zombie: not a process to kill
        (200, 1, 200, "S", b"sglang::scheduler_TP1\0"),  # another server's rank
    ])
    assert kill_rank.find_by_title("sglang::scheduler_TP1", 100, proc) == [102]
    assert kill_rank.find_by_title("sglang::scheduler_TP1", 200, proc) == [200]
    assert kill_rank.find_by_title("sglang::scheduler_TP2", 100, proc) == []
    assert [t for _, _, t in kill_rank.group_processes(100, proc)] == [
        "python3", "sglang::scheduler_TP0", "sglang::scheduler_TP1",
        "sglang::scheduler_TP1", "sglang::scheduler_TP10"]


@pytest.mark.parametrize("tp,rank,dp,attn,title", [
    (2, 1, 1, False, "sglang::scheduler_TP1"),
    (4, 3, 1, False, "sglang::scheduler_TP3"),
    (2, 1, 2, True, "sglang::scheduler_DP1_TP1"),
    (4, 1, 2, True, "sglang::scheduler_DP0_TP1"),
    (2, 1, 2, False, "sglang::scheduler_DP0_TP1"),
])
def test_sglang_scheduler_titles(tp, rank, dp, attn, title):
    assert kill_rank.scheduler_title(tp, rank, dp, attn) == title


def test_stream_outcomes():
    fin = json.dumps({"meta_info": {"finish_reason": {"type": "length"}}}).encode()
    abort = json.dumps({"meta_info": {"finish_reason": {"type": "abort",
                                                        "message": "x"}}}).encode()
    err = json.dumps({"error": {"message": "scheduler died"}}).encode()
    assert kill_rank.stream_outcome(True, fin)[0] == "finished"
    assert kill_rank.stream_outcome(True, abort)[0] == "error_event"
    assert kill_rank.stream_outcome(False, err)[0] == "error_event"
    assert kill_rank.stream_outcome(False, fin)[0] == "closed"
    assert kill_rank.stream_outcome(False, None)[0] == "closed"


def test_bad_arguments_fail_before_any_server(tmp_path):
    script = os.path.join(REPO, "benchmark", "kill_rank.py")
    for args, said in ((["--scenarios", "idle,storm"], "--scenarios"),
                       (["--tp", "1"], "--tp 2 or more"),
                       (["--kill-rank", "2"], "--kill-rank")):
        res = subprocess.run([sys.executable, script, "--work-dir", str(tmp_path), *args],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and said in res.stderr, res.stderr


def test_no_process_left_behind_by_the_stand_in(tmp_path):
    """The stand-in's ranks live in the launcher's group: stop_group ends them."""
    site = fake_site(tmp_path)
    env = dict(os.environ, PYTHONPATH=site)
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--port", "0",
                             "--tp", "2"], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert "fired up" in proc.stdout.readline()  # printed once the titles are set
        titles = [t for _, _, t in kill_rank.group_processes(proc.pid)]
        assert titles.count("sglang::scheduler_TP1") == 2
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_render_writes_a_row_per_kill_from_the_file(tmp_path):
    rec = {"variant": "patched", "scenario": "idle", "tp": 2, "attention_backend": "triton",
           "cap_s": 120.0, "exited": True, "seconds": 0.47, "exit_code": -9,
           "group_gone_s": 0.96, "left": ["python3"]}
    hung = dict(rec, variant="base", exited=False, seconds=None, exit_code=None,
                group_gone_s=None, left=["a", "b"])
    data = {"card": "NVIDIA H200", "date": "2026-11-28", "model_preset": "small",
            "commands": ["python benchmark/kill_rank.py --tp 2"],
            "kills": [rec, hung, {"variant": "patched", "scenario": "busy",
                                  "error": "not run (deadline)"}]}
    path = tmp_path / "k.json"
    path.write_text(json.dumps(data))
    assert kill_rank.main(["--render", str(path)]) == 0
    rows = [line.split("|")[1:-1] for line in (tmp_path / "k.md").read_text().splitlines()
            if line.startswith("| patched") or line.startswith("| base")]
    cells = [[c.strip() for c in r] for r in rows]
    assert cells[0][:8] == ["patched", "idle", "2", "triton", "0.47", "-9", "0.96", "1"]
    assert cells[1][4] == "running at the 120 s cap" and cells[1][7] == "2"
    assert cells[2][:2] == ["patched", "busy"] and "not run (deadline)" in cells[2][4]
