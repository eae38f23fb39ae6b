"""The exit status tells what happened to the package: 130 after Ctrl-C at
any moment, start-up included (one line, no traceback); 0 when the change
was made, even if its report could not be written to stdout."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, sglpatch_cli

# Ctrl-C while a given module is being imported, deterministically.
_CTRL_C_WHILE_IMPORTING = """
import sys

MODULE = sys.argv[1]

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            raise KeyboardInterrupt

sys.meta_path.insert(0, CtrlC())
sys.argv = ["sglpatch", "status", "--sglang-dir", sys.argv[2]]
if {script}:
    from sglpatch.cli import main  # what the console script does
    sys.exit(main())
import runpy  # what `python -m sglpatch` does
runpy.run_module("sglpatch", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("entry,module", [("script", "sglpatch.engine"),
                                          ("script", "argparse"),
                                          ("module", "sglpatch.cli")])
def test_ctrl_c_while_starting_is_exit_130_in_one_line(pristine, entry, module):
    code = _CTRL_C_WHILE_IMPORTING.format(script=entry == "script")
    result = subprocess.run([sys.executable, "-c", code, module, str(pristine)],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 130, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_report_that_cannot_be_written_does_not_undo_a_success(installed):
    with open("/dev/full", "w") as full:
        applied = subprocess.run(
            [sys.executable, "-m", "sglpatch", "apply", "--sglang-dir", str(installed)],
            cwd=REPO, stdout=full, stderr=subprocess.PIPE, text=True)
        assert applied.returncode == 0, applied.stderr
        assert "Traceback" not in applied.stderr
        status = subprocess.run(
            [sys.executable, "-m", "sglpatch", "status", "--sglang-dir", str(installed)],
            cwd=REPO, stdout=full, stderr=subprocess.PIPE, text=True)
        assert status.returncode == 2  # the report is what status is for
    report = json.loads(sglpatch_cli("status", "--json", "--sglang-dir",
                                     str(installed)).stdout)
    assert {p["status"] for p in report["patches"]} == {"applied"}
