"""refseg.zipwrite: .npz archives compressed on threads hold the bytes zipfile writes."""
import io
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refseg import publish, zipwrite
from refseg.zipwrite import write_npz_members

pytestmark = pytest.mark.infrastructure


def deflate_integers(value):
    return value.dtype.kind not in "fc"


def zipfile_npz(arrays: dict) -> bytes:
    """The archive Python's zipfile and numpy's .npy writer make of ``arrays``, one member
    after another: the reference."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, value in arrays.items():
            value = np.asanyarray(value)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = (zipfile.ZIP_DEFLATED if deflate_integers(value)
                                  else zipfile.ZIP_STORED)
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, value, allow_pickle=False)
    return buffer.getvalue()


def threaded_npz(arrays: dict, threads: int) -> bytes:
    buffer = io.BytesIO()
    write_npz_members(buffer, arrays, deflate_integers, threads=threads)
    return buffer.getvalue()


ARRAYS = st.dictionaries(
    st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=8),
    hnp.arrays(st.sampled_from([np.uint8, np.int16, np.int64, np.float32, np.float64, bool]),
               hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40)),
    max_size=6)


@settings(max_examples=60, deadline=None)
@given(ARRAYS, st.integers(1, 4))
def test_the_same_bytes_as_zipfile_on_any_number_of_threads(arrays, threads):
    assert threaded_npz(arrays, threads) == zipfile_npz(arrays)


def test_a_trained_checkpoints_byte_planes_round_trip():
    rng = np.random.default_rng(0)
    planes = {f"model/layer{i}/kernel": rng.integers(0, 256, (4, 300_000), dtype=np.uint8)
              for i in range(3)}
    planes["model/layer0/kernel"][3] = 0  # a plane training did not move deflates to nothing
    arrays = {**planes, "optimizer/m": rng.standard_normal(1000).astype(np.float32),
              "epoch": np.array(3)}
    data = threaded_npz(arrays, threads=2)
    assert data == zipfile_npz(arrays)
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.testzip() is None
    kinds = {info.filename: info.compress_type for info in archive.infolist()}
    assert kinds["optimizer/m.npy"] == zipfile.ZIP_STORED
    assert kinds["model/layer1/kernel.npy"] == zipfile.ZIP_DEFLATED
    with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
        assert set(loaded.files) == set(arrays)
        for name, value in arrays.items():
            np.testing.assert_array_equal(loaded[name], value)


@pytest.mark.parametrize("ahead", [1, 5_000, 1 << 30])
def test_the_members_held_ahead_do_not_change_the_bytes(monkeypatch, ahead):
    rng = np.random.default_rng(1)
    arrays = {f"m{i}": rng.integers(0, 4, size, dtype=np.uint8)
              for i, size in enumerate([20_000, 10, 3_000, 0, 50_000, 7])}
    monkeypatch.setattr(zipwrite, "AHEAD_BYTES", ahead)
    assert threaded_npz(arrays, threads=3) == zipfile_npz(arrays)


def test_more_members_than_a_zip_counts_take_the_zip64_end_records():
    arrays = {f"a{i}": np.array([i % 7], np.uint8) for i in range(65_536)}
    data = threaded_npz(arrays, threads=2)
    assert data == zipfile_npz(arrays)
    assert b"PK\x06\x06" in data[-200:]
    assert len(zipfile.ZipFile(io.BytesIO(data)).infolist()) == 65_536


def test_a_fortran_ordered_array_is_stored_in_c_order():
    value = np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    with np.load(io.BytesIO(threaded_npz({"f": value}, threads=1))) as loaded:
        np.testing.assert_array_equal(loaded["f"], value)
        assert loaded["f"].flags.c_contiguous


def test_object_arrays_are_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "objects.npz"
    with pytest.raises(ValueError, match="allow_pickle=False"):
        publish.write_npz(path, compressed=True, ok=np.zeros(3, np.uint8),
                          bad=np.array([{}], dtype=object))
    assert list(tmp_path.iterdir()) == []


def test_write_npz_compressed_writes_the_archive_whole(tmp_path):
    arrays = {"labels": np.arange(5000, dtype=np.uint8) % 3, "x": np.ones(7, np.float32)}
    publish.write_npz(tmp_path / "out.npz", compressed=True, **arrays)
    assert (tmp_path / "out.npz").read_bytes() == zipfile_npz(arrays)
