"""Command line: sglpatch apply | revert | status | check | worktree | export.

Only what Python has loaded before any code of ours runs is imported at the
top: everything else is imported inside main(), so that a Ctrl-C however
early (while modules load) ends in the one-line message and exit 130.
"""

import os
import sys

from sglpatch import INTERRUPTED, SGLANG_BASE_VERSION, __version__


def _progress(msg: str) -> None:
    print(f"sglpatch: {msg}", file=sys.stderr, flush=True)


def _print_status(report: dict) -> None:
    from sglpatch import engine

    version = report["sglang_version"] or "(version unknown: no readable _version.py)"
    supported = "" if report["version_supported"] else (
        f"  (the series is for {report['series_base_version']})"
    )
    print(f"sglang {version} at {report['sglang_dir']}{supported}")
    state = report["state"]
    if state is None:
        print("state file: absent")
    else:
        print(f"state file: format {state['format']}, written by {state['written_by']}")
        if state["problem"]:
            print(f"  note: {state['problem']}")
    if report["journal_problem"]:
        print(report["journal_problem"])
    elif report["interrupted_run_pending"]:
        left = [n for n in report["leftovers"] if n.startswith(".sglpatch-journal")]
        print(f"an interrupted sglpatch run left {', '.join(left)}; {engine.RECOVER_HINT}")
    if engine.STORE_DIR in report["leftovers"]:
        print(f"{engine.STORE_DIR} is there without a state file; `sglpatch revert` "
              f"removes it")
    through = report["applied_through"]
    total = len(report["patches"])
    if through and through != report["patches"][-1]["name"]:
        print(f"applied through {through.split('-', 1)[0]} of {total} patches "
              f"(`sglpatch apply` continues the series, `sglpatch revert` undoes it)")
    for patch in report["patches"]:
        print(f"  {patch['status']:<14} {patch['name']}")
        for rel in patch["files"]:
            mark = "  (locally edited)" if rel in patch["locally_edited"] else ""
            print(f"      {rel}{mark}")
        for rel in patch["not_installed"]:
            print(f"      {rel}  (skipped: outside python/sglang/, not installed)")


_DIR_HELP = ("the sglang package directory, e.g. .../site-packages/sglang "
             "(default: the one this Python imports)")


def _parser():
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(
        prog="sglpatch",
        description=f"Apply the overlap-scheduler rework series to sglang "
        f"{SGLANG_BASE_VERSION}. Exit status: 0 success, 2 refused or failed "
        f"(one line on stderr), 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"sglpatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, summary, details=""):
        p = sub.add_parser(name, help=summary, description=summary + details)
        if name not in ("worktree", "export"):
            p.add_argument("--sglang-dir", metavar="DIR", help=_DIR_HELP)
        return p

    p = command("apply", "apply the series to sglang, all patches or none",
                ". Continues from the patches already applied; with --through, "
                "stops after that patch.")
    p.add_argument("--dry-run", action="store_true",
                   help="check that the series applies; change nothing")
    p.add_argument("--through", metavar="NNNN",
                   help="apply the series only up to and including patch NNNN")
    command("revert", "take sglang back to pristine, byte for byte",
            ", from however many patches are applied.")
    p = command("status", "which patches are applied, and what sglpatch keeps in "
                "the package")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--explain", action="store_true",
                   help="instead: whether a server launched with the launch_server "
                   "flags given after -- keeps the per-step seq_lens host pull, and "
                   "why (imports neither sglang nor torch)")
    p.add_argument("launch_flags", nargs="*", metavar="-- LAUNCH_FLAG",
                   help="with --explain: python -m sglang.launch_server flags")
    command("check", "verify the series; and that it is applied to, or applies "
            "to, sglang", ". Changes nothing.")

    p = command("worktree", "(maintainers) git repo of pristine sglang plus one "
                "commit per patch")
    p.add_argument("dir", type=Path, help="a new (or empty) directory")
    p.add_argument("--wheel", type=Path,
                   help="use this sglang wheel (default: download it with pip)")
    p.add_argument("--base-only", action="store_true", help="do not apply the series")
    p.add_argument("--patches-dir", type=Path, default=None,
                   help="the series to apply (default: the one sglpatch ships)")
    p = command("export", "(maintainers) write patches/ from a work tree's commits")
    p.add_argument("dir", type=Path, help="the work tree made by `sglpatch worktree`")
    p.add_argument("--patches-dir", type=Path, default=None,
                   help="where to write (default: python/sglpatch/patches of the "
                   "sglpatch repository the command runs in)")
    return parser


def _run(args):
    """The command's report for stdout, and whether the package was changed."""
    import json
    from pathlib import Path

    from sglpatch import engine
    from sglpatch.errors import SglpatchError

    if args.command == "apply":
        outcome = engine.apply(args.sglang_dir, dry_run=args.dry_run,
                               through=args.through, progress=_progress)
        return outcome.message, outcome.changed
    if args.command == "revert":
        outcome = engine.revert(args.sglang_dir, progress=_progress)
        return outcome.message, outcome.changed
    if args.command == "status" and args.explain:
        from sglpatch.explain import explain_launch

        verdict = explain_launch(args.launch_flags)
        if args.json:
            return json.dumps(verdict, indent=2), False
        return f"per-step seq_lens host pull: {verdict['pull']} ({verdict['reason']})", False
    if args.command == "status":
        if args.launch_flags:
            raise SglpatchError("launch flags go with --explain")
        report = engine.status_report(args.sglang_dir)
        if args.json:
            return json.dumps(report, indent=2), False
        return _captured(_print_status, report), False
    if args.command == "check":
        return engine.check(args.sglang_dir).message, False
    if args.command == "worktree":
        from sglpatch.maintainer import make_worktree
        from sglpatch.series import PATCHES_DIR

        make_worktree(args.dir.resolve(), wheel=args.wheel,
                      patches_dir=args.patches_dir or PATCHES_DIR,
                      with_series=not args.base_only, progress=_progress)
        return None, True
    if args.command == "export":
        from sglpatch.maintainer import default_patches_dir, export_series

        patches_dir = args.patches_dir or default_patches_dir(Path.cwd())
        export_series(args.dir.resolve(), patches_dir.resolve(), progress=_progress)
        return None, True
    raise AssertionError(args.command)


def _captured(printer, *args) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        printer(*args)
    return out.getvalue().rstrip("\n")


def main(argv=None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # however early: while modules load, too
        _say(INTERRUPTED)
        return 130


def _main(argv) -> int:
    # A path that is not valid in the output encoding (PYTHONIOENCODING=utf-8
    # and a Latin-1 file name) is printed escaped instead of failing.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    from sglpatch.errors import SglpatchError

    try:
        args = _parser().parse_args(argv)
        report, changed = _run(args)
    except SglpatchError as e:
        return _fail(str(e))
    except OSError as e:  # e.g. a full disk, a name too long, no permission
        return _fail(f"{e.strerror or e}{f': {e.filename}' if e.filename else ''}")
    except KeyboardInterrupt:
        raise
    except Exception as e:  # a bug: still one line, the traceback on request
        if os.environ.get("SGLPATCH_TRACEBACK"):
            raise
        return _fail(f"unexpected {type(e).__name__}: {e} (set SGLPATCH_TRACEBACK=1 "
                     f"for the traceback, and please report it)")
    return _report(report, changed)


def _report(report, changed: bool) -> int:
    """Write the report to stdout. When that fails after the package was
    changed, the change stands: the report goes to stderr and the exit status
    stays 0 (2 would say that nothing changed)."""
    if report is None:
        return 0
    try:
        print(report)
        sys.stdout.flush()
    except OSError as e:
        _drop_stdout()
        if isinstance(e, BrokenPipeError):  # e.g. `sglpatch status | head`
            return 0
        if changed:
            _say(f"sglpatch: {report} (could not write this to stdout: "
                 f"{e.strerror or e})")
            return 0
        return _fail(f"could not write to stdout: {e.strerror or e}")
    return 0


def _drop_stdout() -> None:
    """What stdout still buffers could not be written: send it nowhere, so
    that Python's own flush at exit neither fails nor changes the status."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def _fail(message: str) -> int:
    _say(f"sglpatch: error: {' '.join(message.split())}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
