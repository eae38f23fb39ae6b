"""The command line of sglang 0.5.12.post1's server, without importing sglang.

`sglpatch status --explain -- FLAGS` must read launch flags as
`python -m sglang.launch_server FLAGS` does: every option sglang has (so an
abbreviation such as `--attention-back` resolves, or is ambiguous, as it is
there), its choices and its int / float types, refusing what sglang's parser
refuses. Importing sglang means importing torch (seconds), so the parser's
shape is kept here as a table, OPTIONS, written from sglang 0.5.12.post1's
own parser (`ServerArgs.add_cli_args`) by `table_from_parser`; a test checks
the table against that parser whenever sglang is importable. The table is
the module sglpatch.sglang_options, written whole by
`python -m sglpatch.launch_flags > python/sglpatch/sglang_options.py` in an
environment with sglang 0.5.12.post1 installed.

Not kept: sglang's other value converters (JSON, human-readable ints, LoRA
paths), whose values nothing here reads, and `--model-path`'s requirement
(explaining a launch needs no model). `--config` files are not read.
"""

import argparse
import sys
from typing import Dict, List, Optional, Sequence

# Defaults, in sglang 0.5.12.post1's parser, of the options that
# sglpatch.explain reads (checked with the table).
DEFAULTS: Dict[str, object] = {
    "attention_backend": None,
    "attention_context_parallel_size": 1,
    "config": None,
    "data_parallel_size": 1,
    "decode_attention_backend": None,
    "device": None,
    "disable_overlap_schedule": False,
    "disaggregation_decode_enable_offload_kvcache": False,
    "dllm_algorithm": None,
    "enable_dp_attention": False,
    "enable_hierarchical_cache": False,
    "enable_mixed_chunk": False,
    "enable_two_batch_overlap": False,
    "help": argparse.SUPPRESS,
    "hicache_io_backend": "kernel",
    "hicache_mem_layout": "layer_first",
    "kv_cache_dtype": "auto",
    "page_size": None,
    "pipeline_parallel_size": 1,
    "prefill_attention_backend": None,
    "speculative_algorithm": None,
    "speculative_attention_mode": "prefill",
    "speculative_draft_attention_backend": None,
    "speculative_eagle_topk": None,
    "speculative_num_draft_tokens": None,
    "speculative_num_steps": None,
}

_TYPES = {"int": int, "float": float}


def table_from_parser(parser: argparse.ArgumentParser) -> tuple:
    """One row per option of `parser`, in its order:
    (option strings, dest, nargs, type, choices, const), where nargs is 0
    for a flag, "bool" for a --x / --no-x pair, else argparse's nargs; type
    is "int", "float" or None (the string is kept); const only for nargs "?";
    choices in the parser's order (sorted where sglang gives a set).
    """
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse.BooleanOptionalAction):
            nargs = "bool"
        elif action.nargs == 0:
            nargs = 0
        else:
            nargs = action.nargs
        kind = {int: "int", float: "float"}.get(action.type)
        choices = action.choices
        if isinstance(choices, (set, frozenset)):  # no order to keep
            choices = sorted(choices)
        choices = None if choices is None else tuple(choices)
        const = action.const if nargs == "?" else None
        rows.append((tuple(action.option_strings), action.dest, nargs, kind, choices, const))
    return tuple(rows)


class LaunchFlagsError(Exception):
    """What sglang's parser would refuse, as its one-line message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise LaunchFlagsError(message)


def launch_parser(options: Sequence[tuple] = None) -> argparse.ArgumentParser:
    """An argparse parser with the shape of sglang's (OPTIONS), whose errors
    raise LaunchFlagsError instead of printing a usage and exiting."""
    parser = _Parser(prog="sglang serve", add_help=False)
    if options is None:
        from sglpatch.sglang_options import OPTIONS as options
    for strings, dest, nargs, kind, choices, const in options:
        kwargs = {"dest": dest, "default": DEFAULTS.get(dest)}
        if nargs == "bool":
            parser.add_argument(strings[0], action=argparse.BooleanOptionalAction, **kwargs)
            continue
        if nargs == 0:
            parser.add_argument(*strings, action="store_true", **kwargs)
            continue
        if nargs is not None:
            kwargs["nargs"] = nargs
        if nargs == "?":
            kwargs["const"] = const
        if kind is not None:
            kwargs["type"] = _TYPES[kind]
        if choices is not None:
            kwargs["choices"] = choices
        parser.add_argument(*strings, **kwargs)
    return parser


def parse_launch_flags(flags: List[str]) -> argparse.Namespace:
    """The flags as sglang's parser reads them; LaunchFlagsError with its
    message where it would refuse them."""
    return launch_parser().parse_args(flags)


def render_table(table: tuple) -> str:
    """The text of the module sglpatch.sglang_options holding `table`."""
    lines = [
        '"""The options of sglang 0.5.12.post1\'s server command line, one row each:',
        "(option strings, dest, nargs, type, choices, const); see",
        "sglpatch.launch_flags.table_from_parser, which wrote this file from",
        "sglang's own parser. Do not edit by hand.",
        '"""',
        "",
        "# fmt: off",
        "OPTIONS = (",
    ]
    lines += [f"    {row!r}," for row in table]
    lines += [")", "# fmt: on"]
    return "\n".join(lines) + "\n"


def main() -> int:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    sys.stdout.write(render_table(table_from_parser(parser)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

