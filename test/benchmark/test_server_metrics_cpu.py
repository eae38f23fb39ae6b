"""CPU tests of benchmark/server_metrics.py and its use by a bench point:
the server's Prometheus histograms, read before and after the point, give
the point's means of the first-token time and the scheduler's stages."""

import http.server
import json
import os
import sys
import threading

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmark"))
import bench  # noqa: E402
import report  # noqa: E402
import server_metrics  # noqa: E402
from options import RunOptions  # noqa: E402


def exposition(ttft, process, queue, prefill):
    """/metrics as sglang's collectors write it: histograms of two TP ranks
    for the scheduler's, one label set for the tokenizer manager's. Each
    argument is (sum s, count) per label set."""
    lines = ["# HELP sglang:time_to_first_token_seconds Histogram of time to first token.",
             "# TYPE sglang:time_to_first_token_seconds histogram",
             'sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0',
             f'sglang:time_to_first_token_seconds_sum{{model_name="m"}} {ttft[0]}',
             f'sglang:time_to_first_token_seconds_count{{model_name="m"}} {ttft[1]}',
             'sglang:e2e_request_latency_seconds_sum{model_name="m"} 99.0',
             'sglang:e2e_request_latency_seconds_count{model_name="m"} 9.0']
    for rank in (0, 1):
        for stage, (total, n) in (("request_process", process[rank]),
                                  ("prefill_forward", prefill[rank]),
                                  ("prefill_waiting", (50.0, 5.0))):
            labels = f'model_name="m",tp_rank="{rank}",stage="{stage}"'
            lines += [f"sglang:per_stage_req_latency_seconds_sum{{{labels}}} {total}",
                      f"sglang:per_stage_req_latency_seconds_count{{{labels}}} {n}"]
        lines += [f'sglang:queue_time_seconds_sum{{tp_rank="{rank}"}} {queue[rank][0]}',
                  f'sglang:queue_time_seconds_count{{tp_rank="{rank}"}} {queue[rank][1]}']
    return "\n".join(lines) + "\n"


BEFORE = exposition((1.0, 10.0), [(0.1, 10.0), (0.1, 10.0)], [(0.0, 10.0), (0.0, 10.0)],
                    [(0.5, 10.0), (0.5, 10.0)])
# four requests on each rank since BEFORE
AFTER = exposition((1.12, 14.0), [(0.104, 14.0), (0.104, 14.0)],
                   [(0.0016, 14.0), (0.0016, 14.0)], [(0.58, 14.0), (0.58, 14.0)])


def test_parse_sums_the_label_sets_of_the_named_histograms():
    got = server_metrics.parse(BEFORE)
    assert got == {
        ("sglang:time_to_first_token_seconds", None): [1.0, 10.0],
        ("sglang:per_stage_req_latency_seconds", "request_process"): [0.2, 20.0],
        ("sglang:per_stage_req_latency_seconds", "prefill_forward"): [1.0, 20.0],
        ("sglang:queue_time_seconds", None): [0.0, 20.0],
    }


def test_point_means_hold_only_the_requests_between_the_scrapes():
    means = server_metrics.point_means(server_metrics.parse(BEFORE),
                                       server_metrics.parse(AFTER))
    assert means == {"ttft": 30.0, "ttft_requests": 4,
                     "request_process": 1.0, "request_process_requests": 8,
                     "queue": 0.4, "queue_requests": 8,
                     "prefill_forward": 20.0, "prefill_forward_requests": 8}
    # a histogram nothing was observed in is left out
    assert server_metrics.point_means(server_metrics.parse(AFTER),
                                      server_metrics.parse(AFTER)) == {}


class _Metrics(http.server.BaseHTTPRequestHandler):
    pages = []

    def do_GET(self):
        body = (self.pages.pop(0) if self.path == "/metrics" else "").encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Server:
    def __init__(self, port):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def reset_spec_counters(self):
        pass


class _Runner:
    """bench_serving as far as run_bench sees it: its output file."""

    def run(self, argv, env, log_path):
        out = argv[argv.index("--output-file") + 1]
        with open(out, "w") as fh:
            fh.write(json.dumps({"median_tpot_ms": 2.0, "median_itl_ms": 1.5,
                                 "output_throughput": 400.0, "duration": 11.0,
                                 "median_ttft_ms": 33.0, "mean_ttft_ms": 35.5,
                                 "p99_itl_ms": 6.0}) + "\n")
        return 0


def _point(tmp_path, server_arg, port):
    opts = RunOptions(server_arg=server_arg)
    return bench.run_bench(_Runner(), _Server(port), {}, opts, "target", 1, 4,
                           str(tmp_path / "point.jsonl"))[0]


def test_a_point_of_servers_with_metrics_records_the_split(tmp_path):
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Metrics)
    _Metrics.pages = [BEFORE, AFTER]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        sample = _point(tmp_path, ("--enable-metrics",), httpd.server_address[1])
    finally:
        httpd.shutdown()
    assert _Metrics.pages == []  # read once before the point and once after
    assert sample["ttft_ms"] == 33.0 and sample["ttft_mean_ms"] == 35.5
    assert sample["server_ms"]["ttft"] == 30.0
    assert sample["server_ms"]["prefill_forward"] == 20.0


def test_a_point_without_metrics_reads_none(tmp_path):
    # nothing listens on the port: a scrape would fail the point
    sample = _point(tmp_path, (), 9)
    assert "server_ms" not in sample and "ttft_mean_ms" not in sample
    assert sample["ttft_ms"] == 33.0


def test_the_report_splits_the_first_token_time_per_point():
    def sample(client, ttft, queue):
        return {"tpot_ms": 2.0, "ttft_mean_ms": client,
                "server_ms": {"ttft": ttft, "request_process": 1.0, "queue": queue,
                              "prefill_forward": 20.0}}

    run = {"variant": "patched", "speculative": "EAGLE3", "attention_backend": "default",
           "concurrency": 8,
           "samples": [sample(35.0, 30.0, 0.5), sample(37.0, 31.0, 0.5),
                       sample(45.0, 32.0, 2.5)]}
    plain = dict(run, variant="base", samples=[{"tpot_ms": 2.0}])
    section = "\n".join(report.first_token_section({"runs": [run, plain]})).splitlines()
    rows = [line for line in section if line.startswith("| patched")]
    assert len(rows) == 1 and not any(line.startswith("| base") for line in section)
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    # client, server, request_process, queue, prefill_forward,
    # client - server, server - scheduler, scheduler, repeats: each the
    # median of the repeats' own differences
    assert [float(c) for c in cells[2:]] == [37.0, 31.0, 1.0, 0.5, 20.0, 6.0, 8.5, 21.5, 3]
    assert report.first_token_section({"runs": [plain]}) == []
