"""The source checkout the tests run from, and the ``refseg`` command as a user runs it."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec"
TESTS = ROOT / "tests"


def run_refseg(*args, cwd=None, env=None, **kwargs) -> subprocess.CompletedProcess:
    """``python -P -m refseg ARGS``: the installed refseg (``-P``: the working folder, which may
    be the checkout, is not put on the import path), output captured as text."""
    return subprocess.run([sys.executable, "-P", "-m", "refseg", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env, **kwargs)


def synth_images(folder: Path, count: int, size: str) -> list:
    """The images of a ``refseg synth`` set written into ``folder/set``, sorted."""
    result = run_refseg("synth", "--count", count, "--out", folder / "set", "--size", size)
    assert result.returncode == 0, result.stderr
    return sorted((folder / "set" / "images").iterdir())
