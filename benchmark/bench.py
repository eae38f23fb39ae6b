"""One bench_serving point: a throughput probe that sizes it, and the
runner that executes `sglang.bench_serving` (in a persistent worker or as a
process per point)."""

import json
import os
import subprocess
import sys
import time

import greedy
import server_metrics

HERE = os.path.dirname(os.path.abspath(__file__))


def probe_throughput(url, conc, input_len, output_len, vocab, fake_bootstrap=False):
    """Output tok/s at `conc` parallel requests (also warms that batch size);
    fake_bootstrap: to a decode-only server (greedy.decode_in_background)."""
    prompts = greedy.make_prompts(conc, vocab, seed=123, min_len=input_len,
                                  max_len=input_len)
    t0 = time.time()
    threads, errors = greedy.decode_in_background(url, prompts, output_len,
                                                  fake_bootstrap=fake_bootstrap)
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
        self.starting = set()  # PYTHONPATHs whose worker has not said it is ready

    def prestart(self, envs):
        """Start the worker of each build now, without waiting for it: the
        import each worker pays once then runs while the servers start,
        instead of in turn before each build's first point (a side-by-side
        group's builds are measured one after another, so those waits added
        up). wait_started() before the first point: an import beside a
        point would share the bench client's cores (--pin-cpus gives the
        client as little as one) and slow the build measured then."""
        if self.mode != "worker":
            return
        for env in envs:
            self._started(env)

    def wait_started(self):
        """Wait until every worker prestart began has imported bench_serving
        (or failed to: its build's first point then starts one anew, and
        falls back to a process per point as before)."""
        for key in sorted(self.starting):
            try:
                self._ready(key)
            except RuntimeError as e:
                self.log(f"  bench worker for {key or 'this site'}: {e}")

    def _ready(self, key):
        w = self.workers[key]
        ready = w.stdout.readline()
        self.starting.discard(key)
        if '"ready"' not in ready:
            del self.workers[key]
            raise RuntimeError(f"bench worker did not start: {ready!r}")

    def _started(self, env):
        """The key of env's worker, started now where none runs."""
        key = env.get("PYTHONPATH", "")
        w = self.workers.get(key)
        if w is None or w.poll() is not None:
            self.workers[key] = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "bench_worker.py")], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
            self.starting.add(key)
        return key

    def _worker(self, env):
        key = self._started(env)
        if key in self.starting:
            self._ready(key)
        return self.workers[key]

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
        self.workers, self.starting = {}, set()


def run_bench(runner, srv, env, opts, target, conc, num_prompts, out_file):
    """One bench_serving point at `conc` of `num_prompts` prompts (`opts`: the
    run's options.RunOptions): (sample, the bench_serving command line)."""
    argv = ["--backend", "sglang", "--host", "127.0.0.1", "--port", str(srv.port),
            "--model", target, "--tokenizer", target,
            "--dataset-name", "random-ids", "--tokenize-prompt",
            "--random-input-len", str(opts.input_len), "--random-output-len", str(opts.output_len),
            "--random-range-ratio", "1.0", "--num-prompts", str(num_prompts),
            "--max-concurrency", str(conc), "--seed", str(opts.seed),
            "--output-file", out_file, "--disable-tqdm"]
    # a decode-only server with the fake transfer needs the marker on each
    # request, as the greedy check sends it
    body = greedy.mark_fake_bootstrap(
        json.loads(opts.request_body) if opts.request_body else {}, opts.disaggregation_decode)
    if body:
        argv += ["--extra-request-body", json.dumps(body, sort_keys=True)]
    srv.reset_spec_counters()  # accept length of this point only
    metrics = server_metrics.wanted(opts.server_arg)
    before = server_metrics.scrape(srv.url) if metrics else None
    t0 = time.time()
    rc = runner.run(argv, env, out_file[:-6] + ".log")
    if rc != 0:
        raise RuntimeError(f"bench_serving failed ({rc}); log {out_file[:-6]}.log")
    after = server_metrics.scrape(srv.url) if metrics else None
    with open(out_file) as fh:
        rec = json.loads(fh.read().strip().splitlines()[-1])
    sample = {"tpot_ms": rec["median_tpot_ms"], "itl_ms": rec["median_itl_ms"],
              "output_tok_per_s": rec["output_throughput"],
              "accept_length": rec.get("accept_length"),
              "duration_s": rec.get("duration"), "num_prompts": num_prompts,
              "wall_s": round(time.time() - t0, 1)}
    # where a build's decode steps are faster but its prefills cost the
    # running requests more, TTFT and the ITL tail show it and TPOT blurs it
    for key, field in (("ttft_ms", "median_ttft_ms"), ("p99_itl_ms", "p99_itl_ms")):
        if rec.get(field) is not None:
            sample[key] = rec[field]
    if metrics:
        # the server's own split of the first-token time, beside the
        # client's mean over the same requests (server_metrics.py)
        sample["ttft_mean_ms"] = rec.get("mean_ttft_ms")
        sample["server_ms"] = server_metrics.point_means(before, after)
    return sample, "python -m sglang.bench_serving " + " ".join(argv)
