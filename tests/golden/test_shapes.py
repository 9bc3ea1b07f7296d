"""The shape of a difference, named on constructed candidates: each pattern is found with its
value, and a difference without a pattern gets none."""
import numpy as np
import pytest

from refseg.golden.shapes import difference_shape

RNG = np.random.default_rng(7)
IMAGE = RNG.uniform(0, 255, (12, 17))
SQUARE = RNG.uniform(0, 255, (11, 11))
EDGES = (RNG.uniform(size=(12, 17)) > 0.7).astype(np.uint8)
ALLOWED = 1e-9 * 255


@pytest.mark.infrastructure
def test_a_constant_ratio_is_named_with_its_value():
    found = difference_shape(IMAGE, IMAGE * (1 / (4 * np.sqrt(2))), ALLOWED)
    assert found["kind"] == "ratio" and not found["inside_only"]
    assert found["value"] == pytest.approx(0.1767766952966369, rel=1e-12)
    assert "0.176777" in found["text"] and "5.65685" in found["text"]


@pytest.mark.infrastructure
def test_a_constant_offset_is_named_with_its_value():
    found = difference_shape(IMAGE, IMAGE - 0.5, ALLOWED)
    assert found["kind"] == "offset" and found["value"] == pytest.approx(-0.5, abs=1e-12)
    assert "-0.5" in found["text"]


@pytest.mark.infrastructure
def test_a_difference_on_the_border_ring_only():
    candidate = IMAGE.copy()
    candidate[0, 3] += 1.0
    candidate[5, -2] -= 2.0
    found = difference_shape(IMAGE, candidate, ALLOWED)
    assert (found["kind"], found["width"], found["count"]) == ("border ring", 2, 2)


@pytest.mark.infrastructure
def test_a_ratio_inside_a_ring_that_differs_too():
    candidate = IMAGE * 0.5
    candidate[0, :] = 7.0
    found = difference_shape(IMAGE, candidate, ALLOWED)
    assert found["kind"] == "ratio" and found["inside_only"] and found["ring"] == 1
    assert found["value"] == pytest.approx(0.5, rel=1e-12)


@pytest.mark.infrastructure
def test_transpose_flip_shift_and_channel_order():
    assert difference_shape(SQUARE, SQUARE.T.copy(), ALLOWED)["kind"] == "transpose"
    # another shape: a transpose is all it can be
    assert difference_shape(IMAGE, IMAGE.T.copy(), ALLOWED)["kind"] == "transpose"
    assert difference_shape(IMAGE, IMAGE[:, ::-1], ALLOWED)["axes"] == [1]
    assert difference_shape(IMAGE, IMAGE[::-1], ALLOWED)["axes"] == [0]
    moved = np.zeros_like(IMAGE)
    moved[:, 1:] = IMAGE[:, :-1]
    found = difference_shape(IMAGE, moved, ALLOWED)
    assert (found["kind"], found["by"]) == ("shift", [0, 1])
    rgb = RNG.integers(0, 256, (6, 9, 3), dtype=np.uint8)
    assert difference_shape(rgb, rgb[..., ::-1], 0.0)["kind"] == "channel order"


@pytest.mark.infrastructure
def test_uint8_rounding():
    found = difference_shape(IMAGE, np.round(IMAGE), ALLOWED)
    assert found["kind"] == "rounding" and "halves to even" in found["rule"]
    assert difference_shape(IMAGE, np.floor(IMAGE), ALLOWED)["kind"] == "rounding"


@pytest.mark.infrastructure
def test_binary_maps_complemented_or_one_sided():
    assert difference_shape(EDGES, 1 - EDGES, 0.0)["kind"] == "complement"
    more = EDGES.copy()
    more[5, 5] = more[6, 8] = 1
    extra = int(more.sum() - EDGES.sum())
    found = difference_shape(EDGES, more, 0.0)
    assert found["kind"] == "superset" and found["extra"] == extra > 0
    less = EDGES.copy()
    inside = np.zeros_like(EDGES)
    inside[4:-4, 4:-4] = EDGES[4:-4, 4:-4]
    less[tuple(np.argwhere(inside)[0])] = 0
    assert difference_shape(EDGES, less, 0.0)["kind"] == "subset"


@pytest.mark.infrastructure
def test_no_shape_for_a_patternless_difference_and_none_for_agreement():
    assert difference_shape(IMAGE, IMAGE + RNG.normal(0, 1, IMAGE.shape), ALLOWED) is None
    assert difference_shape(IMAGE, IMAGE + 1e-12, ALLOWED) is None
    mixed = EDGES.copy()
    interior = np.zeros(EDGES.shape, bool)
    interior[4:-4, 4:-4] = True
    on, off = np.argwhere((EDGES == 1) & interior)[0], np.argwhere((EDGES == 0) & interior)[0]
    mixed[tuple(on)], mixed[tuple(off)] = 0, 1
    assert difference_shape(EDGES, mixed, 0.0) is None
    scalar = difference_shape(np.float64(4.0), np.float64(1.0), 0.0)
    assert scalar["kind"] == "value" and scalar["value"] == 0.25
