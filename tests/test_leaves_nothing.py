"""The suite leaves nothing behind (README: "leaves nothing in the temp folder, and its last
line says so"): no example database nor Unicode tables of hypothesis in the working folder, the
session's own files removed, and the disk line the last line of pytest's output."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.infrastructure
HERE = Path(__file__).resolve()


@given(text=st.text(max_size=3))
def test_a_property_test_keeps_no_example_database(tmp_path_factory, text):
    """Every profile runs without hypothesis's example database, and hypothesis's own files
    (st.text() writes its Unicode tables) go under the session's temporary folder."""
    from hypothesis.configuration import storage_directory

    assert settings().database is None
    home = storage_directory(intent_to_write=False).path
    assert home.is_relative_to(tmp_path_factory.getbasetemp())


def test_a_session_leaves_nothing_in_its_folder_and_ends_with_its_disk_line(tmp_path):
    """A session of the property test above, started in an empty folder: it passes, leaves
    the folder empty (no .hypothesis/), and its last line is the disk line, after pytest's
    own summary."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("REFSEG_KEEP_TMP", "REFSEG_DISK_REPORT", "PYTEST_ADDOPTS")}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q",
         f"{HERE}::test_a_property_test_keeps_no_example_database"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert lines[-1].startswith("refseg disk use: this session wrote "), lines[-3:]
    assert "1 passed" in lines[-2], lines[-3:]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
