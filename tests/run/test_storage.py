"""A run's storage: the last checkpoint's trained arrays stored against the starting weights
(byte planes of their bits XOR the starting bits, deflated), read back bit for bit."""
import io

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refseg.errors import InputError
from refseg.run.storage import (AGAINST_START_KEY, MODEL_PREFIX, pack_against_start,
                                unpack_against_start)

FLOATS = st.sampled_from([np.float32, np.float64, np.int64, np.uint8])


@st.composite
def trained_and_start(draw):
    """Arrays of any dtype and shape, each with a starting array of the same kind: anything,
    including NaNs with payloads, infinities and -0.0, compared by their bits."""
    trained, start = {}, {}
    for i in range(draw(st.integers(1, 4))):
        dtype = np.dtype(draw(FLOATS))
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=5))
        raw = hnp.arrays(np.uint8, (int(np.prod(shape)) * dtype.itemsize,))
        trained[f"layer{i}/kernel"] = draw(raw).view(dtype).reshape(shape)
        start[f"layer{i}/kernel"] = draw(raw).view(dtype).reshape(shape)
    return trained, start


@pytest.mark.infrastructure
@given(trained_and_start())
def test_trained_arrays_packed_against_the_start_come_back_bit_for_bit(case):
    trained, start = case
    arrays = {f"{MODEL_PREFIX}{k}": v for k, v in trained.items()}
    arrays["epoch"] = np.array(3)
    packed = pack_against_start(arrays, start)
    assert packed["epoch"] is arrays["epoch"]
    for key, value in trained.items():
        planes = packed[f"{MODEL_PREFIX}{key}"]
        assert planes.dtype == np.uint8 and planes.shape == (value.itemsize, value.size)
    planes = {k[len(MODEL_PREFIX):]: v for k, v in packed.items() if k.startswith(MODEL_PREFIX)}
    back = unpack_against_start(planes, packed[AGAINST_START_KEY], start, "run/checkpoint.npz")
    assert back.keys() == trained.keys()
    for key, value in trained.items():
        assert back[key].dtype == value.dtype and back[key].shape == value.shape
        assert back[key].tobytes() == value.tobytes(), key


@pytest.mark.infrastructure
def test_a_plane_holds_one_byte_of_every_value_and_an_unchanged_value_is_zeros():
    start = {"w": np.array([1.0, -2.5, 3.0], np.float32)}
    trained = {"w": np.array([1.0, -2.5, np.nextafter(np.float32(3.0), np.float32(4.0))],
                             np.float32)}
    planes = pack_against_start({"model/w": trained["w"]}, start)["model/w"]
    # little-endian: row 0 holds the least significant byte of each value
    np.testing.assert_array_equal(planes, [[0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0]])


@pytest.mark.infrastructure
def test_planes_that_do_not_fit_or_do_not_rebuild_are_refused_naming_the_file():
    start = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    trained = {"model/w": start["w"] + 0.5}
    packed = pack_against_start(trained, start)
    planes, digest = {"w": packed["model/w"]}, packed[AGAINST_START_KEY]
    with pytest.raises(InputError, match=r"^run/checkpoint.npz: a damaged refseg checkpoint "
                                         r"\(w does not fit"):
        unpack_against_start({"w": planes["w"][:, :5]}, digest, start, "run/checkpoint.npz")
    with pytest.raises(InputError, match="damaged refseg checkpoint"):
        unpack_against_start({"v": planes["w"]}, digest, start, "run/checkpoint.npz")
    flipped = planes["w"].copy()
    flipped[0, 0] ^= 1
    with pytest.raises(InputError, match=r"^run/checkpoint.npz: its trained weights do not "
                                         "rebuild on the run's starting weights"):
        unpack_against_start({"w": flipped}, digest, start, "run/checkpoint.npz")
    other = {"w": start["w"] + 1}
    with pytest.raises(InputError, match="do not rebuild"):
        unpack_against_start(planes, digest, other, "run/checkpoint.npz")
