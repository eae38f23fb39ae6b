import sys

from sglpatch.cli import main

sys.exit(main())
