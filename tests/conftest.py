"""Test configuration: the installed refseg, claim-element markers, hypothesis profiles
(derandomised under CI=true), runs kept at OpenMP's thread count.

The tests run against refseg as installed (a wheel, or ``pip install .``), never the source tree
beside them: a session whose ``refseg`` resolves into this checkout stops at once.

Each test cites the claim elements it verifies with ``@pytest.mark.claim("claim1.step2.cv")``,
or is marked ``@pytest.mark.infrastructure`` when it tests no element (kernel twins, anchors, the
spec machinery). This file registers the markers, checks every cited ID against
``spec/registry.toml`` at collection, and gives each test one marker per ID and per ID prefix, so
that ``pytest -m claim1.step2.cv`` (one element) or ``pytest -m claim1`` (a whole claim) selects
them.

At the end of a session one line, the last of its output, says what it wrote to the disk and
left in the temp folder; with ``REFSEG_DISK_REPORT=1`` the largest writers come before it: the
tests (their fixtures' setup and teardown included) and the fixtures of wider scope, each as
the ``wchar`` and ``write_bytes`` it added to ``/proc/self/io``. Hypothesis keeps no example
database and writes its own files into the session's temporary folder: the suite leaves
nothing in the checkout either.
"""
import os
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
# Tests compare the bits of network runs made at different moments, and a run sized to the
# machine's load may take another thread count, whose products round differently: the suite's
# runs (and the commands it starts) keep OpenMP's count. The sizing itself is tested under
# ``loaded_machine``, which switches it back on.
os.environ["REFSEG_ADAPTIVE_THREADS"] = "0"

import refseg  # noqa: E402

CHECKOUT = Path(__file__).resolve().parent.parent
INSTALLED = Path(refseg.__file__).resolve().parent
if INSTALLED.is_relative_to(CHECKOUT):
    raise pytest.UsageError(
        f"refseg is imported from the source tree ({INSTALLED}), not from an installed "
        "package: run the tests as the README says (python -m pip install "
        "'.[test,crosscheck]' && pytest), not with python -m pytest from the checkout or an "
        "editable install")

from refseg.registry import load_registry  # noqa: E402

# the checkout's spec: the one the tests hold the installed code against
REGISTRY = load_registry(CHECKOUT / "spec")


def _prefixes(element_id):
    parts = element_id.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def pytest_configure(config):
    config.addinivalue_line("markers", "claim(id, ...): the claim elements a test verifies")
    config.addinivalue_line("markers", "infrastructure: a test of no claim element (kernel "
                                       "twins, anchors, the spec machinery)")
    names = sorted({p for e in REGISTRY.elements for p in _prefixes(e)})
    for name in names:
        config.addinivalue_line("markers", f"{name}: tests of claim element {name}")
    if DISK_REPORT:
        config.pluginmanager.register(_DiskReport(), "refseg-disk-report")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    unknown = []
    for item in items:
        for mark in item.iter_markers("claim"):
            for element_id in mark.args:
                if element_id not in REGISTRY.elements:
                    unknown.append(f"{item.nodeid}: {element_id}")
                    continue
                for name in _prefixes(element_id):
                    item.add_marker(name)
    if unknown:
        raise pytest.UsageError("tests cite unknown claim elements: " + "; ".join(unknown))


from hypothesis import settings  # noqa: E402

# No per-example deadline: the NumPy twins are deliberately slow, and this machine is noisy.
# No example database in any profile: the suite leaves nothing in the checkout (hypothesis's
# default keeps one in .hypothesis/ of the working folder), and a red run is the code's doing,
# not an example carried from an earlier run; a failure prints the blob that replays it
# (@reproduce_failure). Hypothesis's other files (its Unicode tables) go to the session's
# temporary folder (pytest_sessionstart), removed at the end.
settings.register_profile("refseg", deadline=None, max_examples=60, database=None,
                          print_blob=True)
# A long hunt for rare failing draws, run by hand: REFSEG_HYPOTHESIS=soak python -m pytest ...
settings.register_profile("soak", deadline=None, max_examples=1500, database=None,
                          print_blob=True)
# CI (CI=true, as CI services and .ci/run set it): the same draws on every run and machine
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True,
                          database=None, print_blob=True)
settings.load_profile(os.environ.get(
    "REFSEG_HYPOTHESIS", "ci" if os.environ.get("CI", "").lower() == "true" else "refseg"))


@pytest.fixture(scope="session")
def tiny_demo(tmp_path_factory):
    """One tiny ``refseg demo`` (6 training and 2 test welds, 1 epoch, input 32x96), shared by
    the tests of the demo and of its claim chart: its folder and its log (a file, not a
    terminal)."""
    import contextlib
    import io

    from refseg.cli import main

    out = tmp_path_factory.mktemp("tiny-demo") / "demo-out"
    log = io.StringIO()
    with contextlib.redirect_stderr(log), contextlib.redirect_stdout(io.StringIO()):
        status = main(["demo", "--out", str(out), "--count", "6", "--test-count", "2",
                       "--epochs", "1", "--input-size", "32x96", "--jobs", "1"])
    assert status == 0, log.getvalue()
    return out, log.getvalue()


@pytest.fixture
def loaded_machine(monkeypatch):
    """``refseg.engine.training.threads`` reads the machine as if other processes kept one of this process's
    two cores fully busy, with OpenMP's count at 2 and no earlier reading or choice left (its
    load-sized runs then take 1 thread, or time 1 against 2)."""
    from refseg import _kernels
    from refseg.engine.training import threads

    clock = [0.0]

    def reading(*_args, **_kwargs):
        clock[0] += 1.0
        return threads.CpuReading(wall=clock[0], busy=clock[0], own=0.0)

    monkeypatch.setattr(threads, "read_cpu", reading)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(threads, "_LAST", [None])
    monkeypatch.setattr(threads, "_CHOICES", {})
    monkeypatch.delenv(threads.ADAPTIVE_ENV, raising=False)
    ceiling = _kernels.openmp_threads()
    _kernels.set_openmp_threads(2)
    yield
    _kernels.set_openmp_threads(ceiling)


def _temp_entries() -> set[str]:
    import tempfile

    try:
        return set(os.listdir(tempfile.gettempdir()))
    except OSError:
        return set()


def _tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (symbolic links not followed; vanished files 0)."""
    try:
        if path.is_symlink() or not path.is_dir():
            return path.lstat().st_size if path.is_file() and not path.is_symlink() else 0
        return sum(_tree_bytes(child) for child in path.iterdir())
    except OSError:
        return 0


def _io_counters() -> dict[str, int]:
    """This process's I/O counters (Linux ``/proc/self/io``; children are added in when
    reaped); empty where there is none."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return {}
    return {key: int(value) for key, value in
            (line.split(":", 1) for line in text.splitlines() if ":" in line)}


#: The temp folder's entries when the session started (what the session leaves is the rest).
_TEMP_AT_START: set[str] = set()


def pytest_sessionstart(session):
    from hypothesis.configuration import set_hypothesis_home_dir

    _TEMP_AT_START.update(_temp_entries())
    # hypothesis writes its Unicode tables under its home folder, .hypothesis/ of the working
    # folder by default: the session's temporary folder instead, removed when it ends
    set_hypothesis_home_dir(session.config._tmp_path_factory.mktemp("hypothesis",
                                                                     numbered=False))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """Remove this session's temporary folders (data sets, runs, bundles), failed tests' too,
    unless REFSEG_KEEP_TMP=1: the suite leaves nothing in the temp folder. Then measure what
    the session wrote and left, for the terminal summary."""
    import shutil
    import tempfile

    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    given = getattr(factory, "_given_basetemp", None)  # --basetemp: the user's folder
    if basetemp is not None and given is None and os.environ.get("REFSEG_KEEP_TMP") != "1":
        shutil.rmtree(basetemp, ignore_errors=True)
    temp = Path(tempfile.gettempdir())
    new = sorted(_temp_entries() - _TEMP_AT_START)
    session.config.stash[DISK_LINE] = _disk_line(_io_counters(), temp, new)


def _disk_line(io: dict[str, int], temp: Path, new: list[str]) -> str:
    if io:
        written = (f"{io.get('write_bytes', 0):,} bytes to the disk (write_bytes; "
                   f"{io.get('cancelled_write_bytes', 0):,} of them cancelled_write_bytes, "
                   f"files deleted before writeback), {io.get('wchar', 0):,} bytes through "
                   "write calls (wchar)")
    else:
        written = "bytes written not measured (no /proc/self/io)"
    left = sum(_tree_bytes(temp / name) for name in new)
    names = ", ".join(new[:3]) + (", ..." if len(new) > 3 else "")
    return (f"refseg disk use: this session wrote {written}; left {left:,} bytes in {len(new)} "
            f"new entries of {temp}" + (f" ({names}; other processes' too, if any)" if new
                                        else ""))


DISK_LINE = pytest.StashKey[str]()

# ------------------------------------------------------------------ per-test disk accounting
#: REFSEG_DISK_REPORT=1: each test's writes (its fixtures' setup and teardown included) and
#: each wider-scoped fixture's setup, as /proc/self/io deltas, the top writers printed at the end.
DISK_REPORT = os.environ.get("REFSEG_DISK_REPORT") == "1"
#: How many of the largest writers the report lists (REFSEG_DISK_REPORT_TOP=N for another N).
DISK_REPORT_TOP = int(os.environ.get("REFSEG_DISK_REPORT_TOP", "15"))
#: (wchar, write_bytes) by test node id, and by "fixture <name> (<scope>) for <node id>".
_WRITES_BY_TEST: dict[str, tuple[int, int]] = {}
_WRITES_BY_FIXTURE: dict[str, tuple[int, int]] = {}


def _write_counters() -> tuple[int, int]:
    io = _io_counters()
    return io.get("wchar", 0), io.get("write_bytes", 0)


def _delta(before: tuple[int, int]) -> tuple[int, int]:
    after = _write_counters()
    return after[0] - before[0], after[1] - before[1]


class _DiskReport:
    """The accounting hooks, registered as a plugin of their own (a conftest's hooks do not see
    the session-scoped fixtures, set up on the session's node outside ``tests/``)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        before = _write_counters()
        yield
        _WRITES_BY_TEST[item.nodeid] = _delta(before)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope == "function":
            yield
            return
        before = _write_counters()
        yield
        key = (f"fixture {fixturedef.argname} ({fixturedef.scope}) for "
               f"{request.node.nodeid or 'the session'}")
        _WRITES_BY_FIXTURE[key] = _delta(before)


def _top_writers(writes: dict[str, tuple[int, int]]) -> list[str]:
    ranked = sorted(writes.items(), key=lambda kv: kv[1][0], reverse=True)[:DISK_REPORT_TOP]
    return [f"{wchar:>16,} {write_bytes:>16,}  {name}" for name, (wchar, write_bytes) in ranked]


def _disk_report(terminalreporter) -> None:
    def total(writes):
        return sum(w for w, _ in writes.values()), sum(b for _, b in writes.values())

    for title, writes in (("tests (fixtures' setup and teardown included)", _WRITES_BY_TEST),
                          ("module/class/package/session fixtures (setup; inside the "
                           "test that first asked for them)", _WRITES_BY_FIXTURE)):
        wchar, write_bytes = total(writes)
        terminalreporter.write_line(
            f"refseg disk report, top {DISK_REPORT_TOP} {title}; all {len(writes)}: "
            f"wchar {wchar:,}, write_bytes {write_bytes:,}")
        terminalreporter.write_line(f"{'wchar':>16} {'write_bytes':>16}  name")
        for line in _top_writers(writes):
            terminalreporter.write_line(line)


def pytest_unconfigure(config):
    """One line, the session's last: what the session wrote (this process and its reaped
    children) and what it left in the temp folder. Written as pytest ends, after its own
    summary line ("N passed in ..."), which follows every terminal-summary hook."""
    terminalreporter = config.pluginmanager.get_plugin("terminalreporter")
    line = config.stash.get(DISK_LINE, None)
    if terminalreporter is None or line is None:
        return
    if DISK_REPORT:
        _disk_report(terminalreporter)
    terminalreporter.write_line(line)
