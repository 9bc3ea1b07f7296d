"""``features.extract`` is the composition of the public steps it cites: each step's own call,
with the options ``extract`` uses to keep its memory (each map written into a plane of one
stack, Canny reusing Sobel's magnitude, the statistics and the vote on the stack), gives the
same values as the step called plainly, bit for bit."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refseg.claim1 import features, preprocess
from refseg.claim1 import operators as ops
from refseg.claim1 import weighting as wt
from refseg.claim1.operators import OPERATORS
from refseg.errors import InputError
from strategies import edge_maps, gray_images, positive_weights, rgb_images


@pytest.mark.claim("claim1.step2.edges.canny", "claim1.step2.edges.sobel",
                   "claim1.step2.edges.prewitt", "claim1.step2.edges.log")
@given(image=gray_images(), thresholds=st.sampled_from([None, 5.0]))
def test_operators_into_planes_and_canny_from_sobel_equal_the_plain_calls(image, thresholds):
    """Writing into ``out`` and reusing Sobel's result change no map, threshold or response;
    the returned map is the given plane."""
    blurred = preprocess.gaussian_blur(image)
    stack = np.zeros((4,) + blurred.shape, np.uint8)
    sobel = ops.sobel(blurred, thresholds, out=stack[1])
    pairs = [  # in the stack's order, OPERATORS
        (ops.canny(blurred, sobel_result=sobel, out=stack[0]), ops.canny(blurred)),
        (sobel, ops.sobel(blurred, thresholds)),
        (ops.prewitt(blurred, thresholds, out=stack[2]), ops.prewitt(blurred, thresholds)),
        (ops.laplacian_of_gaussian(blurred, thresholds, out=stack[3]),
         ops.laplacian_of_gaussian(blurred, thresholds)),
    ]
    for plane, (into, plain) in zip(stack, pairs):
        assert np.shares_memory(into.edges, plane)
        assert np.array_equal(into.edges, plain.edges)
        assert np.array_equal(into.response, plain.response)
        assert into.thresholds == plain.thresholds and into.automatic == plain.automatic


@pytest.mark.claim("claim1.step2.mean_image", "claim1.step2.std", "claim1.step2.cv",
                   "claim1.step2.final_weight", "claim1.step2.decision")
@given(maps=edge_maps(min_side=1), weights=positive_weights(), keep_final=st.booleans())
def test_statistics_and_vote_on_the_stack_equal_the_per_map_steps(maps, weights, keep_final):
    stack = wt.binary_stack(maps)
    mean_img, std, mean = wt.edge_statistics(stack)
    assert np.array_equal(mean_img, wt.mean_image(maps))
    assert std == pytest.approx(wt.standard_deviations(maps, mean_img), rel=1e-12, abs=1e-15)
    assert mean == pytest.approx(wt.pixel_means(maps), rel=1e-12, abs=1e-15)
    final, decision = wt.vote(stack, weights, keep_final=keep_final)
    expected = wt.final_weight(maps, weights)
    assert (final is None) != keep_final
    if keep_final:
        assert np.array_equal(final, expected)
    assert np.array_equal(decision, wt.decide(expected))


@pytest.mark.claim("claim1.step2.extract")
@given(rgb=rgb_images(), keep=st.sampled_from(["all", "maps"]))
def test_extract_is_the_composition_of_its_steps(rgb, keep):
    """The steps called one after another, each plainly, give extract's maps, numbers and
    feature map."""
    result = features.extract(rgb, keep=keep)
    blurred = preprocess.gaussian_blur(preprocess.to_gray(rgb))
    edges = {"canny": ops.canny(blurred).edges, "sobel": ops.sobel(blurred).edges,
             "prewitt": ops.prewitt(blurred).edges,
             "log": ops.laplacian_of_gaussian(blurred).edges}
    for name in OPERATORS:
        assert np.array_equal(result.edges[name], edges[name])
    cv = wt.coefficients_of_variation(wt.standard_deviations(edges, wt.mean_image(edges)),
                                      wt.pixel_means(edges))
    weights = wt.operator_weights(cv)
    assert result.weights == pytest.approx(weights, rel=1e-12, abs=1e-15)
    assert np.array_equal(result.feature_map,
                          wt.decide(wt.final_weight(edges, result.weights)))


@pytest.mark.claim("claim1.step2.extract")
def test_bad_planes_stacks_and_sobel_results_are_refused():
    blurred = np.zeros((5, 6))
    with pytest.raises(InputError, match="out: expected a writeable C-contiguous uint8"):
        ops.sobel(blurred, out=np.zeros((5, 6), np.float64))
    with pytest.raises(InputError, match="out: expected"):
        ops.canny(blurred, out=np.zeros((6, 5), np.uint8))
    with pytest.raises(InputError, match="sobel_result"):
        ops.canny(blurred, sobel_result=ops.prewitt(blurred))
    with pytest.raises(InputError, match="stack: expected"):
        wt.edge_statistics(np.zeros((3, 5, 6), np.uint8))
    with pytest.raises(InputError, match="0 and 1 only"):
        wt.vote(np.full((4, 5, 6), 2, np.uint8), dict.fromkeys(OPERATORS, 0.25))
