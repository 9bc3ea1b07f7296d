"""The ``Examples`` sections of claim 1's docstrings run as doctests on the installed modules,
with NumPy's print options pinned, so that every example shown is what the code does."""
import doctest
import importlib

import numpy as np
import pytest

#: Each module with doctested examples, and the functions whose docstrings must have them.
EXAMPLES = {
    "refseg.claim1.preprocess": ("to_gray", "gaussian_kernel", "gaussian_blur"),
    "refseg.claim1.operators": ("otsu_threshold", "sobel_gradient", "prewitt_gradient",
                                "sobel", "prewitt", "laplacian_of_gaussian",
                                "canny_thresholds", "canny"),
    "refseg.claim1.weighting": ("mean_image", "standard_deviations", "pixel_means",
                                "coefficients_of_variation", "intermediate_cv",
                                "operator_weights", "final_weight", "decide"),
    "refseg.claim1.features": ("features", "extract"),
    "refseg.claim1.outputs": ("write_edge_outputs",),
    "refseg.claim1.alternatives": ("extract_variant", "worked_example"),
    "refseg.claim1.variants": ("alternative",),
}
#: NumPy's defaults, pinned: the examples' printed arrays depend on them.
PRINT_OPTIONS = {"precision": 8, "threshold": 1000, "edgeitems": 3, "linewidth": 75,
                 "suppress": False, "floatmode": "maxprec", "sign": "-", "legacy": False}


def run_examples(module) -> tuple[dict[str, int], list[str]]:
    """{function name: examples run} and the report of each failing example of ``module``."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    counts, failures = {}, []
    with np.printoptions(**PRINT_OPTIONS):
        for test in finder.find(module, module.__name__):
            failed_before = runner.failures
            out = []
            runner.run(test, out=out.append, clear_globs=True)
            counts[test.name.rsplit(".", 1)[-1]] = len(test.examples)
            if runner.failures > failed_before:
                failures.append("".join(out))
    return counts, failures


@pytest.mark.infrastructure
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_docstring_examples_hold(name):
    module = importlib.import_module(name)
    counts, failures = run_examples(module)
    assert failures == [], "\n".join(failures)
    missing = [f for f in EXAMPLES[name] if counts.get(f, 0) == 0]
    assert missing == [], f"{name}: no examples in {missing}"


@pytest.mark.infrastructure
def test_a_wrong_example_fails(tmp_path, monkeypatch):
    """The runner reports an example whose shown output differs from what the code prints."""
    source = tmp_path / "wrong_example.py"
    source.write_text('def f():\n    """\n    >>> 1 + 1\n    3\n    """\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    counts, failures = run_examples(importlib.import_module("wrong_example"))
    assert counts == {"f": 1} and len(failures) == 1 and "Expected:\n    3" in failures[0]
