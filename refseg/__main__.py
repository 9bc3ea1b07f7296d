"""``python -m refseg``: the same command line as ``refseg``."""
import sys

from refseg.cli import main

sys.exit(main())
