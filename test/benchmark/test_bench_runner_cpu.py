"""CPU tests of benchmark/bench.py's BenchRunner: one bench_serving worker
per build, started before the first point (prestart) so that the builds of
a side-by-side group do not each wait for their worker's import in turn."""

import json
import os
import sys
import textwrap

from standin_sglang import E2E

sys.path.insert(0, os.path.dirname(E2E))
from bench import BenchRunner  # noqa: E402

# a stand-in bench_serving that says when it is imported (the worker's
# pre-import) and when it runs as `python -m` does, each with its process
FAKE = textwrap.dedent('''
    import json, os, sys, time
    def note(event):
        with open(os.environ["FAKE_JOURNAL"], "a") as fh:
            fh.write(json.dumps({"event": event, "pid": os.getpid(),
                                 "site": os.environ["PYTHONPATH"]}) + "\\n")
    if __name__ == "__main__":
        note("run")
        out = sys.argv[sys.argv.index("--output-file") + 1]
        with open(out, "a") as fh:
            fh.write(json.dumps({"median_tpot_ms": 1.0}) + "\\n")
    else:
        note("import")
''')


def _site(tmp_path, name):
    pkg = tmp_path / name / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "bench_serving.py").write_text(FAKE)
    return str(tmp_path / name)


def _events(journal):
    if not journal.exists():
        return []
    return [json.loads(x) for x in journal.read_text().splitlines()]


def test_prestart_imports_every_build_before_its_first_point(tmp_path):
    journal = tmp_path / "journal.jsonl"
    envs = [dict(os.environ, PYTHONPATH=_site(tmp_path, name), FAKE_JOURNAL=str(journal))
            for name in ("base", "patched")]
    runner = BenchRunner("worker", lambda msg: None)
    try:
        runner.prestart(envs)
        runner.wait_started()
        imports = _events(journal)
        # both workers imported before any point was asked of them
        assert sorted(e["site"] for e in imports) == sorted(e["PYTHONPATH"] for e in envs)
        assert {e["event"] for e in imports} == {"import"}
        assert runner.starting == set()
        for i, env in enumerate(envs):
            out = tmp_path / f"point{i}.jsonl"
            assert runner.run(["--output-file", str(out)], env, str(tmp_path / f"p{i}.log")) == 0
            assert json.loads(out.read_text())["median_tpot_ms"] == 1.0
        events = _events(journal)
        runs = [e for e in events if e["event"] == "run"]
        # each point ran in the worker started for its build: no second import
        assert [e["event"] for e in events].count("import") == 2
        pid_of = {e["site"]: e["pid"] for e in imports}
        assert [(e["site"], e["pid"]) for e in runs] == [
            (env["PYTHONPATH"], pid_of[env["PYTHONPATH"]]) for env in envs]
        assert runner.mode == "worker"
    finally:
        runner.close()


def test_prestart_leaves_a_process_per_point_runner_alone(tmp_path):
    journal = tmp_path / "journal.jsonl"
    env = dict(os.environ, PYTHONPATH=_site(tmp_path, "base"), FAKE_JOURNAL=str(journal))
    runner = BenchRunner("process", lambda msg: None)
    runner.prestart([env])
    assert runner.workers == {}
    out = tmp_path / "point.jsonl"
    assert runner.run(["--output-file", str(out)], env, str(tmp_path / "p.log")) == 0
    assert [e["event"] for e in _events(journal)] == ["run"]


def test_a_worker_that_cannot_start_leaves_its_points_to_a_process_each(tmp_path):
    journal = tmp_path / "journal.jsonl"
    site = _site(tmp_path, "base")
    # importing this bench_serving fails in the worker; run as `python -m` it works
    mod = os.path.join(site, "sglang", "bench_serving.py")
    with open(mod) as fh:
        text = fh.read()
    with open(mod, "w") as fh:
        fh.write(text.replace('else:\n    note("import")', 'else:\n    raise ImportError("no")'))
    env = dict(os.environ, PYTHONPATH=site, FAKE_JOURNAL=str(journal))
    said = []
    runner = BenchRunner("worker", said.append)
    try:
        runner.prestart([env])
        runner.wait_started()
        assert any("did not start" in x for x in said)
        assert runner.workers == {} and runner.starting == set()
        out = tmp_path / "point.jsonl"
        assert runner.run(["--output-file", str(out)], env, str(tmp_path / "p.log")) == 0
        assert runner.mode == "process"
        assert [e["event"] for e in _events(journal)] == ["run"]
    finally:
        runner.close()
