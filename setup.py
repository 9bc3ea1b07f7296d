"""Build script: compiles refseg/_kernels.pyx and ships spec/ inside the package (refseg/_spec/).

Optimisation is on (-O3) and floating-point contraction is off (-ffp-contract=off), so that
the compiled kernels give bit-identical results to their NumPy twins in refseg/_twins.py
on every x86-64 machine (-fno-math-errno changes no result: it only lets sqrt vectorise).
OpenMP splits image rows over the cores.
"""
import shutil
from pathlib import Path

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).parent
SPEC_FILES = ("registry.toml", "traceability.md", "readings.md", "errata.md", "claims_zh.txt",
              "description_zh.txt", "measurements.md", "keras_backbones_224.txt",
              "golden_pins.json")
#: shipped when the checkout has them
OPTIONAL_SPEC_FILES = ("sensitivity.md",)


class BuildPyWithSpec(build_py):
    """Copies the spec files into refseg/_spec/ of the built package (wheel installs)."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "refseg" / "_spec"
        target.mkdir(parents=True, exist_ok=True)
        for name in SPEC_FILES:
            # a wheel without its spec would install and then fail at the first `refseg trace`
            shutil.copy2(HERE / "spec" / name, target / name)
        for name in OPTIONAL_SPEC_FILES:
            if (HERE / "spec" / name).is_file():
                shutil.copy2(HERE / "spec" / name, target / name)


kernels = Extension(
    "refseg._kernels",
    ["refseg/_kernels.pyx", "refseg/engine/training/direct_conv_avx512.c",
     "refseg/engine/training/winograd_f2x2.c", "refseg/engine/training/winograd_f4x4.c",
     "refseg/engine/training/adam_update.c",
     "refseg/engine/engine_kernels.c"],
    include_dirs=[np.get_include(), "refseg/engine/training", "refseg/engine"],
    # the files _kernels.pyx includes and the headers of the C loops: a change rebuilds
    depends=["refseg/claim1/_kernels.pxi", "refseg/autograd/_im2col.pxi",
             "refseg/autograd/_window.pxi", "refseg/autograd/_norm.pxi",
             "refseg/autograd/_optim.pxi", "refseg/autograd/_elementwise.pxi",
             "refseg/autograd/_matmul.pxi",
             "refseg/engine/training/_direct_conv.pxi", "refseg/engine/training/_winograd.pxi",
             "refseg/engine/training/_gemm.pxi", "refseg/engine/training/_adam.pxi",
             "refseg/engine/training/adam_update.h", "refseg/engine/training/direct_conv_avx512.h",
             "refseg/engine/training/winograd_f2x2.h", "refseg/engine/training/winograd_f4x4.h",
             "refseg/engine/_engine.pxi", "refseg/engine/engine_kernels.h"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    # -fno-math-errno: sqrt need not set errno (nothing reads it), so it vectorises
    extra_compile_args=["-O3", "-fopenmp", "-ffp-contract=off", "-fno-math-errno"],
    extra_link_args=["-fopenmp"],
)

setup(
    ext_modules=cythonize([kernels], compiler_directives={"language_level": "3"}),
    cmdclass={"build_py": BuildPyWithSpec},
)
