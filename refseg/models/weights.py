"""Weight files: one ``.npz`` of arrays keyed by Keras weight path (``conv1_conv/kernel``,
``conv2_block1_preact_bn/moving_mean``, ``x1/bias``, ...), read without pickles, checked in full
before anything is assigned.

A file may hold any subset of the backbones' and the decoder's weights. Matching sorts every key
into: loaded, missing (the model has it, the file does not), unexpected (neither the model nor a
known layer it leaves out), mis-shaped, not floating point, non-finite, and ignored (layers of
the Keras architectures the model does not use, such as MobileNetV2's ``Conv_1``).
"""
from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from refseg.errors import InputError
from refseg.images import check_npz_members
from refseg.cite import implements


@implements("claim2.backbones", "claim4.propagation")
def read_weight_file(path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` weight file, by key.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    dict of str to ndarray

    Raises
    ------
    InputError
        One line naming the file: missing, a single .npy, not a zip, truncated or corrupt,
        pickled objects inside.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such weight file")
    with open(path, "rb") as f:
        head = f.read(6)
    # np.load takes anything that is neither zip nor .npy for a pickle: sort those out first
    if head.startswith(b"\x93NUMPY"):
        raise InputError(f"{path}: a single .npy array, not an .npz archive of weights")
    if not head.startswith(b"PK\x03\x04"):
        raise InputError(f"{path}: not a readable .npz weight file (no zip header)")
    # every member a .npy array of plain numbers, its size as declared (no pickles)
    check_npz_members(path)
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for key in npz.files:
                arrays[key] = npz[key]
    except ValueError as error:
        raise InputError(f"{path}: corrupt .npz data ({error})") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError,
            NotImplementedError) as error:
        raise InputError(f"{path}: not a readable .npz weight file, truncated or corrupt "
                         f"({type(error).__name__}: {error})") from None
    return arrays


@dataclass
class LoadReport:
    """What matching a weight file against a model found (keys sorted by kind)."""

    path: str
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    misshaped: list[str] = field(default_factory=list)
    not_float: list[str] = field(default_factory=list)
    non_finite: list[str] = field(default_factory=list)
    negative_variance: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    PROBLEMS = ("missing", "unexpected", "misshaped", "not_float", "non_finite",
                "negative_variance")

    @property
    def problems(self) -> dict[str, list[str]]:
        return {kind: getattr(self, kind) for kind in self.PROBLEMS if getattr(self, kind)}

    def problem_line(self) -> str:
        """One line naming every kind of problem, with up to three keys each."""
        parts = []
        for kind, keys in self.problems.items():
            shown = ", ".join(keys[:3]) + (f" (+{len(keys) - 3} more)" if len(keys) > 3 else "")
            parts.append(f"{len(keys)} {kind.replace('_', '-')}: {shown}")
        return "; ".join(parts)

    def notices(self) -> list[str]:
        out = []
        if self.ignored:
            layers = sorted({key.split("/")[0] for key in self.ignored})
            out.append(f"{self.path}: ignored {len(self.ignored)} arrays of layers the model "
                       f"does not use: {', '.join(layers)}")
        if self.problems:
            out.append(f"{self.path}: not loaded: {self.problem_line()}")
        return out


@implements("claim2.backbones", "claim4.propagation")
def match_weights(path, arrays: dict[str, np.ndarray], expected: dict[str, tuple],
                  ignorable=frozenset()) -> LoadReport:
    """Sort ``arrays`` against the model's ``expected`` shapes; see the module docstring.

    Parameters
    ----------
    path : str or Path
        Named in the report.
    arrays : dict of str to ndarray
    expected : dict of str to tuple of int
        The model's weight keys and shapes.
    ignorable : set of str
        Keys of known layers the model leaves out.

    Returns
    -------
    LoadReport
    """
    report = LoadReport(str(path))
    for key, array in arrays.items():
        if key not in expected:
            (report.ignored if key in ignorable else report.unexpected).append(key)
        elif tuple(array.shape) != tuple(expected[key]):
            report.misshaped.append(f"{key} {tuple(array.shape)} != {tuple(expected[key])}")
        elif not np.issubdtype(array.dtype, np.floating):
            report.not_float.append(f"{key} ({array.dtype})")
        elif not np.isfinite(array).all():
            report.non_finite.append(key)
        elif key.endswith("moving_variance") and (array < 0).any():
            # batch norm divides by sqrt(variance + epsilon): NaN from the first step
            report.negative_variance.append(key)
        else:
            report.loaded.append(key)
    report.missing = [key for key in expected if key not in arrays]
    return report
