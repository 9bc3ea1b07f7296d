"""``python -m refseg``: the same command line as ``refseg``.

Run from the root of a source checkout, ``python -m refseg`` finds the source tree's
``refseg/`` before any installed copy; without its compiled kernels (built only by an install)
it says so in one line instead of failing deep inside a command.
"""
import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("refseg._kernels") is None:
    here = Path(__file__).resolve().parent
    print(f"refseg: error: {here}: refseg's source tree, without its compiled kernels, hides "
          "any installed refseg here: install the package (python -m pip install .) and run "
          "`refseg ...`, or `python -P -m refseg ...`", file=sys.stderr)
    sys.exit(2)

from refseg.cli import main  # noqa: E402

sys.exit(main())
