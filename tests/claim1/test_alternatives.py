"""The alternatives to the claim-1 readings (``refseg.claim1.alternatives``): the default variant
is ``features.extract`` bit for bit, each alternative changes one reading, and each choice does
what its reading's alternative says."""
import math

import numpy as np
import pytest
from hypothesis import given, settings

from refseg.backend import BACKENDS
from refseg.claim1 import alternatives as al
from refseg.claim1 import features
from refseg.claim1.operators import OPERATORS
from refseg.data.synthetic import weld_image
from refseg.errors import InputError
from refseg.registry import load_registry
from checkout import SPEC
from strategies import rgb_images

pytestmark = pytest.mark.infrastructure
WELD = weld_image(3, (48, 160)).rgb


def variant_of(name):
    return al.BY_NAME[name].variant


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=25, deadline=None)
@given(rgb=rgb_images())
def test_the_default_variant_is_extract_bit_for_bit(backend, rgb):
    r = features.extract(rgb, backend=backend)
    v = al.extract_variant(rgb, backend=backend)
    for name in ("gray", "blurred", "final_weight", "feature_map"):
        np.testing.assert_array_equal(getattr(v, name), getattr(r, name), err_msg=name)
    for k in OPERATORS:
        np.testing.assert_array_equal(v.edges[k], r.edges[k], err_msg=k)
    assert v.weights == r.weights
    np.testing.assert_array_equal(v.feature_image, r.feature_map.astype(np.float32))


def test_the_default_variant_is_extract_on_a_weld():
    r, v = features.extract(WELD), al.extract_variant(WELD)
    np.testing.assert_array_equal(v.feature_map, r.feature_map)
    assert v.weights == r.weights


def test_each_alternative_changes_one_reading_and_gives_a_feature_map():
    readings = load_registry(SPEC).reading_ids
    assert len(al.BY_NAME) == len(al.ALTERNATIVES)
    for a in al.ALTERNATIVES:
        assert len(a.variant.changes()) == 1, a.name
        assert a.reading in readings, a.name
        v = al.extract_variant(WELD, a.variant)
        assert v.feature_map.shape == WELD.shape[:2] and v.feature_map.dtype == np.uint8
        assert set(np.unique(v.feature_map)) <= {0, 1}
        assert v.feature_image.dtype == np.float32
        assert 0 <= v.feature_image.min() and v.feature_image.max() <= 1
        assert sum(v.weights.values()) == pytest.approx(1, abs=1e-12), a.name


def test_keeping_the_maps_only_gives_the_same_maps_and_weights_for_every_alternative():
    """``keep="maps"`` (what the walkthrough runs) drops the float planes and decides a binary
    vote by blocks of rows: the edge images, weights and feature map are those of
    ``keep="all"``, bit for bit, under every alternative."""
    for a in al.ALTERNATIVES:
        full = al.extract_variant(WELD, a.variant)
        light = al.extract_variant(WELD, a.variant, keep="maps")
        assert (light.gray, light.blurred, light.final_weight, light.feature_image) == \
            (None, None, None, None), a.name
        np.testing.assert_array_equal(light.feature_map, full.feature_map, err_msg=a.name)
        assert light.weights == full.weights, a.name
        for k in OPERATORS:
            np.testing.assert_array_equal(light.edges[k], full.edges[k], err_msg=a.name)
    with pytest.raises(InputError, match="keep"):
        al.extract_variant(WELD, keep="some")


def test_the_steps_one_at_a_time_are_the_extraction_bit_for_bit_under_every_alternative():
    """``variant_steps`` (what ``golden compare`` runs beside refseg's steps) yields the arrays
    of ``extract_variant`` in pipeline order, bit for bit and of the same dtypes, under refseg's
    readings, every alternative and every library default."""
    from refseg.golden.flagged import variant_arrays

    few_levels = np.zeros((20, 24, 3), np.uint8)
    few_levels[5:15, 6:18] = 90
    for rgb in (WELD, few_levels):
        for variant in (al.Variant(), *(a.variant for a in (*al.ALTERNATIVES,
                                                            *al.LIBRARY_DEFAULTS))):
            whole = variant_arrays(rgb, variant)
            steps = list(al.variant_steps(rgb, variant))
            assert [s for s, _ in steps] == list(whole), variant
            for step, array in steps:
                assert array.dtype == whole[step].dtype and array.shape == whole[step].shape
                np.testing.assert_array_equal(array, whole[step], err_msg=f"{variant} {step}")


def test_a_revote_from_refsegs_maps_is_the_alternatives_extraction():
    """Every alternative that changes only the statistics, weights or vote gives from
    ``extract``'s own edge maps the feature map ``extract_variant`` gives (12 of them); an
    alternative changing the maps is refused."""
    edges = features.extract(WELD).edges
    vote_only = [a for a in al.ALTERNATIVES if set(a.variant.changes()) <= set(al.VOTE_FIELDS)]
    assert len(vote_only) == 12
    for a in vote_only:
        np.testing.assert_array_equal(al.revote(edges, a.variant),
                                      al.extract_variant(WELD, a.variant).feature_map,
                                      err_msg=a.name)
    with pytest.raises(ValueError, match="log_ratio"):
        al.revote(edges, variant_of("log-ratio-3"))


def test_bad_variants_and_names_are_refused():
    with pytest.raises(InputError, match="border"):
        al.extract_variant(WELD, al.Variant(border="wrap"))
    with pytest.raises(InputError, match="offset"):
        al.extract_variant(WELD, al.Variant(offset=float("nan")))
    with pytest.raises(InputError, match="no such alternative"):
        al.feature_image(WELD, "gray-purple")


@pytest.mark.parametrize("offset, exact", [(1.5, True), (1.41, True), (1.45, True),
                                           (1.6, True), (1.4, False), (1.39, False),
                                           (1.61, False), (1.7, False), (1.0, False)])
def test_worked_example_holds_for_offsets_in_the_interval_only(offset, exact):
    """By hand: with weights 0.4/0.2/0.2/0.2, F = 1 + (weight of the operators with an edge)
    - offset; the four positions need 1.4 < offset <= 1.6 (spec R-final)."""
    assert al.worked_example(al.Variant(offset=offset)) is exact


def test_the_continuous_votes_reproduce_the_worked_example():
    for name in ("continuous-literal", "continuous-graded"):
        assert al.worked_example(variant_of(name))


def test_gray_rules_on_a_known_colour():
    rgb = np.zeros((4, 5, 3), np.uint8)
    rgb[...] = (10, 200, 30)
    expected = {"average": 80.0, "maximum": 200.0, "green": 200.0,
                "bt709": 0.2126 * 10 + 0.7152 * 200 + 0.0722 * 30,
                "rounded": 124.0}  # 0.299*10 + 0.587*200 + 0.114*30 = 123.81
    for rule, value in expected.items():
        gray = al.extract_variant(rgb, al.Variant(gray=rule)).gray
        np.testing.assert_allclose(gray, value, rtol=0, atol=1e-12, err_msg=rule)


def test_border_rules_on_a_constant_image():
    rgb = np.full((5, 6), 100.0)
    e = math.exp(-1 / (2 * 0.8 ** 2))
    side = (1 + e) / (1 + 2 * e)  # the kernel's mass on one side's two rows (or columns)
    for border in ("reflect101", "replicate"):
        blurred = al.extract_variant(rgb, al.Variant(border=border)).blurred
        np.testing.assert_allclose(blurred, 100, rtol=0, atol=1e-12)
    blurred = al.extract_variant(rgb, al.Variant(border="zero")).blurred
    assert blurred[0, 0] == pytest.approx(100 * side ** 2, abs=1e-12)
    assert blurred[0, 2] == pytest.approx(100 * side, abs=1e-12)
    assert blurred[2, 2] == pytest.approx(100, abs=1e-12)


def test_thresholds_move_the_maps_the_way_their_rule_says():
    """Same low threshold, higher high: a subset of Canny's chains; a higher LoG jump: fewer
    crossings; thinning keeps only pixels of the thresholded map."""
    weld = weld_image(0).rgb
    chosen = al.extract_variant(weld).edges
    ratio3 = al.extract_variant(weld, variant_of("canny-ratio-3")).edges
    ratio15 = al.extract_variant(weld, variant_of("canny-ratio-1.5")).edges
    assert not (ratio3["canny"] & ~chosen["canny"].astype(bool)).any()
    assert not (chosen["canny"] & ~ratio15["canny"].astype(bool)).any()
    assert ratio3["canny"].sum() < chosen["canny"].sum() < ratio15["canny"].sum()
    log1 = al.extract_variant(weld, variant_of("log-ratio-1")).edges["log"]
    log3 = al.extract_variant(weld, variant_of("log-ratio-3")).edges["log"]
    assert not (log3 & ~chosen["log"].astype(bool)).any()
    assert not (chosen["log"] & ~log1.astype(bool)).any()
    thinned = al.extract_variant(weld, variant_of("binary-thinned")).edges
    for k in ("sobel", "prewitt"):
        assert not (thinned[k] & ~chosen[k].astype(bool)).any()
        assert 0 < thinned[k].sum() < chosen[k].sum()


def test_continuous_maps_are_normalised_responses():
    literal = al.extract_variant(WELD, variant_of("continuous-literal"))
    graded = al.extract_variant(WELD, variant_of("continuous-graded"))
    for k in OPERATORS:
        m = literal.edges[k]
        assert m.dtype == np.float64 and m.min() >= 0 and m.max() == 1.0, k
    assert literal.weights == graded.weights
    # graded: F = sum w (1 + E) - 1.5 and the network's image is sum w E
    by_hand = sum(graded.weights[k] * graded.edges[k] for k in OPERATORS)
    np.testing.assert_allclose(graded.feature_image, by_hand, rtol=0, atol=1e-6)
    clear = np.abs(by_hand - 0.5) > 1e-9  # away from the tie, rounding cannot decide
    np.testing.assert_array_equal(graded.feature_map[clear], (by_hand > 0.5)[clear])
    # literal: an operator "has an edge" wherever its response is > 0 ([0106])
    votes = sum(graded.weights[k] * (literal.edges[k] > 0) for k in OPERATORS)
    clear = np.abs(votes - 0.5) > 1e-9
    np.testing.assert_array_equal(literal.feature_map[clear], (votes > 0.5)[clear])
    assert literal.feature_map.mean() > 0.3  # nearly every response is > 0 somewhere near


def test_weight_rules():
    chosen = features.extract(WELD)
    equal = al.extract_variant(WELD, variant_of("weights-equal")).weights
    assert equal == dict.fromkeys(OPERATORS, 0.25)
    inverse = al.extract_variant(WELD, variant_of("weights-inverse")).weights
    products = [inverse[k] * chosen.cv[k] for k in OPERATORS]  # w_i proportional to 1 / V_i
    np.testing.assert_allclose(products, products[0], rtol=1e-12)
    for name in ("mean-255", "std-ddof-1"):  # both scale every V_i alike (R-mean, R-std)
        w = al.extract_variant(WELD, variant_of(name)).weights
        np.testing.assert_allclose([w[k] for k in OPERATORS],
                                   [chosen.weights[k] for k in OPERATORS], rtol=1e-12)


def test_an_empty_map_takes_all_the_weight_or_none():
    edges = {k: np.zeros((4, 4), np.uint8) for k in OPERATORS}
    edges["sobel"][1, 1] = edges["prewitt"][1, :] = edges["log"][:, 2] = 1
    takes_all, _ = al._statistics(edges, variant_of("empty-takes-all"), "cython")
    assert takes_all == {"canny": 1.0, "sobel": 0.0, "prewitt": 0.0, "log": 0.0}
    _, decided = al.vote(edges, takes_all)
    assert not decided.any()
    assert al._statistics(edges, al.Variant(), "cython")[0]["canny"] == 0.0


def test_log13_kernel_is_matlabs_shape():
    k = al.log13_kernel()
    assert k.shape == (13, 13)
    assert abs(k.sum()) < 1e-15
    np.testing.assert_array_equal(k, k.T)
    np.testing.assert_array_equal(k, k[::-1, ::-1])
    assert k[6, 6] == k.min() < 0
