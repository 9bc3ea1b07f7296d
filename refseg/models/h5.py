"""Backbone weights: Keras HDF5 files converted to refseg's ``.npz`` weight files (their check
against the weights refseg expects is :func:`refseg.models.weights.inspect_npz`).

refseg's weight files are ``.npz`` archives (``np.savez``, always loaded with
``allow_pickle=False``) whose keys are Keras 3 weight paths (``v.path``)
``<layer_name>/<weight_name>``, e.g. ``conv1_conv/kernel``,
``conv2_block1_preact_bn/moving_mean``, ``expanded_conv_depthwise/kernel``, in Keras' layouts
(convolution kernels HWIO, depthwise kernels (kh, kw, C, 1), transposed-convolution kernels
(kh, kw, out, in)), float32.

Three HDF5 layouts are read (h5py is needed, imported only here):

1. **Keras HDF5 weights**, as distributed for ``resnet50v2_weights_tf_dim_ordering_tf_kernels_
   notop.h5`` and ``mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_224_no_top.h5``: the
   root's attribute ``layer_names`` lists the layers; each layer's group has an attribute
   ``weight_names`` (``conv1_conv/kernel:0``, ...) and the array is the dataset at that path
   inside the group. Long attributes are split by Keras into ``layer_names0``,
   ``layer_names1``, ...
2. **Keras HDF5 full model** (``model.save("x.h5")``): the same, inside a ``model_weights``
   group; the root's ``model_config`` gives each layer's type. Optimizer state is skipped.
3. **Keras 3 ``.weights.h5``** (``model.save_weights("x.weights.h5")``): a group per layer,
   named after the layer's type (``layers/conv2d_3``), nested for nested models
   (``layers/functional/layers/conv2d``); its variables are datasets ``vars/0``, ``vars/1``, ...
   in the order trainable then non-trainable, and the ``vars`` group's attribute ``name`` holds
   the layer's name. The variable names are therefore known only for the layer types in
   :data:`KERAS3_VARIABLE_NAMES`; other layers' arrays are skipped (and counted).

Keras 2 (and so every distributed file) names a DepthwiseConv2D's kernel ``depthwise_kernel``,
Keras 3 names it ``kernel``; refseg uses Keras 3's names, so a layer with a ``depthwise_kernel``
and no ``pointwise_kernel`` (that would be a SeparableConv2D) has it renamed ``kernel``.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from refseg.errors import InputError, reason
from refseg.publish import check_single_output, write_npz

INFRASTRUCTURE = "conversion of Keras weight files"

#: The largest array a weight file's dataset may declare: the biggest backbone weight
#: (ResNet50V2's 3x3x512x512 float32 kernels, 9.4 MB) many times over.
MAX_WEIGHT_BYTES = 256 * 2 ** 20
#: The most the converted weights of one file may come to, together: both backbones hold
#: some 104 MB of float32 weights.
MAX_FILE_BYTES = 2 * MAX_WEIGHT_BYTES

#: Keras 3 ``.weights.h5``: the names of a layer's variables ``vars/0``, ``vars/1``, ... by layer
#: type (Keras' snake-cased class name, the group name without its ``_<n>`` suffix) and number
#: of variables. A BatchNormalization with three variables (``center=False`` or
#: ``scale=False``) cannot be read: gamma and beta are indistinguishable.
KERAS3_VARIABLE_NAMES: dict[str, dict[int, tuple[str, ...]]] = {
    "conv2d": {1: ("kernel",), 2: ("kernel", "bias")},
    "conv2d_transpose": {1: ("kernel",), 2: ("kernel", "bias")},
    "depthwise_conv2d": {1: ("kernel",), 2: ("kernel", "bias")},
    "dense": {1: ("kernel",), 2: ("kernel", "bias")},
    "batch_normalization": {2: ("moving_mean", "moving_variance"),
                            4: ("gamma", "beta", "moving_mean", "moving_variance")},
}

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_ZIP_SIGNATURE = b"PK\x03\x04"
_LAYOUT_WEIGHTS = "Keras HDF5 weights (layer_names at the root)"
_LAYOUT_MODEL = "Keras HDF5 full model (model_weights group)"
_LAYOUT_KERAS3 = "Keras 3 .weights.h5 (layers/.../vars)"
_LAYER_CONTAINERS = ("layers", "_layer_checkpoint_dependencies")


class FeatureUnavailable(InputError):
    """A feature needs something that is not installed or not written yet (one line)."""


@dataclass(frozen=True)
class ConversionReport:
    """What :func:`convert_h5` read and wrote.

    Attributes
    ----------
    source, destination : str
    layout : str
        Which of the three layouts the file has (see the module docstring).
    keras_version, backend : str or None
        As recorded in the file (layouts 1 and 2 only).
    layers : int
        Layers with at least one converted array.
    arrays : int
    parameters : int
        Total number of values converted.
    keys : tuple of str
        The ``.npz`` keys, in the order written.
    skipped : tuple of (str, str)
        (HDF5 path, reason) of each array in the file that was not converted: optimizer state,
        model-level weights, integer arrays, layers whose variable names are not known.
    notes : tuple of str
        Remarks on the conversion (renamed depthwise kernels, skipped layer types, ...).
    """

    source: str
    destination: str
    layout: str
    keras_version: str | None
    backend: str | None
    layers: int
    arrays: int
    parameters: int
    keys: tuple
    skipped: tuple = ()
    notes: tuple = ()

    def text(self) -> str:
        """The summary ``refseg weights convert`` prints."""
        origin = ", ".join(x for x in (f"keras {self.keras_version}" if self.keras_version
                                       else "", f"backend {self.backend}" if self.backend
                                       else "") if x)
        lines = [f"wrote {self.destination} from {self.source}",
                 f"layout      {self.layout}" + (f"; {origin}" if origin else ""),
                 f"layers      {self.layers}",
                 f"arrays      {self.arrays}",
                 f"parameters  {self.parameters:,}",
                 f"skipped     {len(self.skipped)}"]
        reasons: dict[str, int] = {}
        for _, reason in self.skipped:
            reasons[reason] = reasons.get(reason, 0) + 1
        lines += [f"  {n} x {reason}" for reason, n in reasons.items()]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def _one_line(exc: BaseException) -> str:
    return reason(exc)


def _check_file(path: Path, what: str) -> bytes:
    """Refuse a missing path, a folder or an empty file; return the first bytes."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not {what}")
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not head:
        raise InputError(f"{path}: empty file (0 bytes)")
    return head


def _text(value, where: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"{where}: not UTF-8 text") from None
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return _text(value[()], where)
    raise _Bad(f"{where}: expected a string, got {type(value).__name__}")


def _attr_strings(group, name: str) -> list[str] | None:
    """A list-of-strings attribute, joined from Keras' chunks ``name0``, ``name1``... when the
    attribute was too long for one HDF5 object header; None when absent."""
    if name in group.attrs:
        chunks = [group.attrs[name]]
    elif f"{name}0" in group.attrs:
        chunks, i = [], 0
        while f"{name}{i}" in group.attrs:
            chunks.append(group.attrs[f"{name}{i}"])
            i += 1
    else:
        return None
    where = f"{group.name} attribute {name}"
    values = []
    for chunk in chunks:
        chunk = np.asarray(chunk)
        if chunk.size == 0:
            continue
        values += [_text(v, where) for v in chunk.reshape(-1)]
    return values


class _Bad(Exception):
    """A problem in the file; turned into an InputError naming the file."""


def _link_kind(link) -> str:
    kind = type(link).__name__.replace("Link", "").lower()
    return f"a {kind} link" if kind != "external" else "an external link"


def _member(group, path: str, h5py):
    """The object at ``path`` inside ``group``, following hard links only (a soft or external
    link could point outside the file, and Keras never writes one)."""
    node = group
    for part in [p for p in path.split("/") if p]:
        if part == ".":
            continue
        link = node.get(part, getlink=True)
        if link is None:
            raise _Bad(f"{node.name.rstrip('/')}/{part}: missing (named in the layer index)")
        if not isinstance(link, h5py.HardLink):
            raise _Bad(f"{node.name.rstrip('/')}/{part}: {_link_kind(link)}, refused "
                       "(weights must be stored in the file itself)")
        node = node[part]
    return node


def _read_array(dataset, h5py) -> np.ndarray:
    """A dataset's values; refuses external and virtual storage and non-numeric types."""
    if not isinstance(dataset, h5py.Dataset):
        raise _Bad(f"{dataset.name}: a group where an array was expected")
    if dataset.is_virtual or dataset.external:
        raise _Bad(f"{dataset.name}: stored outside the file (virtual or external), refused")
    if dataset.dtype.kind not in "biuf":
        raise _Bad(f"{dataset.name}: unsupported element type {dataset.dtype}")
    declared = math.prod(dataset.shape or ()) * dataset.dtype.itemsize
    if declared > MAX_WEIGHT_BYTES:
        # checked from the header: a few KB of HDF5 may declare a TiB
        raise _Bad(f"{dataset.name}: declares {dataset.shape} {dataset.dtype} "
                   f"({declared:,} bytes), more than any backbone weight "
                   f"({MAX_WEIGHT_BYTES:,}); refused before reading")
    if declared and dataset.id.get_storage_size() == 0:
        # never written: reading would allocate the declared size of fill values
        raise _Bad(f"{dataset.name}: declares {dataset.shape} {dataset.dtype} but holds no "
                   "data (never written); refused before reading")
    return np.asarray(dataset[()])


def _as_weight(array: np.ndarray, where: str) -> np.ndarray:
    """A float32 copy of a floating-point array; refuses NaN, infinity and float32 overflow."""
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        raise _Bad(f"{where}: {bad} of {array.size} values are NaN or infinite")
    out = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(out).all():
        raise _Bad(f"{where}: values beyond the float32 range")
    return out


def _split_key(key: str, where: str) -> tuple[str, str]:
    layer, _, weight = key.rpartition("/")
    for part in (layer, weight):
        if not part or part in (".", "..") or not part.isprintable():
            raise _Bad(f"{where}: cannot make a weight key from {key!r}")
    return layer, weight


def _config_classes(config_text) -> dict[str, str]:
    """{layer name: class name} of every layer in a ``model_config`` JSON (nested models
    included); empty when there is no config."""
    if config_text is None:
        return {}
    try:
        config = json.loads(_text(config_text, "model_config"))
    except json.JSONDecodeError as exc:
        raise _Bad(f"model_config: not JSON ({_one_line(exc)})") from None
    classes: dict[str, str] = {}
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            inner = node.get("config")
            if isinstance(node.get("class_name"), str) and isinstance(inner, dict) \
                    and isinstance(inner.get("name"), str):
                classes.setdefault(inner["name"], node["class_name"])
            stack += list(node.values())
        elif isinstance(node, list):
            stack += node
    return classes


class _Collector:
    """Converted arrays by key, refusing two arrays under one key."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}
        self.origin: dict[str, str] = {}
        self.used: set = set()
        self.total = 0

    def add(self, key: str, array: np.ndarray, dataset) -> None:
        if key in self.arrays:
            raise _Bad(f"{dataset.name} and {self.origin[key]} both give the weight {key}")
        self.arrays[key] = array
        self.origin[key] = dataset.name
        self.used.add(dataset.id)
        self.total += array.nbytes
        if self.total > MAX_FILE_BYTES:
            raise _Bad(f"its weights come to more than {MAX_FILE_BYTES:,} bytes (at "
                       f"{dataset.name}), far more than both backbones; refused")


def _read_legacy(root, classes: dict[str, str], h5py, out: _Collector, skipped: list,
                 notes: list) -> None:
    """Layouts 1 and 2: ``layer_names`` -> groups -> ``weight_names`` -> datasets."""
    renamed = 0
    for layer_name in _attr_strings(root, "layer_names"):
        group = _member(root, layer_name, h5py)
        if not isinstance(group, h5py.Group):
            raise _Bad(f"{group.name}: a dataset where a layer group was expected")
        names = _attr_strings(group, "weight_names")
        if names is None:
            raise _Bad(f"{group.name}: no weight_names attribute")
        entries = []
        for weight_name in names:
            dataset = _member(group, weight_name, h5py)
            path = re.sub(r":\d+$", "", weight_name)
            layer, weight = _split_key(path if "/" in path else f"{layer_name}/{path}",
                                       dataset.name)
            entries.append((layer, weight, dataset))
        weights_of = {}
        for layer, weight, _ in entries:
            weights_of.setdefault(layer, set()).add(weight)
        for layer, weight, dataset in entries:
            array = _read_array(dataset, h5py)
            if array.dtype.kind != "f":
                skipped.append((dataset.name, f"not floating point ({array.dtype})"))
                out.used.add(dataset.id)
                continue
            if weight == "depthwise_kernel" and classes.get(layer, "DepthwiseConv2D") == \
                    "DepthwiseConv2D" and "pointwise_kernel" not in weights_of[layer]:
                weight = "kernel"
                renamed += 1
            out.add(f"{layer}/{weight}", _as_weight(array, dataset.name), dataset)
    if renamed:
        notes.append(f"{renamed} DepthwiseConv2D kernel(s) renamed from Keras 2's "
                     "'depthwise_kernel' to Keras 3's 'kernel'")


def _read_keras3(f, h5py, out: _Collector, skipped: list, notes: list) -> None:
    """Layout 3: every ``vars`` group below ``layers`` (nested models included)."""
    unknown: dict[str, int] = {}

    def visit(group, path: str) -> None:
        for name in sorted(group.keys()):
            link = group.get(name, getlink=True)
            if not isinstance(link, h5py.HardLink):
                raise _Bad(f"{group.name.rstrip('/')}/{name}: {_link_kind(link)}, refused "
                           "(weights must be stored in the file itself)")
            child = group[name]
            if not isinstance(child, h5py.Group):
                continue
            child_path = f"{path}/{name}" if path else name
            if name == "vars":
                read_vars(child, path)
            else:
                visit(child, child_path)

    def read_vars(vars_group, owner: str) -> None:
        datasets = [k for k in vars_group.keys() if isinstance(vars_group[k], h5py.Dataset)]
        if not datasets:
            return
        if sorted(datasets, key=lambda k: (len(k), k)) != [str(i) for i in range(len(datasets))]:
            raise _Bad(f"{vars_group.name}: variables are not numbered 0, 1, 2, ...")
        members = [vars_group[str(i)] for i in range(len(datasets))]
        parts = owner.split("/")
        if parts[0] not in _LAYER_CONTAINERS:
            for d in members:
                skipped.append((d.name, "not a layer's variable (optimizer or model state)"))
            return
        layer_type = re.sub(r"_\d+$", "", parts[-1]) if len(parts) >= 2 and \
            parts[-2] in _LAYER_CONTAINERS else None
        table = KERAS3_VARIABLE_NAMES.get(layer_type)
        if table is None:
            reason = (f"variable names of layer type {layer_type!r} not known" if layer_type
                      else "variables of a layer's inner object; names not known")
            for d in members:
                skipped.append((d.name, reason))
            unknown[layer_type or parts[-1]] = unknown.get(layer_type or parts[-1], 0) + 1
            return
        if "name" not in vars_group.attrs:
            raise _Bad(f"{vars_group.name}: the layer's name is not recorded (a .weights.h5 of "
                       "an older Keras); re-save it with a recent Keras 3, or as "
                       "model.save('x.h5')")
        layer = _text(vars_group.attrs["name"], f"{vars_group.name} attribute name")
        names = table.get(len(members))
        if names is None and layer_type == "batch_normalization" and len(members) == 3:
            raise _Bad(f"{vars_group.name}: a batch_normalization layer ({layer}) with 3 "
                       "variables (center=False or scale=False): gamma and beta cannot be "
                       "told apart in this layout; save the full model (model.save('x.h5'))")
        if names is None:
            raise _Bad(f"{vars_group.name}: a {layer_type} layer ({layer}) with "
                       f"{len(members)} variables; expected "
                       f"{' or '.join(str(n) for n in sorted(table))}")
        for weight, dataset in zip(names, members):
            array = _read_array(dataset, h5py)
            if array.dtype.kind != "f":
                raise _Bad(f"{dataset.name}: {layer}/{weight} is not floating point "
                           f"({array.dtype})")
            key = "/".join(_split_key(f"{layer}/{weight}", dataset.name))
            out.add(key, _as_weight(array, dataset.name), dataset)

    visit(f, "")
    if unknown:
        notes.append("skipped layer types: " + ", ".join(f"{t} ({n})" for t, n in
                                                         unknown.items()))


def _import_h5py():
    try:
        import h5py
    except ImportError as exc:
        raise FeatureUnavailable(f"reading .h5 files needs the optional package h5py "
                                 f"(pip install h5py): {_one_line(exc)}") from None
    return h5py


def convert_h5(src, dst, force: bool = False) -> ConversionReport:
    """Convert a Keras HDF5 weight file to a refseg ``.npz`` weight file.

    Parameters
    ----------
    src : str or Path
        A Keras HDF5 file in one of the three layouts of the module docstring: the distributed
        ``*_weights_tf_dim_ordering_tf_kernels_notop.h5`` files, a full-model ``.h5``, or a
        Keras 3 ``.weights.h5``.
    dst : str or Path
        The ``.npz`` to write (its folder must exist). An existing file is replaced only
        when refseg wrote it or ``force`` is given (:func:`refseg.publish.check_single_output`).
    force : bool
        Replace an existing ``dst`` that refseg did not write.

    Returns
    -------
    ConversionReport

    Raises
    ------
    InputError
        A missing, empty, non-HDF5, truncated or corrupt file; no Keras layout found; a weight
        named in the index but missing; links or storage outside the file; NaN or infinite
        values; two arrays under one key. The message is one line and names the file.
        Nothing is written then.

    Notes
    -----
    1. Find the layout: ``layer_names`` on the root (1) or on a ``model_weights`` group (2),
       else a ``layers`` group (3).
    2. Read each layer's arrays under the key ``<layer>/<weight>``: (1, 2) the last two parts
       of its ``weight_names`` entry without the ``:0`` suffix; (3) the ``vars`` group's
       ``name`` attribute and :data:`KERAS3_VARIABLE_NAMES`. Keras 2's ``depthwise_kernel`` of
       a DepthwiseConv2D becomes ``kernel``, Keras 3's name.
    3. Check every array is finite; convert to float32.
    4. Count every other array of the file as skipped; write the ``.npz`` atomically
       (temporary name, then rename).

    References
    ----------
    [0133]-[0142]: the backbones are ResNet50 and MobileNetV2 with pre-trained weights.
    """
    src, dst = Path(src), Path(dst)
    head = _check_file(src, "an HDF5 file")
    if dst.suffix != ".npz":
        raise InputError(f"{dst}: expected an output file name ending in .npz")
    check_single_output(dst, [src], force)
    if not head.startswith(_HDF5_SIGNATURE):
        hint = (" (a zip archive: a .keras file holds model.weights.h5 inside; extract it)"
                if head.startswith(_ZIP_SIGNATURE) else "")
        raise InputError(f"{src}: not an HDF5 file{hint}")
    h5py = _import_h5py()
    out, skipped, notes = _Collector(), [], []
    try:
        with h5py.File(src, "r") as f:
            layout, root = _find_layout(f, h5py)
            if layout == _LAYOUT_KERAS3:
                _read_keras3(f, h5py, out, skipped, notes)
            else:
                _read_legacy(root, _config_classes(f.attrs.get("model_config")), h5py, out,
                             skipped, notes)
            version, backend = _root_text(root, "keras_version"), _root_text(root, "backend")
            _list_leftovers(f, h5py, out, skipped, layout)
    except _Bad as exc:
        raise InputError(f"{src}: {exc}") from None
    except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
        raise InputError(f"{src}: truncated or corrupt HDF5 data ({_one_line(exc)})") from None
    if not out.arrays:
        raise InputError(f"{src}: no layer weights found ({layout})")
    write_npz(dst, **out.arrays)
    keys = tuple(out.arrays)
    return ConversionReport(
        source=str(src), destination=str(dst), layout=layout, keras_version=version,
        backend=backend, layers=len({k.rpartition("/")[0] for k in keys}), arrays=len(keys),
        parameters=int(sum(a.size for a in out.arrays.values())), keys=keys,
        skipped=tuple(sorted(skipped)), notes=tuple(notes))


def _find_layout(f, h5py):
    """The file's layout (one of the three of the module docstring) and the group holding its
    layers."""
    if _attr_strings(f, "layer_names") is not None:
        return _LAYOUT_WEIGHTS, f
    if isinstance(f.get("model_weights", getlink=True), h5py.HardLink) and \
            isinstance(f["model_weights"], h5py.Group) and \
            _attr_strings(f["model_weights"], "layer_names") is not None:
        return _LAYOUT_MODEL, f["model_weights"]
    if any(isinstance(f.get(c, getlink=True), h5py.HardLink) for c in _LAYER_CONTAINERS):
        return _LAYOUT_KERAS3, f
    raise _Bad("no Keras weights layout found (no layer_names attribute, no model_weights or "
               "layers group)")


def _root_text(root, name: str) -> str | None:
    value = root.attrs.get(name)
    return None if value is None else _text(value, name)


def _list_leftovers(f, h5py, out, skipped: list, layout: str) -> None:
    """Count every dataset of the file that no weight was read from as skipped, with why."""
    leftovers = []
    f.visititems(lambda name, obj: leftovers.append(obj)
                 if isinstance(obj, h5py.Dataset) and obj.id not in out.used else None)
    listed = {path for path, _ in skipped}
    for obj in leftovers:
        if obj.name not in listed:
            skipped.append((obj.name, _leftover_reason(obj.name, layout)))


def _leftover_reason(path: str, layout: str) -> str:
    top = path.strip("/").split("/")[0]
    if top in ("optimizer_weights", "optimizer"):
        return "optimizer state"
    if path.strip("/").startswith(("top_level_model_weights", "model_weights/top_level")):
        return "model-level weight (not a layer's)"
    if layout == _LAYOUT_KERAS3:
        return "outside any layer's vars group"
    return "not listed in layer_names"
