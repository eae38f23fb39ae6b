"""Command line: sglpatch apply | revert | status | check | worktree | export."""

import argparse
import json
import sys
from pathlib import Path

from sglpatch import SGLANG_BASE_VERSION, __version__, engine
from sglpatch.errors import SglpatchError


def _progress(msg: str) -> None:
    print(f"sglpatch: {msg}", file=sys.stderr, flush=True)


def _print_status(report: dict) -> None:
    supported = "" if report["version_supported"] else (
        f"  (the series is for {report['series_base_version']})"
    )
    print(f"sglang {report['sglang_version']} at {report['sglang_dir']}{supported}")
    print(f"state file: {'present' if report['state_file'] else 'absent'}")
    if report["interrupted_run_pending"]:
        print("an interrupted sglpatch run left a journal; "
              "the next apply or revert rolls it back")
    for patch in report["patches"]:
        print(f"  {patch['status']:<12} {patch['name']}")
        for rel in patch["files"]:
            mark = "  (locally modified)" if rel in patch["locally_modified"] else ""
            print(f"      {rel}{mark}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglpatch",
        description=f"Apply the overlap-scheduler rework series to sglang "
        f"{SGLANG_BASE_VERSION}.",
    )
    parser.add_argument("--version", action="version", version=f"sglpatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_dir(p):
        p.add_argument("--sglang-dir", metavar="DIR",
                       help="the sglang package directory (default: the one this "
                       "Python imports)")
        return p

    p = with_dir(sub.add_parser("apply", help="apply the whole series (all or nothing)"))
    p.add_argument("--dry-run", action="store_true",
                   help="check that the series applies; change nothing")
    with_dir(sub.add_parser("revert", help="restore every touched file byte for byte"))
    p = with_dir(sub.add_parser("status", help="which patches are applied"))
    p.add_argument("--json", action="store_true", help="machine-readable output")
    with_dir(sub.add_parser(
        "check", help="verify the series; and that it is applied to, or applies to, sglang"))

    p = sub.add_parser("worktree", help="(maintainers) git repo of sglang + the series")
    p.add_argument("dir", type=Path)
    p.add_argument("--wheel", type=Path, help="use this sglang wheel, do not download")
    p.add_argument("--base-only", action="store_true", help="do not apply the series")
    p = sub.add_parser("export", help="(maintainers) write patches/ from a work tree")
    p.add_argument("dir", type=Path)
    p.add_argument("--patches-dir", type=Path, default=None,
                   help="where to write (default: this package's patches/)")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "apply":
            outcome = engine.apply(args.sglang_dir, dry_run=args.dry_run,
                                   progress=_progress)
            print(outcome.message)
        elif args.command == "revert":
            print(engine.revert(args.sglang_dir, progress=_progress).message)
        elif args.command == "status":
            report = engine.status_report(args.sglang_dir)
            if args.json:
                print(json.dumps(report, indent=2))
            else:
                _print_status(report)
        elif args.command == "check":
            print(engine.check(args.sglang_dir).message)
        elif args.command == "worktree":
            from sglpatch.maintainer import make_worktree

            make_worktree(args.dir.resolve(), wheel=args.wheel,
                          with_series=not args.base_only, progress=_progress)
        elif args.command == "export":
            from sglpatch.maintainer import export_series
            from sglpatch.series import PATCHES_DIR

            export_series(args.dir.resolve(), args.patches_dir or PATCHES_DIR,
                          progress=_progress)
    except SglpatchError as e:
        print(f"sglpatch: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `sglpatch status | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("sglpatch: interrupted; nothing was left half-applied", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
