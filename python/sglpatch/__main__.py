import sys

from sglpatch import INTERRUPTED

try:
    from sglpatch.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python loads the command line
    print(INTERRUPTED, file=sys.stderr)
    sys.exit(130)

sys.exit(main())
