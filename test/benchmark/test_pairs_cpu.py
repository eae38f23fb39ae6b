"""benchmark/pairs.py on CPU: K copies of one side-by-side run at once, each
on its own GPUs, CPUs and ports, pooled into one results file whose points
hold every copy's repeats (stand-in sglang of standin_sglang.py)."""

import json
import os
import subprocess
import sys

import pytest
from standin_sglang import FAST_PACE, REPO, make_site, port_block

sys.path.insert(0, os.path.join(REPO, "benchmark"))
import cpus  # noqa: E402
import pairs  # noqa: E402

PAIRS = os.path.join(REPO, "benchmark", "pairs.py")


def test_slices_split_evenly_or_refuse():
    assert pairs.slices(4, 2) == [[0, 1], [2, 3]]
    assert pairs.slices(64, 2)[1][0] == 32
    for n, k in ((3, 2), (1, 2), (4, 0)):
        with pytest.raises(ValueError):
            pairs.slices(n, k)


def fake_topology(tmp_path, siblings):
    """A sysfs cpu tree where logical CPU c sits on physical core siblings[c]."""
    for cpu, core in enumerate(siblings):
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{core // 2}\n")
        (topo / "core_id").write_text(f"{core % 2}\n")
    return str(tmp_path)


def test_cpu_slices_keep_hyperthread_siblings_in_one_copy(tmp_path, monkeypatch):
    # 8 logical CPUs on 4 cores, numbered as Linux often does: CPUs 0-3 are
    # the first thread of each core, 4-7 their siblings
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    cores = cpus.cpu_cores(fake_topology(tmp_path, [0, 1, 2, 3, 0, 1, 2, 3]))
    assert cores == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert cpus.cpu_slices(cores, 2) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert cpus.cpu_slices(cores, 8) is None  # fewer cores than copies: no pinning
    assert cpus.cpu_cores(str(tmp_path / "missing")) is None


def test_plan_gives_each_copy_its_own_gpus_cpus_ports_and_dirs():
    cores = [[0, 4], [1, 5], [2, 6], [3, 7]]
    copies = pairs.plan(2, 4, cores, ["--tp", "2", "--work-dir", "/w", "--out-dir", "/o",
                                      "--port-base", "1"])
    (l0, e0, p0, a0, o0), (l1, e1, p1, a1, o1) = copies
    assert (l0, l1) == ("pair0", "pair1")
    assert (e0["CUDA_VISIBLE_DEVICES"], e1["CUDA_VISIBLE_DEVICES"]) == ("0,1", "2,3")
    assert (p0, p1) == (["taskset", "-c", "0,1,4,5"], ["taskset", "-c", "2,3,6,7"])
    assert (o0, o1) == ("/w/pair0/out", "/w/pair1/out")
    # one --work-dir / --out-dir / --port-base each, the copy's own
    for argv, i in ((a0, 0), (a1, 1)):
        assert argv.count("--work-dir") == argv.count("--out-dir") == 1
        assert argv.count("--port-base") == 1
        assert pairs.option(argv, "--work-dir") == f"/w/pair{i}"
        assert pairs.option(argv, "--port-base") == str(30000 + 1000 * i)
    # TP larger than a copy's GPUs is refused before anything starts
    with pytest.raises(ValueError, match="fewer than --tp 4"):
        pairs.plan(2, 4, None, ["--tp", "4"])
    assert pairs.plan(2, 2, None, [])[0][2] == []  # no topology: no taskset
    assert pairs.plan(2, 2, cores, [], have_taskset=False)[0][2] == []


def test_vary_shares_the_copies_out_among_comparisons_of_their_own():
    """--vary: consecutive copies form one comparison each, with its options
    after the run's (so they win) and a results folder of its own."""
    vary = ["--attention-backend triton", "--attention-backend default"]
    assert pairs.groups(4, vary) == [("attention-backend-triton", [0, 1]),
                                     ("attention-backend-default", [2, 3])]
    assert pairs.groups(2, []) == [(None, [0, 1])]
    copies = pairs.plan(4, 4, None, ["--attention-backend", "fa3", "--out-dir", "/o"], vary=vary)
    backends = [pairs.option(argv, "--attention-backend") for _, _, _, argv, _ in copies]
    assert backends == ["triton", "triton", "default", "default"]
    assert [e["CUDA_VISIBLE_DEVICES"] for _, e, _, _, _ in copies] == ["0", "1", "2", "3"]
    # without --vary a copy's options are the run's own
    assert pairs.plan(2, 2, None, ["--tp", "1"])[1][3][:2] == ["--tp", "1"]
    with pytest.raises(ValueError, match="3 copies cannot be shared out among 2"):
        pairs.groups(3, vary)
    with pytest.raises(ValueError, match="share the folder name"):
        pairs.groups(2, ["--tp 2", "--tp=2"])
    # a --tp that only one comparison asks for is checked against its copies' GPUs
    with pytest.raises(ValueError, match="fewer than --tp 2"):
        pairs.plan(2, 2, None, [], vary=["--tp 1", "--tp 2"])


def _run_two_copies(tmp_path, repeats, *pairs_args):
    """pairs.py with two copies of a base/patched run of the stand-in on the
    tiny preset: (completed process, journal path, out dir)."""
    site = make_site(tmp_path)
    # each copy finds the prebuilt stand-in models in its own work dir
    for i in (0, 1):
        os.makedirs(tmp_path / "work" / f"pair{i}", exist_ok=True)
        subprocess.run(["cp", "-a", str(tmp_path / "work" / "models-tiny"),
                        str(tmp_path / "work" / f"pair{i}" / "models-tiny")], check=True)
    journal = tmp_path / "journal.jsonl"
    env = dict(os.environ, FAKE_JOURNAL=str(journal), PYTHONPATH=site, **FAST_PACE)
    out = tmp_path / "out"
    cmd = [sys.executable, PAIRS, "--pairs", "2", "--gpus", "2", "--no-pin", *pairs_args, "--",
           "--variant", f"base={site}", "--variant", f"patched={site}", "--no-apply",
           "--preset", "tiny", "--speculative", "EAGLE3", "--piecewise", "default",
           "--concurrency", "1", "--repeats", str(repeats), "--min-seconds", "0.3",
           "--greedy-prompts", "3", "--greedy-new-tokens", "4", "--card", "FAKE",
           "--side-by-side", "--max-total-tokens", "1000",
           "--work-dir", str(tmp_path / "work"), "--out-dir", str(out)]
    # the copies' ports: 30000 and 31000 up (pairs.PORT_STRIDE), held from other runs
    with port_block(30000), port_block(31000):
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res, journal, out


@pytest.mark.slow
def test_varied_copies_pool_into_a_results_file_per_comparison(tmp_path):
    _, _, out = _run_two_copies(tmp_path, 1, "--vary", "--attention-backend triton",
                                "--vary", "--attention-backend flashinfer")
    assert not [p for p in out.iterdir() if p.suffix == ".json"]  # nothing pooled across
    for folder, backend, copy in (("attention-backend-triton", "triton", "pair0"),
                                  ("attention-backend-flashinfer", "flashinfer", "pair1")):
        (path,) = (out / folder).glob("*.json")
        data = json.loads(path.read_text())
        assert {r["attention_backend"] for r in data["runs"]} == {backend}
        assert data["bench"]["pairs"] == [copy]
        assert {r["variant"] for r in data["runs"]} == {"base", "patched"}


@pytest.mark.slow
def test_two_copies_run_at_once_and_pool(tmp_path):
    res, journal, out = _run_two_copies(tmp_path, 2)
    assert "[pair0]" in res.stdout and "[pair1]" in res.stdout

    events = [json.loads(x) for x in journal.read_text().splitlines()]
    ups = [e for e in events if e["event"] == "up"]
    downs = [e for e in events if e["event"] == "down"]
    # four servers, two per copy, each copy on its own GPU and port range
    assert sorted((e["gpus"], e["port"] // 1000) for e in ups) == [
        ("0", 30), ("0", 30), ("1", 31), ("1", 31)]
    # the copies ran at the same time: every server was up before any went down
    assert max(e["t"] for e in ups) < min(e["t"] for e in downs)

    (path,) = [p for p in out.iterdir() if p.suffix == ".json"]
    data = json.loads(path.read_text())
    runs = {r["variant"]: r for r in data["runs"]}
    assert sorted(runs) == ["base", "patched"]
    for r in runs.values():  # 2 repeats in each of 2 copies
        assert r["repeats"] == 4 and len(r["samples"]) == 4
        assert r["calls"] == ["pair0", "pair1"]
    assert data["bench"]["pairs"] == ["pair0", "pair1"]
    assert sorted(g["call"] for g in data["greedy_runs"]) == ["pair0", "pair0", "pair1", "pair1"]


def test_refuses_without_separator_or_out_dir(tmp_path):
    res = subprocess.run([sys.executable, PAIRS, "--pairs", "2"], capture_output=True, text=True)
    assert res.returncode == 2 and "follow `--`" in res.stderr
    res = subprocess.run([sys.executable, PAIRS, "--pairs", "2", "--gpus", "2", "--", "--tp", "1"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "--out-dir" in res.stderr
    res = subprocess.run([sys.executable, PAIRS, "--pairs", "2", "--gpus", "2", "--",
                          "--tp", "2", "--out-dir", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2 and "fewer than --tp 2" in res.stderr
