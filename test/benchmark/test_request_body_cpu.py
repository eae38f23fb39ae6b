"""`e2e.py run --request-body JSON`: every bench request carries those
fields (bench_serving --extra-request-body), e.g. sampling penalties, and
the results file says so; anything but a JSON object is refused at once."""

import json
import subprocess
import sys

import pytest

from standin_sglang import E2E, run_e2e


def test_every_bench_request_carries_the_body_and_the_file_names_it(tmp_path):
    events, data = run_e2e(tmp_path, "--request-body",
                           '{"frequency_penalty": 0.5, "min_new_tokens": 8}',
                           variants=("base",))
    benches = [e for e in events if e["event"] == "bench"]
    assert benches
    assert {e["body"] for e in benches} == {'{"frequency_penalty": 0.5, "min_new_tokens": 8}'}
    assert data["bench"]["request_body"] == {"frequency_penalty": 0.5, "min_new_tokens": 8}


def test_a_decode_only_server_gets_the_fake_bootstrap_marker_on_every_request(tmp_path):
    # 0.5.12.post1's decode-only server dies on a request without it: the
    # bench, the throughput probe before a point and the profile's decoders
    events, data = run_e2e(tmp_path, "--disaggregation-decode", "--request-body",
                           '{"frequency_penalty": 0.5}', "--profile-steps", "4",
                           variants=("base",))
    bodies = {e["body"] for e in events if e["event"] == "bench"}
    assert bodies == {'{"bootstrap_host": "2.2.2.2", "frequency_penalty": 0.5}'}
    assert data["runs"] and all(r.get("disaggregation") == "decode" for r in data["runs"])
    hosts = [e["event"]["generate_bootstrap_host"] for e in events
             if isinstance(e["event"], dict) and "generate_bootstrap_host" in e["event"]]
    assert data["profiles"] and len(hosts) > 3 and set(hosts) == {"2.2.2.2"}


def test_without_it_the_requests_and_the_file_are_as_before(tmp_path):
    events, data = run_e2e(tmp_path, variants=("base",))
    assert {e["body"] for e in events if e["event"] == "bench"} == {None}
    assert "request_body" not in data["bench"]


@pytest.mark.parametrize("body", ["{frequency_penalty: 1}", "[1, 2]", "0.5"])
def test_a_body_that_is_not_a_json_object_is_refused(body, tmp_path):
    res = subprocess.run([sys.executable, E2E, "run", "--request-body", body,
                          "--work-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2
    assert "argument --request-body: not" in res.stderr and not (tmp_path / "models-small").exists()
