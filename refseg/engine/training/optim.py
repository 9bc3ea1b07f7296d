"""Adam's elementwise update on the engine's vector loops: a subclass of the reference's.

``FastAdamUpdate`` computes what ``refseg.autograd.optim.AdamUpdate`` computes, with the same
arithmetic in the same order: each float32 value widened to double, every operation of the
update rounded on its own in double, each result rounded once to float32
(``engine/training/adam_update.c``, reached through ``_adam.pxi``). Division and square root
are correctly rounded in both widths, so AVX-512 and AVX2 lanes give the reference's scalar
bits: a training run's parameters and moments are the same bits with the engine and without
it, as far as the update goes. The reference's loop is left to the compiler, which does not
vectorise it (double division and square root after a float load); these loops run the
update in whole vectors. float64 parameters, and arrays that are not C-contiguous, take the
reference's kernel.

References: claim 4; [0245]-[0255] (Adam); spec ``R-adam``.
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.optim import AdamUpdate
from refseg.cite import implements
from refseg.engine.training.backend import engine_kernels as kernels


@implements("claim4.update")
class FastAdamUpdate(AdamUpdate):
    """``AdamUpdate`` on the engine's vector loops for float32 (module docstring); the loops
    are those of the backend the engine runs when the update is made (once per Adam step)."""

    def __init__(self, backend="cython"):
        from refseg.engine.runtime import backend_code

        super().__init__(backend)
        #: the vector loops: 2 AVX-512F, 1 AVX2, 0 plain C (``portable_kernels`` and
        #: ``avx2_kernels`` force the narrower ones)
        self.unit = backend_code()

    def __call__(self, param, grad, m, v, lr, beta1, beta2, eps, bias1, bias2):
        arrays = (param, grad, m, v)
        if any(a.dtype != np.float32 or not a.flags.c_contiguous for a in arrays):
            super().__call__(param, grad, m, v, lr, beta1, beta2, eps, bias1, bias2)
            return
        kernels(self.backend).vector_adam_update(param, grad, m, v, lr, beta1, beta2, eps,
                                                 bias1, bias2, self.unit)
