"""The seam between the reference and training's engine: one place decides which class computes
a convolution, one switch turns the engine off, and the reference never imports the engine."""
import subprocess
import sys

import numpy as np
import pytest

from refseg import autograd as ag
from refseg.autograd import conv, seam
from refseg.engine import use_engine
from refseg.engine.training import training_engine
from refseg.engine.training.conv import FastConv2D, FastConv2DTranspose
from refseg.errors import InputError

pytestmark = pytest.mark.infrastructure


def test_the_reference_route_runs_outside_any_block_and_the_engine_inside():
    assert seam.op_class(conv.Conv2D) is conv.Conv2D
    with training_engine() as running:
        assert running
        assert seam.op_class(conv.Conv2D) is FastConv2D
        assert seam.op_class(conv.Conv2DTranspose) is FastConv2DTranspose
        assert seam.op_class(conv.DepthwiseConv2D) is conv.DepthwiseConv2D
        with seam.reference_ops():
            assert seam.op_class(conv.Conv2D) is conv.Conv2D
        assert seam.op_class(conv.Conv2D) is FastConv2D
    assert seam.op_class(conv.Conv2D) is conv.Conv2D


def test_use_engine_false_leaves_every_op_on_the_reference_route():
    with use_engine(False), training_engine() as running:
        assert not running
        assert seam.op_class(conv.Conv2D) is conv.Conv2D
    with pytest.raises(InputError, match="use_engine"):
        with use_engine("no"):
            pass


def test_a_replacement_must_be_a_subclass_of_the_op_it_replaces():
    with pytest.raises(InputError, match="not a subclass of Conv2D"):
        with seam.ops_replaced({conv.Conv2D: conv.Conv2DTranspose}):
            pass


@pytest.mark.claim("claim2.fusion", "claim4.propagation")
@pytest.mark.parametrize("transposed", [False, True])
def test_the_engine_computes_what_the_reference_computes_within_float32_rounding(transposed):
    """A float32 convolution large enough for the engine's Winograd route: its output and
    gradients equal the reference route's within 1e-5 of the largest magnitude (float32
    rounding of sums of 3*3*32 products); float64 within 1e-12."""
    rng = np.random.default_rng(0)
    for dtype, tolerance in ((np.float32, 1e-5), (np.float64, 1e-12)):
        x = rng.standard_normal((2, 12, 12, 32)).astype(dtype)
        w = rng.standard_normal((3, 3, 32, 32)).astype(dtype)
        b = rng.standard_normal(32).astype(dtype)
        op = ag.conv2d_transpose if transposed else ag.conv2d
        results = []
        for engine in (False, True):
            with use_engine(engine), training_engine():
                tensors = [ag.Tensor(a, requires_grad=True) for a in (x, w, b)]
                y = op(*tensors, padding="same", relu=True)
                y.backward(np.ones_like(y.data))
                results.append([y.data] + [t.grad for t in tensors])
        for reference, fast in zip(*results):
            scale = np.abs(reference).max()
            assert np.abs(fast - reference).max() <= tolerance * scale


def test_the_reference_never_imports_the_engine():
    """With ``refseg.engine`` made unimportable, the reference wings import and run."""
    code = ("import sys; sys.modules['refseg.engine'] = None\n"
            "import numpy as np\n"
            "from refseg import autograd, golden, models\n"
            "from refseg.claim1 import features\n"
            "from refseg.report import walkthrough\n"
            "y = autograd.conv2d(np.ones((1, 4, 4, 2)), np.ones((3, 3, 2, 2)), padding='same')\n"
            "assert y.data[0, 1, 1, 0] == 18.0\n")
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
