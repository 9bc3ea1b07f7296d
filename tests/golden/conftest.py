"""The golden bundle the golden tests share: written once per session (about 20 s), with the
network's weights and whole copies of the network's summary-stored arrays."""
import pytest

from refseg import golden


@pytest.fixture(scope="session")
def golden_bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("golden") / "bundle"
    done = golden.write_bundle(folder, keep=("net/*",), with_weights=True)
    manifest, stored = golden.read_bundle(folder)
    return folder, manifest, stored, done.kept
