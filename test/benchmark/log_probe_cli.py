"""What every log probe's command does with bad input (benchmark/probes:
decode_log.py, capture_log.py, admission_log.py share it): one line and 2
for a DIR that is not a directory, 1 and the probe's own words for a DIR
that holds nothing it reads."""

import subprocess
import sys


def assert_refuses_bad_input(probe, tmp_path, nothing):
    res = subprocess.run([sys.executable, probe, str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert res.stderr.strip().endswith("not a directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    res = subprocess.run([sys.executable, probe, str(empty)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and nothing in res.stderr
