"""The start-up claims of benchmark/README.md and of
benchmark/results/2026-11-27-h100x2-probes/README.md (three TP=2 servers
side by side on an H100 x2, started one after another and kept between
calls), checked against the committed files they come from."""

import json
import os
import re
from datetime import datetime

from test_readme_claims import RESULTS, flat  # test/docs is no package: pytest puts it on the path

PROBES = os.path.join(RESULTS, "2026-11-27-h100x2-probes")
BUILDS = ("base", "patched-through-0008", "patched")


def bench_readme():
    return flat("benchmark/README.md")


def probes_readme():
    return flat("benchmark/results/2026-11-27-h100x2-probes/README.md")


def probe_file(name):
    with open(os.path.join(PROBES, name)) as fh:
        return fh.read()


def call(i):
    return json.loads(probe_file(f"call{i}.json"))


def e2e_log(i):
    """[(seconds into the run, message)] of a call's e2e log."""
    return [(float(m.group(1)), m.group(2)) for m in
            re.finditer(r"^\[\s*([\d.]+)s\] (.*)$", probe_file(f"call{i}-e2e-log.txt"), re.M)]


def at(log, pattern):
    """The times of the log lines that match `pattern`."""
    return [t for t, msg in log if re.search(pattern, msg)]


def captures():
    """{build: startup-capture row} of call 1."""
    rows = json.loads(probe_file("startup-capture.json"))
    return {r["server"].split("/")[1].split("-triton")[0]: r for r in rows}


def clock(stamp):
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")


def fired_up(build):
    """When the server's log said it serves, by the log's clock."""
    name = f"call1/server-{build}-triton-ov1-EAGLE3-pcg1.log"
    for line in probe_file("call1-server-lines.log").splitlines():
        path, _, text = line.partition(":")
        m = re.match(r"\[(\S+ \S+)\] The server is fired up", text)
        if path == name and m:
            return m.group(1)
    raise AssertionError(f"no fired-up line of {build}")


def stack_rows(frame):
    """{build, rank: (inclusive seconds of `frame`, seconds sampled)} from
    startup-stacks.md."""
    out = {}
    for block in probe_file("startup-stacks.md").split("\n## "):
        head = re.match(r"#* ?(\S+), rank (\d) \(pid \d+\): ([\d.]+) s sampled", block)
        row = re.search(r"^\| `" + re.escape(frame) + r"` \| ([\d.]+) \|", block, re.M)
        out[(head.group(1), int(head.group(2)))] = (float(row.group(1)), float(head.group(3)))
    return out


def test_captures_one_after_another():
    rows = captures()
    assert list(rows) == list(BUILDS)
    # no two captures overlapped: each began after the one before had ended
    for a, b in zip(BUILDS, BUILDS[1:]):
        assert clock(rows[a]["ended"]) < clock(rows[b]["began"])
    cap = [rows[b]["capture_s"] for b in BUILDS]
    first = [rows[b]["first_bs_s"] for b in BUILDS]
    assert (f"No two captures overlapped; each took {min(cap):.0f} to {max(cap):.0f} s alone, "
            f"{min(first)} to {max(first)} s of it the first batch size") in bench_readme()
    spans = ", ".join(f"{rows[b]['began'][-8:]}–{rows[b]['ended'][-8:]}" for b in BUILDS[:2])
    assert (f"{spans} and {rows['patched']['began'][-8:]}–{rows['patched']['ended'][-8:]}) "
            f"and took {cap[0]:.1f}, {cap[1]:.1f} and {cap[2]:.1f} s, of which the first "
            f"batch size took {first[0]}, {first[1]} and {first[2]} s") in probes_readme()


def test_the_start_is_jit_compiles():
    norm = stack_rows("flashinfer/jit/core.py:build_and_load")
    tvm = stack_rows("tvm_ffi/cpp/extension.py:load_inline")
    # both ranks of each of the three builds
    assert sorted(norm) == sorted(tvm) == sorted(
        (site, rank) for site in ("sb-probe", "sp-0008-probe", "sp-probe") for rank in (0, 1))
    n = [s for s, _ in norm.values()]
    t = [s for s, _ in tvm.values()]
    sampled = [s for _, s in norm.values()]
    # "most of each start": the two together, more than half of every rank's
    assert all((norm[k][0] + tvm[k][0]) / norm[k][1] > 0.5 for k in norm)
    assert (f"flashinfer's RMSNorm module ({min(n):.0f} to {max(n):.0f} s a rank)" in bench_readme())
    assert f"KV-cache store: {min(t):.0f} to {max(t):.0f} s a rank), of the " \
           f"{min(sampled):.0f} to {max(sampled):.0f} s each scheduler rank was sampled" in bench_readme()
    text = probes_readme()
    assert f"{min(n):.1f} to {max(n):.1f} s a rank" in text
    assert f"KV-cache store, {min(t):.1f} to {max(t):.1f} s a rank" in text
    assert f"of the {min(sampled):.1f} to {max(sampled):.1f} s each rank was sampled" in text


def test_three_servers_served_after_the_first_launch():
    log = e2e_log(1)
    launched = at(log, r"^launch ")
    ready = at(log, r"ready in \d+s$")
    gates = [int(m.group(1)) for _, msg in log for m in [re.search(r"after (\d+)s, the next", msg)]
             if m]
    assert len(launched) == len(ready) == 3 and len(gates) == 2
    total = max(ready) - min(launched)
    assert f"all three servers served {total:.0f} s after the first launch" in bench_readme()
    assert (f"launched base at {launched[0]} s, the next server at {launched[1]} s and the third "
            f"at {launched[2]} s (each once the previous one's capture had ended, after "
            f"{gates[0]} and {gates[1]} s), and all three served at {max(ready)} s: "
            f"{total:.0f} s after the first launch") in probes_readme()


def test_an_early_server_was_timed_until_wait_ready():
    starts = {s["setting"].split("-triton")[0]: s["start_s"] for s in call(1)["server_starts"]}
    log = e2e_log(1)
    # the run saw base's capture end when it launched the next server
    gate = at(log, r"^launch patched-through-0008")[0]
    served_after_capture = (clock(fired_up("base")) - clock(captures()["base"]["ended"])).seconds
    served = gate + served_after_capture - at(log, r"^launch base")[0]
    # the recorded start ran on past the moment base served, by the others' gates
    assert starts["base"] > served + 60
    assert (f"base's {starts['base']:.0f} s in that call had served ~{served:.0f} s after its "
            "launch") in bench_readme()
    assert (f"`call1.json` gives base {starts['base']} s, but base logged \"fired up\" at "
            f"{fired_up('base')[-8:]}, {served_after_capture} s after the end of its capture, "
            f"which the run saw at {gate} s: it served ~{served:.0f} s after its launch"
            ) in probes_readme()
    assert (f"The other two starts ({starts['patched-through-0008']} and {starts['patched']} s)"
            in probes_readme())


def test_kept_servers_measured_at_once():
    adopted, deadlines, full = [], [], []
    for i in (2, 3):
        log = e2e_log(i)
        reuse = at(log, r"^reuse .*: the server an earlier run kept")
        assert len(reuse) == 3  # all three, and no launch
        assert not at(log, r"^launch ")
        assert all(s.get("reused") for s in call(i)["server_starts"])
        adopted.append(max(reuse))
        deadlines.append(at(log, r"deadline: stop")[0])
        full.append(sum(r["repeats"] == 3 for r in call(i)["runs"]))
        assert len(call(i)["runs"]) == 9
    first = call(1)["runs"]
    assert len(first) == 2 and all(r["concurrency"] == 1 and r["repeats"] == 1 for r in first)
    assert (f"calls 2 and 3 adopted all three servers within {adopted[0]} and {adopted[1]} s of "
            f"their start and measured until their deadlines at {deadlines[0]} and "
            f"{deadlines[1]} s, 3 repeats at {full[0]} and {full[1]} of the 9 points, where the "
            "first call, which started them, measured one repeat at concurrency 1 of two builds"
            ) in bench_readme()
    assert (f"within {adopted[0]} and {adopted[1]} s of their start (`reuse ... the server an "
            f"earlier run kept` in their e2e logs), measured until their deadlines at "
            f"{deadlines[0]} and {deadlines[1]} s") in probes_readme()


def test_the_command_is_the_calls():
    for i in (1, 2, 3):
        cmd = call(i)["commands"][0]
        assert "--tp 2 --concurrency 1,8,32 --repeats 3 --min-seconds 10 --greedy-prompts 8" in cmd
        assert "--side-by-side" in cmd and "--keep-servers" in cmd
        assert [v.split("=")[0] for v in re.findall(r"--variant (\S+)", cmd)] == list(BUILDS)
        assert call(i)["bench"]["start"] == "after capture"
        assert call(i)["bench"]["debug_env"] == {"SGLPATCH_STARTUP_STACKS": "1"}
        assert call(i)["card"] == "NVIDIA H100 80GB HBM3"
    command = ("KEEP_SERVERS=1 STARTUP_STACKS=1 SIDE_BY_SIDE=3 OUT=$OUT bash "
               "benchmark/device_compare.sh .kit 585 \\ base,patched-through-0008,patched "
               "--speculative EAGLE3 --piecewise default --tp 2 \\ --concurrency 1,8,32 "
               "--repeats 3 --min-seconds 10 --greedy-prompts 8")
    assert command in bench_readme() and command in probes_readme()
