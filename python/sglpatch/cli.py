"""Command line: sglpatch apply | revert | status | check | worktree | export."""

import argparse
import json
import os
import sys
from pathlib import Path

from sglpatch import SGLANG_BASE_VERSION, __version__, engine
from sglpatch.errors import SglpatchError


def _progress(msg: str) -> None:
    print(f"sglpatch: {msg}", file=sys.stderr, flush=True)


def _print_status(report: dict) -> None:
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
    if report["interrupted_run_pending"]:
        print(f"an interrupted sglpatch run left a journal; {engine.RECOVER_HINT}")
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


def _parser() -> argparse.ArgumentParser:
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


def _run(args) -> None:
    if args.command == "apply":
        outcome = engine.apply(args.sglang_dir, dry_run=args.dry_run,
                               through=args.through, progress=_progress)
        print(outcome.message)
    elif args.command == "revert":
        print(engine.revert(args.sglang_dir, progress=_progress).message)
    elif args.command == "status" and args.explain:
        from sglpatch.explain import explain_launch

        verdict = explain_launch(args.launch_flags)
        if args.json:
            print(json.dumps(verdict, indent=2))
        else:
            print(f"per-step seq_lens host pull: {verdict['pull']} ({verdict['reason']})")
    elif args.command == "status":
        if args.launch_flags:
            raise SglpatchError("launch flags go with --explain")
        report = engine.status_report(args.sglang_dir)
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            _print_status(report)
    elif args.command == "check":
        print(engine.check(args.sglang_dir).message)
    elif args.command == "worktree":
        from sglpatch.maintainer import make_worktree
        from sglpatch.series import PATCHES_DIR

        make_worktree(args.dir.resolve(), wheel=args.wheel,
                      patches_dir=args.patches_dir or PATCHES_DIR,
                      with_series=not args.base_only, progress=_progress)
    elif args.command == "export":
        from sglpatch.maintainer import default_patches_dir, export_series

        patches_dir = args.patches_dir or default_patches_dir(Path.cwd())
        export_series(args.dir.resolve(), patches_dir.resolve(), progress=_progress)


def main(argv=None) -> int:
    # A path that is not valid in the output encoding (PYTHONIOENCODING=utf-8
    # and a Latin-1 file name) is printed escaped instead of failing.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        args = _parser().parse_args(argv)
        _run(args)
    except SglpatchError as e:
        return _fail(str(e))
    except OSError as e:  # e.g. a full disk, a name too long, no permission
        if isinstance(e, BrokenPipeError):  # e.g. `sglpatch status | head`
            sys.stderr.close()
            return 0
        where = f": {e.filename}" if e.filename else ""
        return _fail(f"{e.strerror or e}{where}")
    except KeyboardInterrupt:
        print("sglpatch: interrupted; the package holds all of the change or none "
              "of it (`sglpatch status` tells which)", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: still one line, the traceback on request
        if os.environ.get("SGLPATCH_TRACEBACK"):
            raise
        return _fail(f"unexpected {type(e).__name__}: {e} (set SGLPATCH_TRACEBACK=1 "
                     f"for the traceback, and please report it)")
    return 0


def _fail(message: str) -> int:
    print(f"sglpatch: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
