"""The first data set of claim 1: training images with their manual labels ([0075], [0203]).

On disk a data set is a folder with two subfolders::

    DATA/images/<stem>.<ext>   any image Pillow reads (read as claim 1 step 1 reads images)
    DATA/labels/<stem>.png     the label of that image, same stem, PNG, same size

A label is an RGB image in the three colours of [0263]: the target contour red (255, 0, 0), the
inside of the closed region green (0, 255, 0), the outside blue (0, 0, 255); in memory it is a
(H, W) uint8 array of class ids 0 contour, 1 inside, 2 outside (:mod:`refseg.data.labels`, which
the synthetic welds use too). A pixel of any other colour is an error, never mapped to the
nearest class: a label edited with an antialiasing brush or saved as JPEG-in-PNG would otherwise train the network on
guesses.

:func:`load_dataset` checks the whole folder before anything is trained on it and reports every
problem it finds in one line: a stem with an image and no label (or the reverse), an image and
label of different sizes, an unreadable file, a label with off-palette pixels, an empty or
missing folder. ``refseg synth`` writes data sets of this form.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from refseg import publish
from refseg.images import LoadedImage, decode_image, read_bytes, read_image
from refseg.errors import InputError
from refseg.data.labels import CLASS_NAMES, CONTOUR, INSIDE, LABEL_COLOURS, OUTSIDE
from refseg.cite import implements, infrastructure

IMAGES_DIR, LABELS_DIR = "images", "labels"
#: How many problems :func:`load_dataset` spells out in its one-line report (the rest are
#: counted): enough to see a pattern, short enough to read.
MAX_REPORTED = 4
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOUR_TEXT = ", ".join(f"{name} {tuple(int(v) for v in LABEL_COLOURS[k])}"
                         for k, name in enumerate(CLASS_NAMES))


@implements("claim1.step2.dataset")
@dataclass(frozen=True)
class Sample:
    """One image of the data set and its label file.

    Attributes
    ----------
    stem : str
        The file name without extension, shared by the image and its label.
    image_path, label_path : Path
    """

    stem: str
    image_path: Path
    label_path: Path


@implements("claim1.step2.dataset")
class Dataset(Sequence):
    """The samples of a data set folder, sorted by stem; an immutable sequence of
    :class:`Sample` (indexing with a slice gives a Dataset).

    Attributes
    ----------
    folder : Path
        The data set folder (``images/`` and ``labels/`` inside).
    """

    def __init__(self, folder, samples=()):
        self.folder = Path(folder)
        self._samples = tuple(samples)

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Dataset(self.folder, self._samples[index])
        return self._samples[index]

    @property
    def stems(self) -> list[str]:
        """The stems of the samples, in order."""
        return [s.stem for s in self._samples]

    def __repr__(self) -> str:
        return f"Dataset({str(self.folder)!r}, {len(self)} samples)"


# ------------------------------------------------------------------------------ labels
def _decode_png(path: Path) -> Image.Image:
    """Open and fully decode a label file; InputError naming it otherwise. The file checks
    are :func:`refseg.images.read_bytes`'s, but labels must be PNG and their alpha
    and palette are examined here, not dropped."""
    data = read_bytes(path, "label file")
    if not data.startswith(_PNG_SIGNATURE):
        raise InputError(f"{path}: not a PNG file; labels must be PNG (lossless, exact colours)")
    image = decode_image(data, path, raise_hint=None)
    if len(data) >= 26 and data[12:16] == b"IHDR" and data[24] == 16:
        # Pillow would keep only the high byte of each 16-bit sample: 65280 would read as 255
        raise InputError(f"{path}: 16-bit PNG; labels must be 8-bit RGB in the colours of "
                         f"[0263] ({_COLOUR_TEXT})")
    return image


def _rgb_of_label(image: Image.Image, path: Path) -> np.ndarray:
    """(H, W, 3) uint8 colours of a decoded label; InputError for a gray label or one with
    transparent pixels (a colour under alpha < 255 is not the colour that was painted)."""
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("RGBA", "PA"):
        rgba = np.asarray(image.convert("RGBA"))
        clear = rgba[..., 3] != 255
        if clear.any():
            row, col = np.unravel_index(int(np.argmax(clear)), clear.shape)
            raise InputError(f"{path}: {int(clear.sum())} pixels are not opaque (alpha < 255), "
                             f"e.g. row {row}, col {col} has alpha {int(rgba[row, col, 3])}; "
                             "labels must be opaque RGB")
        return np.ascontiguousarray(rgba[..., :3])
    if image.mode != "RGB":
        raise InputError(f"{path}: label image has mode {image.mode}; labels must be RGB "
                         f"(or palette) in the colours of [0263] ({_COLOUR_TEXT})")
    return np.asarray(image, dtype=np.uint8)


@implements("claim1.step2.dataset")
def rgb_to_classes(rgb, name: str = "label") -> np.ndarray:
    """Class ids of a label image in the colours of [0263].

    Parameters
    ----------
    rgb : ndarray of shape (H, W, 3), uint8
    name : str
        What to call the array in an error message (the file name when read from disk).

    Returns
    -------
    ndarray of shape (H, W), uint8
        0 contour (red), 1 inside (green), 2 outside (blue).

    Raises
    ------
    InputError
        Any pixel of another colour: the message gives their count, the first one in row-major
        order (row, col) and its colour. Nothing is mapped to a nearest colour.

    References
    ----------
    [0261]-[0263].
    """
    a = np.asarray(rgb)
    if a.ndim != 3 or a.shape[2] != 3 or a.dtype != np.uint8:
        raise InputError(f"{name}: expected an (H, W, 3) uint8 RGB array, got shape {a.shape} "
                         f"dtype {a.dtype}")
    # one 24-bit code per pixel turns the colour match into three integer comparisons
    code = (a[..., 0].astype(np.uint32) << 16) | (a[..., 1].astype(np.uint32) << 8) | a[..., 2]
    classes = np.full(code.shape, 255, dtype=np.uint8)
    for k in (CONTOUR, INSIDE, OUTSIDE):
        r, g, b = (int(v) for v in LABEL_COLOURS[k])
        classes[code == ((r << 16) | (g << 8) | b)] = k
    off = classes == 255
    if off.any():
        count = int(off.sum())
        row, col = np.unravel_index(int(np.argmax(off)), off.shape)
        colour = tuple(int(v) for v in a[row, col])
        raise InputError(f"{name}: {count} of {off.size} pixels are not a label colour of "
                         f"[0263] ({_COLOUR_TEXT}); first at row {row}, col {col}: {colour}")
    return classes


@implements("claim1.step2.dataset")
def read_label(path) -> np.ndarray:
    """Read a label PNG as class ids.

    Parameters
    ----------
    path : str or Path
        An 8-bit RGB PNG, an RGBA PNG whose alpha is 255 everywhere, or a palette PNG, in the
        colours of [0263].

    Returns
    -------
    ndarray of shape (H, W), uint8
        0 contour, 1 inside, 2 outside.

    Raises
    ------
    InputError
        Missing, empty, non-PNG, truncated or 16-bit file; gray label; transparent pixels;
        off-palette pixels (count, first position, colour). The message names the file.

    References
    ----------
    [0261]-[0263].
    """
    p = Path(path)
    return rgb_to_classes(_rgb_of_label(_decode_png(p), p), str(p))


def _check_classes(classes, name: str = "classes") -> np.ndarray:
    a = np.asarray(classes)
    if a.ndim != 2:
        raise InputError(f"{name}: expected a 2-D array (H, W) of class ids, got shape {a.shape}")
    if a.dtype.kind not in "biu":
        raise InputError(f"{name}: expected integer class ids, got dtype {a.dtype}")
    bad = (a < 0) | (a > OUTSIDE)
    if bad.any():
        row, col = np.unravel_index(int(np.argmax(bad)), bad.shape)
        raise InputError(f"{name}: {int(bad.sum())} values are not a class id 0, 1 or 2; "
                         f"first at row {row}, col {col}: {a[row, col]}")
    return a.astype(np.intp, copy=False)


@implements("claim1.step2.dataset")
def label_to_rgb(classes) -> np.ndarray:
    """Colour a class map with the label colours of [0263].

    Parameters
    ----------
    classes : ndarray of shape (H, W), integer
        0 contour, 1 inside, 2 outside.

    Returns
    -------
    ndarray of shape (H, W, 3), uint8
        Red, green, blue respectively.

    Raises
    ------
    InputError
        Not 2-D, not integer, or a value outside 0-2.
    """
    return LABEL_COLOURS[_check_classes(classes)]


@implements("claim1.step2.dataset")
def write_label(path, classes) -> None:
    """Write a class map as a label PNG in the colours of [0263], atomically.

    Parameters
    ----------
    path : str or Path
    classes : ndarray of shape (H, W), integer
        0 contour, 1 inside, 2 outside.
    """
    publish.write_png(path, label_to_rgb(classes))


# ----------------------------------------------------------------------------- data set
def _image_suffixes() -> set[str]:
    """File name extensions Pillow can open (lower case, with the dot)."""
    Image.init()
    return {ext.lower() for ext, fmt in Image.registered_extensions().items()
            if fmt in Image.OPEN}


def _size_text(shape) -> str:
    return f"{shape[1]}x{shape[0]}"


class _Problems:
    """Problems found in a data set, by kind, in the order found."""

    def __init__(self):
        self.items: list[tuple[str, str]] = []

    def add(self, kind: str, text: str) -> None:
        self.items.append((kind, text))

    def raise_if_any(self, folder: Path) -> None:
        if not self.items:
            return
        counts = Counter(kind for kind, _ in self.items)
        n = len(self.items)
        shown = "; ".join(text for _, text in self.items[:MAX_REPORTED])
        more = f"; and {n - MAX_REPORTED} more" if n > MAX_REPORTED else ""
        kinds = ", ".join(f"{c} {k}" for k, c in counts.items())
        raise InputError(f"{folder}: {n} problem{'s' if n > 1 else ''} in the data set "
                         f"({kinds}): {shown}{more}")


def _listing(folder: Path, problems: _Problems) -> list[Path]:
    """Visible entries of a subfolder; nested folders are reported, hidden files skipped
    (editors and file managers leave them)."""
    files = []
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_dir():
            problems.add("nested folders", f"{p}: is a folder (nested folders are not read)")
        else:
            files.append(p)
    return files


def _by_stem(files: list[Path], what: str, problems: _Problems) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for p in files:
        if p.stem in found:
            problems.add("duplicate stems", f"{p} and {found[p.stem].name}: two {what} with "
                                            f"the stem {p.stem!r}")
        else:
            found[p.stem] = p
    return found


@implements("claim1.step2.dataset")
def load_dataset(folder, *, check: bool = True) -> Dataset:
    """Open a data set folder: pair every image in ``images/`` with its label in ``labels/``.

    Parameters
    ----------
    folder : str or Path
        Holds ``images/`` (any format Pillow reads) and ``labels/`` (PNG, same stems).
    check : bool
        Also decode every image and label and check readability, sizes and label colours
        (the default). With False only the folder structure and the pairing are checked, which
        is fast for large sets; :func:`load_pair` still checks each pair when it reads it.

    Returns
    -------
    Dataset
        Samples sorted by stem.

    Raises
    ------
    InputError
        One line for all problems found: a missing folder or subfolder, no images, an image
        without a label or a label without an image (named), two files with one stem, a
        non-image file in ``images/`` or a non-PNG file in ``labels/``, nested folders, and with
        ``check``: unreadable files, image and label of different sizes (both sizes named),
        labels with off-palette or transparent pixels. The first :data:`MAX_REPORTED` problems
        are spelled out, the rest counted by kind.

    Notes
    -----
    Hidden files (names starting with ".") are ignored. Sizes are width x height, as Pillow
    and :mod:`refseg.images` report them.

    References
    ----------
    Claim 1 ("the feature regions and their manual labels form the first data set"); [0075],
    [0203], [0261]-[0263].
    """
    root = _dataset_folder(folder)
    problems = _Problems()
    subfolders = _subfolders(root, problems)
    images, labels = _files(subfolders, problems)
    samples = _pairs(images, labels, subfolders[LABELS_DIR], problems)
    if check:
        _check_pairs(samples, problems)
    problems.raise_if_any(root)
    return Dataset(root, samples)


def _dataset_folder(folder) -> Path:
    """``folder`` as a Path, after any publication of it that a killed writer began is
    completed; InputError when it is missing or not a folder."""
    root = Path(folder)
    if not root.exists():
        raise InputError(f"{root}: no such folder")
    if root.is_dir():
        publish.settle(root)  # a set published by refseg synth: never read half-moved
    if not root.is_dir():
        raise InputError(f"{root}: is not a folder (a data set is a folder with "
                         f"{IMAGES_DIR}/ and {LABELS_DIR}/)")
    return root


def _subfolders(root: Path, problems: _Problems) -> dict[str, Path]:
    """{IMAGES_DIR: root/images, LABELS_DIR: root/labels}; raises when one is missing."""
    subfolders = {}
    for name in (IMAGES_DIR, LABELS_DIR):
        sub = root / name
        if not sub.is_dir():
            problems.add("missing folders", f"{sub}: no such folder")
        else:
            subfolders[name] = sub
    problems.raise_if_any(root)
    return subfolders


def _files(subfolders: dict[str, Path], problems: _Problems) -> tuple[list[Path], list[Path]]:
    """The image files and the PNG labels of the two subfolders; any other file is a
    problem."""
    suffixes = _image_suffixes()
    images, labels = [], []
    for p in _listing(subfolders[IMAGES_DIR], problems):
        if p.suffix.lower() in suffixes:
            images.append(p)
        else:
            problems.add("non-image files", f"{p}: not an image file type Pillow reads")
    for p in _listing(subfolders[LABELS_DIR], problems):
        if p.suffix.lower() == ".png":
            labels.append(p)
        else:
            problems.add("non-PNG labels", f"{p}: labels must be PNG files")
    if not images and not labels:
        problems.add("empty folders", f"{subfolders[IMAGES_DIR]}: no images (and "
                                      f"{subfolders[LABELS_DIR]} no labels)")
    return images, labels


def _pairs(images: list[Path], labels: list[Path], label_folder: Path,
           problems: _Problems) -> list[Sample]:
    """One sample per stem that has both an image and a label, sorted by stem; a file
    without its partner is a problem."""
    image_by_stem = _by_stem(images, "images", problems)
    label_by_stem = _by_stem(labels, "labels", problems)
    for stem, p in image_by_stem.items():
        if stem not in label_by_stem:
            problems.add("images without a label",
                         f"{p}: no label {label_folder / (stem + '.png')}")
    for stem, p in label_by_stem.items():
        if stem not in image_by_stem:
            problems.add("labels without an image", f"{p}: no image with the stem {stem!r}")
    return [Sample(stem, image_by_stem[stem], label_by_stem[stem])
            for stem in sorted(image_by_stem) if stem in label_by_stem]


def _check_pairs(samples: list[Sample], problems: _Problems) -> None:
    """Decode every pair: unreadable files, size mismatches and bad label colours are
    problems."""
    for sample in samples:
        try:
            _read_pair(sample)
        except _SizeMismatch as exc:
            problems.add("size mismatches", str(exc))
        except InputError as exc:
            problems.add("unreadable or invalid files", str(exc))


class _SizeMismatch(InputError):
    """An image and its label of different sizes (counted apart in the data set report)."""


def _read_pair(sample: Sample):
    """Decode both files of a sample and check their sizes; reports the image's problem and
    the label's problem together when both are bad."""
    errors, rgb, classes = [], None, None
    try:
        rgb = _as_rgb(read_image(sample.image_path, raise_hint=None))
    except InputError as exc:
        errors.append(str(exc))
    try:
        classes = read_label(sample.label_path)
    except InputError as exc:
        errors.append(str(exc))
    if errors:
        raise InputError("; ".join(errors))
    if rgb.shape[:2] != classes.shape:
        raise _SizeMismatch(f"size mismatch: {sample.image_path} is {_size_text(rgb.shape)}, "
                         f"{sample.label_path} is {_size_text(classes.shape)} (width x height)")
    return rgb, classes


def _as_rgb(loaded: LoadedImage) -> np.ndarray:
    """(H, W, 3) uint8 from what read_image gives: gray repeated in three channels; 16-bit gray
    (already divided by 257) rounded to the nearest integer."""
    pixels = loaded.pixels
    if pixels.dtype != np.uint8:
        pixels = np.clip(np.rint(pixels), 0, 255).astype(np.uint8)
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[..., None], 3, axis=2)
    return np.ascontiguousarray(pixels)


@implements("claim1.step2.dataset", "claim5.acquisition_module")
def load_pair(sample: Sample) -> tuple[np.ndarray, np.ndarray]:
    """Read one training image and its label.

    Parameters
    ----------
    sample : Sample

    Returns
    -------
    rgb : ndarray of shape (H, W, 3), uint8
        The image as claim 1 step 1 reads it (:func:`refseg.images.read_image`); gray images
        repeated in three channels, 16-bit gray rounded from the 0-255 scale.
    classes : ndarray of shape (H, W), uint8
        0 contour, 1 inside, 2 outside (:func:`read_label`).

    Raises
    ------
    InputError
        Either file unreadable or invalid, or the two of different sizes.
    """
    return _read_pair(sample)


@implements("claim1.step2.dataset")
def split(dataset: Dataset, validation_fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """Split a data set into training and validation samples, at random but reproducibly.

    Parameters
    ----------
    dataset : Dataset
    validation_fraction : float
        In [0, 1): the share of samples held out for validation.
    seed : int
        Seed of ``numpy.random.default_rng``; equal seeds (and data sets) give equal splits.

    Returns
    -------
    train, validation : Dataset
        Disjoint, together all samples, each in the data set's order (sorted by stem).

    Notes
    -----
    The validation set has round(fraction x n) samples (halves rounded up), except that for
    0 < fraction < 1 and n >= 2 both sets keep at least one sample. The samples are chosen by
    a permutation drawn from ``default_rng(seed)``.
    """
    try:
        fraction = float(validation_fraction)
    except (TypeError, ValueError):
        raise InputError(f"validation_fraction: expected a number, got "
                         f"{validation_fraction!r}") from None
    if not 0 <= fraction < 1:
        raise InputError(f"validation_fraction: expected a number in [0, 1), got {fraction}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed: expected an integer >= 0, got {seed!r}")
    n = len(dataset)
    count = int(np.floor(fraction * n + 0.5))
    if 0 < fraction and n >= 2:
        count = min(max(count, 1), n - 1)
    chosen = np.zeros(n, dtype=bool)
    chosen[np.random.default_rng(int(seed)).permutation(n)[:count]] = True
    samples = list(dataset)
    return (Dataset(dataset.folder, [s for s, v in zip(samples, chosen) if not v]),
            Dataset(dataset.folder, [s for s, v in zip(samples, chosen) if v]))


@infrastructure("a data set folder's one-line summary")
def describe_dataset(folder) -> str:
    """Check every image/label pair of a data set folder and summarise it on one line.

    Parameters
    ----------
    folder : Path
        A data set folder (``images/`` and ``labels/``).

    Returns
    -------
    str
        The number of pairs, the image sizes (width x height) with their counts and the share
        of each class among the label pixels. :func:`load_dataset` and :func:`read_label` raise
        InputError, naming the file, for the first invalid pair.
    """
    data = load_dataset(folder)
    sizes, counts = Counter(), np.zeros(len(CLASS_NAMES), dtype=np.int64)
    for sample in data:
        classes = read_label(sample.label_path)
        sizes[f"{classes.shape[1]}x{classes.shape[0]}"] += 1
        counts += np.bincount(classes.ravel(), minlength=len(CLASS_NAMES))
    shares = ", ".join(f"{name} {100 * n / counts.sum():.1f} %"
                       for name, n in zip(CLASS_NAMES, counts))
    size_text = ", ".join(f"{k} ({v})" for k, v in sorted(sizes.items()))
    return (f"{folder}: {len(data)} image/label pairs, all valid; sizes (width x height) "
            f"{size_text}; label pixels {shares}")
