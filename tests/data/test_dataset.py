"""The first data set of claim 1 (images with their manual labels, [0075], [0203], [0261]-[0263]):
label colours, pairing and size checks, the split, and the synthetic data sets of `refseg synth`."""
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from refseg import publish
from refseg.data import dataset
from refseg.cli import main
from refseg.errors import InputError
from refseg.publish import OUTPUT_MARKER
from refseg.data.labels import CONTOUR, INSIDE, LABEL_COLOURS, OUTSIDE
from refseg.data.synthetic import CONTOUR_HALF_WIDTH, weld_image
from strategies import LABEL_PALETTE, label_maps, off_palette_colours
from checkout import run_refseg

pytestmark = pytest.mark.claim("claim1.step2.dataset")

#: "<n> of <total> pixels are not a label colour ...; first at row <r>, col <c>: (R, G, B)"
OFF_PALETTE = re.compile(r"(\d+) of (\d+) pixels are not a label colour of \[0263\].*"
                         r"first at row (\d+), col (\d+): \((\d+), (\d+), (\d+)\)")


def make_dataset(root: Path, sizes, label_sizes=None, seed=0) -> Path:
    """A data set folder with one synthetic-looking pair per size (rows, cols)."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for i, shape in enumerate(sizes):
        lshape = shape if label_sizes is None else label_sizes[i]
        publish.write_png(root / "images" / f"s{i}.png",
                          rng.integers(0, 256, (*shape, 3), dtype=np.uint8))
        dataset.write_label(root / "labels" / f"s{i}.png",
                            rng.integers(0, 3, lshape, dtype=np.uint8))
    return root




def listing(folder: Path):
    return sorted((str(p.relative_to(folder)), p.read_bytes() if p.is_file() else None)
                  for p in folder.rglob("*"))


# ------------------------------------------------------------------------------ labels
@settings(max_examples=30)
@given(classes=label_maps(), mode=st.sampled_from(["RGB", "RGBA", "P"]),
       order=st.permutations(range(3)), extra=st.integers(0, 5))
def test_labels_in_the_palette_load_exactly(classes, mode, order, extra):
    """RGB, opaque RGBA and palette PNGs in the three colours read back as exactly the class
    ids; a palette's index order (and unused extra entries) does not matter, only colours."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "label.png"
        rgb = LABEL_COLOURS[classes]
        if mode == "RGB":
            Image.fromarray(rgb).save(path)
        elif mode == "RGBA":
            Image.fromarray(np.dstack([rgb, np.full(classes.shape, 255, np.uint8)])).save(path)
        else:
            # palette index of class k is position of k in `order`; extra entries unused
            index = np.argsort(order).astype(np.uint8)[classes]
            im = Image.fromarray(index)
            im.putpalette([v for k in order for v in LABEL_PALETTE[k]] + [7, 7, 7] * extra)
            assert im.mode == "P"
            im.save(path)
        got = dataset.read_label(path)
        assert got.dtype == np.uint8 and got.shape == classes.shape
        assert np.array_equal(got, classes)


@settings(max_examples=40)
@given(classes=label_maps(min_side=2), data=st.data())
def test_off_palette_pixels_are_reported_with_count_and_first_position(classes, data):
    """Any pixel of another colour is an error (never mapped to the nearest class): the
    message names the file, counts the pixels, and shows the first one (row-major) with the
    colour it really has."""
    rows, cols = classes.shape
    flat = data.draw(st.lists(st.integers(0, rows * cols - 1), min_size=1, max_size=rows * cols,
                              unique=True))
    colours = data.draw(st.lists(off_palette_colours(), min_size=len(flat),
                                 max_size=len(flat)))
    rgb = LABEL_COLOURS[classes].copy()
    for k, colour in zip(flat, colours):
        rgb[k // cols, k % cols] = colour
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bad.png"
        Image.fromarray(rgb).save(path)
        with pytest.raises(InputError) as info:
            dataset.read_label(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    count, total, row, col, *colour = map(int, OFF_PALETTE.search(message).groups())
    assert (count, total) == (len(flat), rows * cols)
    assert row * cols + col == min(flat)
    assert tuple(colour) == tuple(rgb[row, col]) and tuple(colour) not in LABEL_PALETTE


def test_transparent_gray_non_png_sixteen_bit_and_broken_labels_are_refused(tmp_path):
    rgb = LABEL_COLOURS[np.zeros((4, 5), np.uint8)]
    rgba = np.dstack([rgb, np.full((4, 5), 255, np.uint8)])
    rgba[2, 3, 3] = 128
    Image.fromarray(rgba).save(tmp_path / "alpha.png")
    with pytest.raises(InputError, match=r"alpha.png: 1 pixels are not opaque.*row 2, col 3"):
        dataset.read_label(tmp_path / "alpha.png")
    Image.fromarray(np.zeros((4, 5), np.uint8)).save(tmp_path / "gray.png")
    with pytest.raises(InputError, match="gray.png: label image has mode L"):
        dataset.read_label(tmp_path / "gray.png")
    Image.fromarray(rgb).save(tmp_path / "jpeg.png", format="JPEG")
    with pytest.raises(InputError, match="jpeg.png: not a PNG file"):
        dataset.read_label(tmp_path / "jpeg.png")
    Image.fromarray(np.full((4, 5), 65535, np.uint16)).save(tmp_path / "deep.png")
    with pytest.raises(InputError, match="deep.png: 16-bit PNG"):
        dataset.read_label(tmp_path / "deep.png")
    noisy = LABEL_COLOURS[np.random.default_rng(0).integers(0, 3, (30, 40))]
    Image.fromarray(noisy).save(tmp_path / "whole.png")
    whole = (tmp_path / "whole.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(InputError, match="cut.png: truncated or corrupt"):
        dataset.read_label(tmp_path / "cut.png")
    with pytest.raises(InputError, match="missing.png: no such file"):
        dataset.read_label(tmp_path / "missing.png")


@settings(max_examples=30)
@given(classes=label_maps())
def test_label_round_trip(classes):
    """write_label then read_label gives the class map back; the file is in [0263] colours."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "label.png"
        dataset.write_label(path, classes.astype(np.int64))
        assert np.array_equal(dataset.read_label(path), classes)
        on_disk = np.asarray(Image.open(path).convert("RGB"))
    assert np.array_equal(on_disk, dataset.label_to_rgb(classes))
    assert {tuple(c) for c in on_disk.reshape(-1, 3)} <= set(LABEL_PALETTE)
    assert [tuple(LABEL_COLOURS[k]) for k in (CONTOUR, INSIDE, OUTSIDE)] == list(LABEL_PALETTE)


def test_bad_class_maps_are_refused():
    with pytest.raises(InputError, match="class id 0, 1 or 2; first at row 0, col 1: 3"):
        dataset.label_to_rgb(np.array([[0, 3], [1, 2]]))
    with pytest.raises(InputError, match="integer"):
        dataset.label_to_rgb(np.zeros((2, 2)))
    with pytest.raises(InputError, match="2-D"):
        dataset.label_to_rgb(np.zeros((2, 2, 1), np.uint8))
    with pytest.raises(InputError, match=r"\(H, W, 3\) uint8"):
        dataset.rgb_to_classes(np.zeros((2, 2, 3), np.float32))


# ----------------------------------------------------------------------------- data set
def test_a_valid_folder_loads_sorted_and_pairs_read_back(tmp_path):
    root = make_dataset(tmp_path / "data", [(5, 7), (3, 4), (6, 6)])
    (root / "images" / ".DS_Store").write_bytes(b"junk")  # hidden files are ignored
    data = dataset.load_dataset(root)
    assert data.stems == ["s0", "s1", "s2"] and len(data) == 3
    assert isinstance(data[1:], dataset.Dataset) and data[1:].stems == ["s1", "s2"]
    sample = data[1]
    assert sample == dataset.Sample("s1", root / "images" / "s1.png", root / "labels" / "s1.png")
    rgb, classes = dataset.load_pair(sample)
    assert rgb.shape == (3, 4, 3) and rgb.dtype == np.uint8
    assert classes.shape == (3, 4) and classes.dtype == np.uint8
    assert np.array_equal(rgb, np.asarray(Image.open(sample.image_path)))


def test_gray_and_jpeg_images_are_read_as_rgb(tmp_path):
    root = make_dataset(tmp_path / "data", [(4, 6)])
    gray = np.arange(24, dtype=np.uint8).reshape(4, 6) * 10
    (root / "images" / "s0.png").unlink()
    Image.fromarray(gray).save(root / "images" / "s0.jpg", quality=95)
    rgb, _ = dataset.load_pair(dataset.load_dataset(root)[0])
    assert rgb.shape == (4, 6, 3) and (rgb[..., 0] == rgb[..., 1]).all()


@settings(max_examples=25)
@given(image=st.tuples(st.integers(3, 9), st.integers(3, 9)),
       label=st.tuples(st.integers(3, 9), st.integers(3, 9)))
def test_size_mismatches_are_reported_with_both_sizes(image, label):
    with tempfile.TemporaryDirectory() as tmp:
        root = make_dataset(Path(tmp) / "data", [image], [label])
        if image == label:
            assert len(dataset.load_dataset(root)) == 1
            return
        with pytest.raises(InputError) as info:
            dataset.load_dataset(root)
        with pytest.raises(InputError, match="size mismatch"):
            dataset.load_pair(dataset.load_dataset(root, check=False)[0])
    message = str(info.value)
    assert "1 problem in the data set (1 size mismatches)" in message
    assert f"s0.png is {image[1]}x{image[0]}" in message
    assert f"s0.png is {label[1]}x{label[0]}" in message and "\n" not in message


def test_every_structural_problem_is_collected_in_one_line(tmp_path):
    root = make_dataset(tmp_path / "data", [(4, 4)] * 6)
    (root / "labels" / "s1.png").unlink()                       # image without label
    (root / "images" / "s2.png").unlink()                       # label without image
    (root / "images" / "notes.txt").write_text("hello")         # not an image type
    (root / "labels" / "s3.jpg").write_bytes(b"x")              # label not PNG
    (root / "images" / "s4.png").write_bytes(b"not a png")      # unreadable image
    rgb = LABEL_COLOURS[np.zeros((4, 4), np.uint8)]
    rgb[1, 2] = (254, 0, 0)
    Image.fromarray(rgb).save(root / "labels" / "s5.png")       # one off-palette pixel
    with pytest.raises(InputError) as info:
        dataset.load_dataset(root)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{root}: 6 problems in the data set")
    for kind in ("1 images without a label", "1 labels without an image", "1 non-image files",
                 "1 non-PNG labels", "2 unreadable or invalid files"):
        assert kind in message
    assert "notes.txt" in message and "s1.png: no label" in message and "s3.jpg" in message
    assert "and 2 more" in message  # MAX_REPORTED = 4 spelled out, the rest counted
    # without check, structure only: the unreadable image and the bad label pass
    with pytest.raises(InputError, match="4 problems"):
        dataset.load_dataset(root, check=False)


def test_missing_and_empty_folders(tmp_path):
    with pytest.raises(InputError, match="nowhere: no such folder"):
        dataset.load_dataset(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="file: is not a folder"):
        dataset.load_dataset(tmp_path / "file")
    (tmp_path / "half" / "images").mkdir(parents=True)
    with pytest.raises(InputError, match=r"half/labels: no such folder"):
        dataset.load_dataset(tmp_path / "half")
    (tmp_path / "half" / "labels").mkdir()
    with pytest.raises(InputError, match="empty folders.*no images"):
        dataset.load_dataset(tmp_path / "half")


# -------------------------------------------------------------------------------- split
def fake_dataset(n):
    return dataset.Dataset("data", [dataset.Sample(f"s{i:03d}", Path(f"i{i}"), Path(f"l{i}"))
                                    for i in range(n)])


@given(n=st.integers(0, 60), fraction=st.floats(0, 1, exclude_max=True),
       seed=st.integers(0, 2**32))
def test_split_is_disjoint_covering_deterministic_and_respects_the_fraction(n, fraction, seed):
    data = fake_dataset(n)
    train, validation = dataset.split(data, fraction, seed)
    assert set(train.stems).isdisjoint(validation.stems)
    assert sorted(train.stems + validation.stems) == data.stems
    assert train.stems == sorted(train.stems) and validation.stems == sorted(validation.stems)
    again = dataset.split(data, fraction, seed)
    assert (again[0].stems, again[1].stems) == (train.stems, validation.stems)
    rounded = int(np.floor(fraction * n + 0.5))
    assert abs(rounded - fraction * n) <= 0.5
    if fraction > 0 and n >= 2:   # both sides keep a sample, else the nearest count
        assert len(validation) == min(max(rounded, 1), n - 1)
        assert len(train) >= 1 and len(validation) >= 1
    else:
        assert len(validation) == rounded


def test_split_depends_on_the_seed_and_refuses_bad_arguments():
    data = fake_dataset(40)
    splits = {tuple(dataset.split(data, 0.25, seed)[1].stems) for seed in range(5)}
    assert len(splits) == 5
    for bad in (-0.1, 1.0, float("nan"), "a lot"):
        with pytest.raises(InputError, match="validation_fraction"):
            dataset.split(data, bad, 0)
    with pytest.raises(InputError, match="seed"):
        dataset.split(data, 0.2, -1)


# ------------------------------------------------------------- generator and refseg synth
@pytest.mark.claim("claim5.acquisition_module")
def test_generator_is_deterministic_to_the_byte(tmp_path):
    for name, seed in (("a", 11), ("b", 11), ("c", 12)):
        sample = weld_image(seed, (48, 96))
        publish.write_png(tmp_path / f"{name}.png", sample.rgb)
        dataset.write_label(tmp_path / f"{name}_label.png", sample.classes)
    read = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert read["a.png"] == read["b.png"] and read["a_label.png"] == read["b_label.png"]
    assert read["a.png"] != read["c.png"] and read["a_label.png"] != read["c_label.png"]


@pytest.mark.claim("claim5.acquisition_module")
@settings(max_examples=8)
@given(seed=st.integers(0, 2**31), rows=st.integers(32, 80), cols=st.integers(32, 160))
def test_generated_labels_are_a_seam_band_with_thin_contours(seed, rows, cols):
    """Every column reads outside, contour, inside, contour, outside from top to bottom, and
    the contour is a thin band: fewer than 4 times the pixels of two flat boundaries, each
    2 * CONTOUR_HALF_WIDTH + 1 pixels thick (steep stretches of a wavy boundary need more)."""
    sample = weld_image(seed, (rows, cols))
    assert sample.rgb.shape == (rows, cols, 3) and sample.params["rows"] == rows
    classes = sample.classes
    for col in range(0, cols, max(cols // 7, 1)):
        column = classes[:, col]
        runs = [k for i, k in enumerate(column) if i == 0 or k != column[i - 1]]
        assert runs == [OUTSIDE, CONTOUR, INSIDE, CONTOUR, OUTSIDE], (col, runs)
    contour_share = (classes == CONTOUR).mean()
    assert contour_share < 4 * 2 * (2 * CONTOUR_HALF_WIDTH + 1) / rows


@pytest.mark.claim("claim5.acquisition_module", "claim5.feature_module")
def test_synth_writes_a_loadable_data_set(tmp_path, capsys):
    out = tmp_path / "synthetic"
    assert main(["synth", "--count", "3", "--out", str(out), "--seed", "5",
                 "--size", "48x96"]) == 0
    assert str(out) in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "images", "labels",
                                                     "synth.json"]
    data = dataset.load_dataset(out)
    assert data.stems == ["weld_00000", "weld_00001", "weld_00002"]
    for i, sample in enumerate(data):
        rgb, classes = dataset.load_pair(sample)
        expected = weld_image(5 + i, (48, 96))
        assert np.array_equal(rgb, expected.rgb) and np.array_equal(classes, expected.classes)
    manifest = json.loads((out / "synth.json").read_text())
    assert manifest["seed"] == 5 and manifest["count"] == 3
    assert manifest["size"] == {"rows": 48, "cols": 96} and manifest["refseg_version"]
    assert [s["seed"] for s in manifest["samples"]] == [5, 6, 7]
    assert manifest["samples"][0]["params"] == json.loads(json.dumps(weld_image(5, (48, 96))
                                                                     .params))
    # the same arguments elsewhere: byte-identical files
    again = tmp_path / "again"
    assert main(["synth", "--count", "3", "--out", str(again), "--seed", "5",
                 "--size", "48x96"]) == 0
    assert listing(out) == listing(again)
    # a second run replaces the first one's images and labels whole
    assert main(["synth", "--count", "1", "--out", str(out), "--size", "40x40"]) == 0
    assert dataset.load_dataset(out).stems == ["weld_00000"]
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [OUTPUT_MARKER]


@pytest.mark.claim("claim5.acquisition_module")
def test_synth_draws_the_same_files_in_any_number_of_processes(tmp_path, capsys):
    # each weld is drawn from its own seed, so workers can draw them in any order
    sets = {}
    for jobs in (1, 2, 3):
        out = tmp_path / f"jobs{jobs}"
        assert main(["synth", "--count", "7", "--out", str(out), "--seed", "11",
                     "--size", "40x64", "--jobs", str(jobs)]) == 0
        sets[jobs] = listing(out)
    assert len([name for name, _ in sets[1] if name.endswith(".png")]) == 14
    assert sets[1] == sets[2] == sets[3]
    capsys.readouterr()
    assert main(["synth", "--count", "2", "--out", str(tmp_path / "none"),
                 "--jobs", "0"]) == 2
    assert capsys.readouterr().err.strip() == ("refseg: error: --jobs: expected an integer "
                                                "from 1 to 1024, got 0")
    assert not (tmp_path / "none").exists()


@pytest.mark.claim("claim5.acquisition_module")
def test_synth_never_overwrites_a_data_set_it_did_not_write(tmp_path, capsys):
    root = make_dataset(tmp_path / "hand", [(4, 4)])
    before = listing(root)
    assert main(["synth", "--count", "2", "--out", str(root)]) == 2
    assert "holds files that refseg did not write (images, labels)" in capsys.readouterr().err
    assert listing(root) == before


@pytest.mark.claim("claim5.acquisition_module")
@pytest.mark.parametrize("args, message", [
    (["--count", "0"], "--count: expected at least 1, got 0"),
    (["--count", "2", "--size", "10x600"], "--size: each side must be 32-8192"),
    (["--count", "2", "--seed", "-3"], "--seed: expected at least 0"),
])
def test_synth_bad_arguments_one_line_exit_2_nothing_written(tmp_path, args, message):
    out = tmp_path / "out"
    result = run_refseg("synth", *args, "--out", str(out))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("refseg: error: ") and message in lines[0]
    assert "Traceback" not in result.stderr and not out.exists()


def test_dataset_check_bad_folders_one_line_exit_2_nothing_written(tmp_path):
    result = run_refseg("dataset", "check", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"refseg: error: {tmp_path / 'missing'}: "
                                                  "no such folder"]
    assert not (tmp_path / "missing").exists()

    root = make_dataset(tmp_path / "data", [(5, 6), (5, 6)])
    label = root / "labels" / "s1.png"
    rgb = np.asarray(Image.open(label)).copy()
    rgb[4, 2] = (0, 0, 254)
    Image.fromarray(rgb).save(label)
    before = listing(tmp_path)
    result = run_refseg("dataset", "check", str(root))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr
    assert f"{label}: 1 of 30 pixels are not a label colour" in lines[0]
    assert "first at row 4, col 2: (0, 0, 254)" in lines[0]
    assert listing(tmp_path) == before

    rgb[4, 2] = (0, 0, 255)
    Image.fromarray(rgb).save(label)
    result = run_refseg("dataset", "check", str(root))
    assert result.returncode == 0 and "2 image/label pairs, all valid" in result.stdout
