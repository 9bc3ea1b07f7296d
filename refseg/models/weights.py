"""Weight files: one ``.npz`` of arrays keyed by Keras weight path (``conv1_conv/kernel``,
``conv2_block1_preact_bn/moving_mean``, ``x1/bias``, ...), read without pickles, checked in full
before anything is assigned.

A file may hold any subset of the backbones' and the decoder's weights. Matching sorts every key
into: loaded, missing (the model has it, the file does not), unexpected (neither the model nor a
known layer it leaves out), mis-shaped, not floating point, non-finite, and ignored (layers of
the Keras architectures the model does not use, such as MobileNetV2's ``Conv_1``).
:func:`inspect_npz` holds a file against every part refseg knows, with the same classifier
(:func:`key_status`), for ``refseg weights inspect``.
"""
from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from refseg.errors import InputError, reason
from refseg.images import check_npz_members
from refseg.cite import implements, infrastructure
from refseg.models.registry import known_weight_shapes


#: What a weight key is, held against the weights a model (or a known part) expects.
STATUS_OK = "ok"
STATUS_MISSHAPED = "mis-shaped"
STATUS_UNEXPECTED = "unexpected"
STATUS_IGNORED = "ignored (not used by the taps)"
#: Layers whose weights a MobileNetV2 file holds but refseg's taps do not use.
IGNORED_LAYERS = {"Conv_1": "mobilenetv2", "Conv_1_bn": "mobilenetv2"}


@infrastructure("the classification of a weight file's keys")
def key_status(shape, expected_shapes, ignored: bool) -> str:
    """The status of one weight key: the one classifier of keys behind :func:`match_weights`
    (loading) and :func:`inspect_npz` (inspecting).

    Parameters
    ----------
    shape : tuple of int
        The array's shape in the file.
    expected_shapes : sequence of tuple of int
        The shapes under which the model (or any known part) expects the key; empty when
        nothing expects it.
    ignored : bool
        The key is of a known layer the model leaves out.

    Returns
    -------
    str
        :data:`STATUS_IGNORED`, :data:`STATUS_UNEXPECTED` (nothing expects it), :data:`STATUS_OK`
        (an expected shape) or :data:`STATUS_MISSHAPED`.
    """
    if ignored:
        return STATUS_IGNORED
    if not expected_shapes:
        return STATUS_UNEXPECTED
    shape = tuple(int(n) for n in shape)
    return STATUS_OK if any(shape == tuple(s) for s in expected_shapes) else STATUS_MISSHAPED


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
                         f"({reason(error)})") from None
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
        want = expected.get(key)
        status = key_status(array.shape, [] if want is None else [want],
                            want is None and key in ignorable)
        if status == STATUS_IGNORED:
            report.ignored.append(key)
        elif status == STATUS_UNEXPECTED:
            report.unexpected.append(key)
        elif status == STATUS_MISSHAPED:
            report.misshaped.append(f"{key} {tuple(array.shape)} != {tuple(want)}")
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


@infrastructure("the inspection of weight files")
@dataclass(frozen=True)
class KeyCheck:
    """One key of a weight file, held against the expected weights.

    Attributes
    ----------
    key : str
    shape : tuple of int
    dtype : str
    part : str or None
        The known part (``resnet50v2``, ``mobilenetv2``, ``decoder``) expecting this key.
    expected_shape : tuple of int or None
    status : str
        :data:`STATUS_OK`, :data:`STATUS_MISSHAPED`, :data:`STATUS_UNEXPECTED` or
        :data:`STATUS_IGNORED`.
    finite : bool
    """

    key: str
    shape: tuple
    dtype: str
    part: str | None
    expected_shape: tuple | None
    status: str
    finite: bool


@infrastructure("the inspection of weight files")
@dataclass(frozen=True)
class PartTotals:
    """How much of one known part a weight file holds.

    Attributes
    ----------
    part : str
    expected : int
        Keys the part expects (ignored layers not counted).
    matched : int
        Keys present with the expected shape.
    misshaped : int
    missing : tuple of str
    parameters : int
        Values in the matched keys.
    """

    part: str
    expected: int
    matched: int
    misshaped: int
    missing: tuple
    parameters: int


@infrastructure("the inspection of weight files")
@dataclass(frozen=True)
class Inspection:
    """What :func:`inspect_npz` found in a weight file.

    Attributes
    ----------
    path : str
    entries : tuple of KeyCheck
        In the file's order.
    parts : tuple of PartTotals
    """

    path: str
    entries: tuple
    parts: tuple

    def keys_with(self, status: str) -> list[KeyCheck]:
        """The entries of one status."""
        return [e for e in self.entries if e.status == status]

    def text(self) -> str:
        """The report ``refseg weights inspect`` prints: a table of the keys, totals per part,
        unexpected and mis-shaped keys."""
        rows = [("key", "shape", "dtype", "part", "status")]
        for e in self.entries:
            status = e.status if e.finite else f"{e.status}, NOT FINITE"
            rows.append((_shown(e.key), str(e.shape), e.dtype, e.part or "-", status))
        width = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [f"{self.path}: {len(self.entries)} keys"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r[:4], width)) + "  " + r[4]
                  for r in rows]
        lines += ["", "totals per part",
                  f"{'part':<12}  {'expected':>8}  {'matched':>8}  {'mis-shaped':>10}  "
                  f"{'missing':>8}  {'parameters':>12}"]
        for t in self.parts:
            lines.append(f"{t.part:<12}  {t.expected:>8}  {t.matched:>8}  {t.misshaped:>10}  "
                         f"{len(t.missing):>8}  {t.parameters:>12,}"
                         + ("  (absent)" if t.matched + t.misshaped == 0 else ""))
        for t in self.parts:
            if t.missing and t.matched + t.misshaped:
                lines.append(f"missing from {t.part}: {_listed(t.missing)}")
        unexpected = self.keys_with(STATUS_UNEXPECTED)
        lines += ["", f"unexpected keys: {len(unexpected)}"]
        lines += [f"  {_shown(e.key)} {e.shape}" for e in unexpected[:LISTED]]
        if len(unexpected) > LISTED:
            lines.append(f"  ... and {len(unexpected) - LISTED} more")
        misshaped = self.keys_with(STATUS_MISSHAPED)
        lines += [f"mis-shaped keys: {len(misshaped)}"]
        lines += [f"  {_shown(e.key)} {e.shape}, expected {e.expected_shape} ({e.part})"
                  for e in misshaped[:LISTED]]
        if len(misshaped) > LISTED:
            lines.append(f"  ... and {len(misshaped) - LISTED} more")
        ignored = self.keys_with(STATUS_IGNORED)
        if ignored:
            lines.append(f"{STATUS_IGNORED}: " + _listed([e.key for e in ignored]))
        other = [e for e in self.entries if e.dtype != "float32" or not e.finite]
        if other:
            lines.append("not float32 or not finite: " + _listed([e.key for e in other]))
        return "\n".join(lines)


#: The most keys the list under a heading of :meth:`Inspection.text` names.
LISTED = 20
#: The most characters of a key :meth:`Inspection.text` shows, and of a line of key names.
KEY_SHOWN, LINE_SHOWN = 80, 200


def _shown(key: str) -> str:
    return key if len(key) <= KEY_SHOWN else key[:KEY_SHOWN - 3] + "..."


def _listed(keys) -> str:
    """``keys``, comma-separated, as many as fit :data:`LINE_SHOWN` characters, and how many
    more there are."""
    keys, shown = list(keys), []
    for key in keys:
        if shown and len(", ".join([*shown, _shown(key)])) > LINE_SHOWN:
            break
        shown.append(_shown(key))
    more = len(keys) - len(shown)
    return ", ".join(shown) + (f", ... and {more} more" if more else "")


def _refuse_not_weights(path: Path, keys: list[str]):
    """One line: ``path`` holds no weight the network expects (a checkpoint named as such)."""
    if "epoch" in keys and "history" in keys:
        raise InputError(f"{path}: a refseg training checkpoint, not a weight file (predict, "
                         "evaluate and train --init-from read it with its run folder)")
    shown = ", ".join(repr(k[:40]) for k in keys[:2]) + (", ..." if len(keys) > 2 else "")
    raise InputError(f"{path}: not a weight file of refseg's network: none of its "
                     f"{len(keys)} keys{f' ({shown})' if keys else ''} is a weight the "
                     "network expects")


def _normalise_expected(expected) -> dict[str, dict[str, tuple[int, ...]]]:
    try:
        return {str(part): {str(k): tuple(int(n) for n in shape) for k, shape in keys.items()}
                for part, keys in expected.items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise InputError(f"expected: want {{part: {{key: shape}}}} "
                         f"({reason(exc)})") from None


@infrastructure("the inspection of weight files")
def inspect_npz(path, expected=None) -> Inspection:
    """List the keys of a weight file and hold each against the weights refseg expects.

    Parameters
    ----------
    path : str or Path
        An ``.npz`` weight file (read with ``allow_pickle=False``).
    expected : dict or None
        {part name: {key: shape}}; None means :func:`refseg.models.known_weight_shapes`.

    Returns
    -------
    Inspection
        Each key's shape, dtype, part and status: ``ok`` (an expected key with the expected
        shape), ``mis-shaped``, ``unexpected`` (no part expects it) or ``ignored (not used by
        the taps)`` (MobileNetV2's ``Conv_1`` and ``Conv_1_bn``); totals per part.

    Raises
    ------
    InputError
        A missing, empty, non-zip, truncated or corrupt file, a single ``.npy``, an object
        (pickled) array, or a file none of whose keys is an expected weight (a checkpoint, a
        golden candidate); one line naming the file.
    """
    p = Path(path)
    arrays = read_weight_file(p)
    expected = _normalise_expected(known_weight_shapes() if expected is None else expected)
    owners: dict[str, list[tuple[str, tuple]]] = {}
    for part, keys in expected.items():
        for key, shape in keys.items():
            owners.setdefault(key, []).append((part, shape))
    entries = []
    for key, array in arrays.items():
        shape = tuple(int(n) for n in array.shape)
        finite = bool(np.isfinite(array).all()) if array.dtype.kind in "fc" else True
        layer = key.rpartition("/")[0]
        candidates = owners.get(key, [])
        match = next(((pt, s) for pt, s in candidates if s == shape), None)
        part, want = match or (candidates[0] if candidates else (None, None))
        status = key_status(shape, [s for _, s in candidates], layer in IGNORED_LAYERS)
        if status == STATUS_IGNORED:
            part = part or IGNORED_LAYERS[layer]
        entries.append(KeyCheck(key, shape, str(array.dtype), part, want, status, finite))
    if all(e.status == STATUS_UNEXPECTED for e in entries):
        _refuse_not_weights(p, list(arrays))
    totals = []
    for part, keys in expected.items():
        mine = [e for e in entries if e.part == part and e.status != STATUS_IGNORED]
        wanted = [k for k in keys if k.rpartition("/")[0] not in IGNORED_LAYERS]
        present = {e.key for e in mine}
        totals.append(PartTotals(
            part=part, expected=len(wanted),
            matched=sum(e.status == STATUS_OK for e in mine),
            misshaped=sum(e.status == STATUS_MISSHAPED for e in mine),
            missing=tuple(k for k in wanted if k not in present),
            parameters=int(sum(np.prod(e.shape, dtype=np.int64) for e in mine
                               if e.status == STATUS_OK))))
    return Inspection(str(p), tuple(entries), tuple(totals))
