"""Coefficient-of-variation weights and the weighted vote ([0085]-[0119])."""
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refseg.claim1 import weighting as wt
from refseg.backend import BACKENDS
from refseg.errors import InputError
from refseg.claim1.operators import OPERATORS
from strategies import edge_maps, positive_weights

EXAMPLE_WEIGHTS = {"canny": 0.4, "sobel": 0.2, "prewitt": 0.2, "log": 0.2}  # [0107]


def cv_of(edges):
    mean_img = wt.mean_image(edges)
    return wt.coefficients_of_variation(wt.standard_deviations(edges, mean_img),
                                        wt.pixel_means(edges))


@pytest.mark.claim("claim1.step2.final_weight", "claim1.step2.decision")
@pytest.mark.parametrize("backend", BACKENDS)
def test_worked_example(backend):
    """[0107]-[0115] on a 3x3 grid numbered 1-9 row-major, weights 0.4/0.2/0.2/0.2:
    position 1 all four -> edge; 2 none -> not; 8 three of four -> edge; 9 Canny alone -> not.
    Position 8 is checked with each of the four operators missing."""
    for missing in OPERATORS:
        edges = {k: np.zeros((3, 3), np.uint8) for k in OPERATORS}
        for k in OPERATORS:
            edges[k][0, 0] = 1                     # position 1
            edges[k][2, 1] = k != missing          # position 8
        edges["canny"][2, 2] = 1                   # position 9
        final = wt.final_weight(edges, EXAMPLE_WEIGHTS, backend=backend)
        decided = wt.decide(final)
        # F = sum w X - 1.5 by hand: 0.4*2 + 3*0.2*2 - 1.5 = 0.5; 1 - 1.5; ...; 0.8 + 0.6 - 1.5
        assert final[0, 0] == pytest.approx(0.5, abs=1e-12)
        assert final[0, 1] == pytest.approx(-0.5, abs=1e-12)
        assert final[2, 1] == pytest.approx(0.1 if missing == "canny" else 0.3, abs=1e-12)
        assert final[2, 2] == pytest.approx(-0.1, abs=1e-12)
        assert (decided[0, 0], decided[0, 1], decided[2, 1], decided[2, 2]) == (1, 0, 1, 0)
        assert decided.dtype == np.uint8 and decided.shape == (3, 3)


@pytest.mark.claim("claim1.step2.weights", "claim1.step2.intermediate_cv")
@given(edge_maps())
def test_weights_are_non_negative_and_sum_to_one(edges):
    cv = cv_of(edges)
    weights = wt.operator_weights(cv)
    assert list(weights) == list(OPERATORS)
    assert all(w >= 0 for w in weights.values())
    assert sum(weights.values()) == pytest.approx(1.0, abs=1e-12)
    total = wt.intermediate_cv(cv)
    if total > 0:
        for k in OPERATORS:
            assert weights[k] == pytest.approx(cv[k] / total, rel=1e-15)


@pytest.mark.claim("claim1.step2.weights", "claim1.step2.cv", "claim1.step2.std")
@given(edge_maps(), st.permutations(OPERATORS))
def test_weights_do_not_depend_on_the_order_of_the_operators(edges, order):
    """Handing the same four maps to the operators in another order permutes the weights
    with them: no operator is favoured by its position."""
    base = wt.operator_weights(cv_of(edges))
    relabel = dict(zip(OPERATORS, order))
    permuted = wt.operator_weights(cv_of({relabel[k]: edges[k] for k in OPERATORS}))
    for k in OPERATORS:
        assert permuted[relabel[k]] == pytest.approx(base[k], abs=1e-12)


@pytest.mark.claim("claim1.step2.final_weight", "claim1.step2.decision")
@given(edge_maps(), positive_weights(), st.sampled_from(OPERATORS), st.data())
def test_adding_an_edge_never_removes_a_decided_edge(edges, weights, operator, data):
    """With the weights held fixed, the vote is monotone: turning on one more operator's edge
    at any pixel can only raise F. (With weights recomputed from the maps it is not: see
    spec R-empty; the weights change with the maps.)"""
    rows, cols = edges["canny"].shape
    r, c = data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, cols - 1))
    before = wt.decide(wt.final_weight(edges, weights))
    more = {k: v.copy() for k, v in edges.items()}
    more[operator][r, c] = 1
    after = wt.decide(wt.final_weight(more, weights))
    assert (after >= before).all()


@pytest.mark.claim("claim1.step2.final_weight")
@given(edge_maps(), positive_weights())
def test_vote_is_a_weighted_majority(edges, weights):
    """F = (weights of the operators with an edge) - 0.5, up to rounding (spec R-final)."""
    final = wt.final_weight(edges, weights)
    present = sum(weights[k] * (edges[k] > 0) for k in OPERATORS)
    np.testing.assert_allclose(final, present - 0.5, rtol=0, atol=1e-12)


@pytest.mark.claim("claim1.step2.cv", "claim1.step2.weights")
@given(edge_maps())
def test_an_empty_map_gets_weight_zero(edges):
    """Spec R-empty: mu_i = 0 gives V_i = 0 and weight 0; all empty gives 1/4 each."""
    edges = dict(edges)
    edges["sobel"] = np.zeros_like(edges["sobel"])
    cv = cv_of(edges)
    assert cv["sobel"] == 0.0
    weights = wt.operator_weights(cv)
    if any(cv.values()):
        assert weights["sobel"] == 0.0
    empty = {k: np.zeros_like(edges["canny"]) for k in OPERATORS}
    assert wt.operator_weights(cv_of(empty)) == {k: 0.25 for k in OPERATORS}
    assert not wt.decide(wt.final_weight(empty, wt.operator_weights(cv_of(empty)))).any()


@pytest.mark.claim("claim1.step2.cv", "claim1.step2.std", "claim1.step2.mean_image")
@given(edge_maps(), st.floats(0.5, 1000))
def test_cv_does_not_depend_on_the_maps_scale(edges, scale):
    """0/1 and 0/255 edge images give the same coefficients (spec R-mean)."""
    scaled = {k: v * scale for k, v in edges.items()}
    a, b = cv_of(edges), cv_of(scaled)
    for k in OPERATORS:
        assert b[k] == pytest.approx(a[k], rel=1e-12)


@pytest.mark.claim("claim1.step2.mean_image", "claim1.step2.std", "claim1.step2.cv")
def test_statistics_known_answer():
    """Two pixels; canny = (1, 0), the others all 0: Ebar = (1/4, 0);
    sigma_C = sqrt(((3/4)^2 + 0) / 2), mu_C = 1/2, V_C = sigma_C / mu_C."""
    edges = {k: np.zeros((1, 2)) for k in OPERATORS}
    edges["canny"][0, 0] = 1
    mean_img = wt.mean_image(edges)
    assert mean_img.tolist() == [[0.25, 0.0]]
    std = wt.standard_deviations(edges, mean_img)
    assert std["canny"] == pytest.approx(np.sqrt(0.5625 / 2))
    assert std["sobel"] == pytest.approx(np.sqrt(0.0625 / 2))
    assert wt.pixel_means(edges)["canny"] == 0.5
    assert cv_of(edges)["canny"] == pytest.approx(np.sqrt(0.5625 / 2) / 0.5)


@pytest.mark.claim("claim1.step2.mean_image", "claim1.step2.std", "claim1.step2.cv")
@pytest.mark.parametrize("backend", BACKENDS)
@given(edges=edge_maps())
def test_fused_binary_statistics_equal_the_public_formulas(backend, edges):
    """extract() uses one fused pass for binary maps; it must equal the public functions
    exactly (every term is a multiple of 1/16, so the sums are exact)."""
    mean_img, std, mean = wt._binary_statistics(wt.binary_stack(edges), backend)
    assert np.array_equal(mean_img, wt.mean_image(edges))
    assert std == wt.standard_deviations(edges, mean_img)
    assert mean == wt.pixel_means(edges)


@pytest.mark.claim("claim1.step2.std")
def test_std_divisor_does_not_change_the_weights(monkeypatch):
    """M*N or M*N - 1 (spec R-std): every sigma_i scales alike, the weights stay."""
    rng = np.random.default_rng(0)
    edges = {k: (rng.random((7, 9)) < p).astype(np.uint8)
             for k, p in zip(OPERATORS, (0.1, 0.3, 0.35, 0.2))}
    population = wt.operator_weights(cv_of(edges))
    monkeypatch.setattr(wt, "STD_DDOF", 1)
    sample = wt.operator_weights(cv_of(edges))
    for k in OPERATORS:
        assert sample[k] == pytest.approx(population[k], rel=1e-12)


@pytest.mark.claim("claim1.step2.traverse", "claim1.step2.decision")
@given(st.integers(1, 20), st.integers(1, 20), st.data())
def test_every_pixel_is_decided_at_the_input_resolution(rows, cols, data):
    final = data.draw(st.lists(st.floats(-2, 2), min_size=rows * cols, max_size=rows * cols))
    final = np.array(final).reshape(rows, cols)
    decided = wt.decide(final)
    assert decided.shape == (rows, cols)
    assert np.array_equal(decided, (final >= 0).astype(np.uint8))


@pytest.mark.claim("claim1.step2.final_weight", "claim1.step2.weights")
def test_bad_maps_and_weights_are_refused():
    good = {k: np.zeros((3, 3)) for k in OPERATORS}
    with pytest.raises(InputError, match="keys"):
        wt.mean_image({"canny": good["canny"]})
    with pytest.raises(InputError, match="differ in shape"):
        wt.mean_image({**good, "log": np.zeros((3, 4))})
    with pytest.raises(InputError, match=">= 0"):
        wt.mean_image({**good, "log": -np.ones((3, 3))})
    with pytest.raises(InputError, match="NaN"):
        wt.mean_image({**good, "log": np.full((3, 3), np.nan)})
    with pytest.raises(InputError, match="finite"):
        wt.operator_weights({k: np.nan for k in OPERATORS})
    with pytest.raises(InputError, match="shape"):
        wt.standard_deviations(good, np.zeros((2, 2)))


@pytest.mark.claim("claim1.step2.final_weight")
def test_all_sixteen_presence_patterns_under_the_example_weights():
    """Exhaustive: under 0.4/0.2/0.2/0.2 a pixel is an edge exactly when the present weight
    reaches one half."""
    for pattern in itertools.product([0, 1], repeat=4):
        edges = {k: np.full((1, 1), bit, np.uint8) for k, bit in zip(OPERATORS, pattern)}
        present = sum(w * bit for w, bit in zip(EXAMPLE_WEIGHTS.values(), pattern))
        decided = wt.decide(wt.final_weight(edges, EXAMPLE_WEIGHTS))[0, 0]
        assert decided == (present >= 0.5 - 1e-12), pattern
