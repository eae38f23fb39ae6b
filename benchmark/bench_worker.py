"""Run `python -m sglang.bench_serving` repeatedly in one process.

Importing sglang.bench_serving (torch, transformers, sglang.srt) takes ~10 s,
longer than a whole 10 s benchmark point; paid per point it pushes the
default run past one 10-minute device call.  This worker pays it once: for
each request it executes the module exactly as `python -m` does (runpy,
run_name "__main__", fresh module namespace, sys.argv set), with its stdout
sent to a log file.

Protocol: one JSON object per line on stdin, {"argv": [...], "log": path};
one JSON line back on stdout, {"rc": int, "error": str|null}.
"""

import contextlib
import json
import runpy
import sys
import traceback


def run_one(argv, log_path):
    with open(log_path, "a") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        sys.argv = ["sglang.bench_serving"] + list(argv)
        try:
            runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
            return 0, None
        except SystemExit as e:  # argparse errors and explicit exits
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            return code, None if code == 0 else f"SystemExit({e.code})"
        except BaseException as e:  # keep serving the next request
            traceback.print_exc()
            return 1, f"{type(e).__name__}: {e}"


def main():
    out = sys.stdout
    # pre-import: the cost this worker exists to pay once
    import sglang.bench_serving  # noqa: F401

    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        rc, err = run_one(req["argv"], req["log"])
        out.write(json.dumps({"rc": rc, "error": err}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
