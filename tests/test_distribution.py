"""What the installed distribution carries besides the code: the licence its metadata names
and the notice on the patent and the photographs (``pyproject.toml``'s license-files, built
into the wheel's ``.dist-info/licenses/``)."""
from importlib import metadata

import pytest

from checkout import ROOT

pytestmark = pytest.mark.infrastructure


def test_the_installed_wheel_carries_the_licence_and_the_notice():
    dist = metadata.distribution("refseg")
    assert dist.metadata["License-Expression"] == "MIT"
    files = {f.name: f for f in dist.files if f.parent.name == "licenses"}
    assert set(files) >= {"LICENSE", "NOTICE"}, sorted(files)
    for name in ("LICENSE", "NOTICE"):
        assert files[name].read_text(encoding="utf-8") == \
            (ROOT / name).read_text(encoding="utf-8")
    assert "MIT License" in files["LICENSE"].read_text(encoding="utf-8")
    notice = files["NOTICE"].read_text(encoding="utf-8")
    assert "CN114419081B" in notice and "grants no right" in notice
    for photo in ("astronaut.png", "coffee.png", "chelsea.png"):
        assert photo in notice
