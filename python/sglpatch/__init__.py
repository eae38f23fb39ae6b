"""sglpatch: the overlap-scheduler batch-contract rework, as a patch series for sglang 0.5.12.post1."""

__version__ = "0.2.0"

# The only sglang release the series is written against.
SGLANG_BASE_VERSION = "0.5.12.post1"

# What any command says on Ctrl-C (exit 130), however early it comes.
INTERRUPTED = ("sglpatch: interrupted; the package holds all of the change or none "
               "of it (`sglpatch status` tells which)")
