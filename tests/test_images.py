"""Reading input images: every mode Pillow reads, 16-bit, and bad files (spec R-input)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from refseg.errors import InputError
from refseg.images import read_image
from refseg.publish import write_json, write_npz, write_png


RNG = np.random.default_rng(7)
RGB = RNG.integers(0, 256, (9, 11, 3), dtype=np.uint8)


def save(tmp_path, image, name="img.png", **kwargs):
    path = tmp_path / name
    image.save(path, **kwargs)
    return path


@pytest.mark.claim("claim1.step1.acquire", "claim5.acquisition_module")
def test_rgb_png_is_read_as_stored(tmp_path):
    loaded = read_image(save(tmp_path, Image.fromarray(RGB)))
    assert np.array_equal(loaded.pixels, RGB) and loaded.mode == "RGB" and loaded.bit_depth == 8


@pytest.mark.claim("claim1.step1.acquire", "claim5.acquisition_module")
def test_rgba_drops_alpha(tmp_path):
    rgba = np.dstack([RGB, RNG.integers(0, 256, RGB.shape[:2], dtype=np.uint8)])
    loaded = read_image(save(tmp_path, Image.fromarray(rgba, "RGBA")))
    assert np.array_equal(loaded.pixels, RGB) and "alpha channel ignored" in loaded.notes


@pytest.mark.claim("claim1.step1.acquire", "claim5.acquisition_module")
def test_palette_is_expanded(tmp_path):
    image = Image.fromarray(RGB).convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    loaded = read_image(save(tmp_path, image))
    assert np.array_equal(loaded.pixels, np.asarray(image.convert("RGB")))


@pytest.mark.claim("claim1.step1.acquire", "claim5.acquisition_module")
def test_gray_and_bilevel(tmp_path):
    gray = RGB[..., 0]
    assert np.array_equal(read_image(save(tmp_path, Image.fromarray(gray))).pixels, gray)
    bits = Image.fromarray(gray > 128).convert("1")
    loaded = read_image(save(tmp_path, bits, "bits.png"))
    assert set(np.unique(loaded.pixels)) <= {0, 255} and loaded.bit_depth == 1


@pytest.mark.claim("claim1.step1.acquire", "claim5.acquisition_module")
def test_cmyk_jpeg_is_converted(tmp_path):
    loaded = read_image(save(tmp_path, Image.fromarray(RGB).convert("CMYK"), "c.jpg"))
    assert loaded.pixels.shape == RGB.shape and loaded.pixels.dtype == np.uint8


@pytest.mark.claim("claim1.step1.acquire", "claim5.acquisition_module")
@given(st.integers(0, 65535), st.integers(0, 65535))
def test_sixteen_bit_gray_is_scaled_by_257(tmp_path_factory, a, b):
    values = np.array([[a, b, a], [b, a, b], [a, a, b]], dtype=np.uint16)
    path = tmp_path_factory.mktemp("u16") / "g16.png"
    Image.fromarray(values).save(path)
    loaded = read_image(path)
    assert loaded.bit_depth == 16 and loaded.pixels.dtype == np.float64
    assert np.array_equal(loaded.pixels, values / 257.0)


@pytest.mark.claim("claim1.step1.acquire", "claim5.acquisition_module")
def test_sixteen_bit_rgb_png_depth_is_recorded(tmp_path):
    """Pillow reduces 48-bit PNGs to 8 bits; the file's depth and the reduction are reported."""
    import zlib, struct  # a minimal 16-bit RGB PNG, written by hand (Pillow cannot write one)
    rows, cols = 3, 4
    raw = b"".join(b"\x00" + bytes(range(cols * 6)) for _ in range(rows))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + \
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", cols, rows, 16, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    path = tmp_path / "rgb48.png"
    path.write_bytes(png)
    loaded = read_image(path)
    assert loaded.bit_depth == 16 and loaded.pixels.shape == (rows, cols, 3)
    assert any("16-bit colour PNG" in n for n in loaded.notes)


@pytest.mark.parametrize("case, message", [
    ("missing", "no such file"), ("folder", "is a folder"), ("empty", "empty file"),
    ("text", "not an image"), ("truncated", "truncated or corrupt"), ("tiny", "1x1 pixels"),
    ("float", "floating-point"),
])
@pytest.mark.claim("claim1.step1.acquire", "claim5.acquisition_module")
def test_bad_files_raise_one_line_naming_the_file(tmp_path, case, message):
    path = tmp_path / f"{case}.png"
    if case == "folder":
        path.mkdir()
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "text":
        path.write_text("not an image at all")
    elif case == "truncated":
        Image.fromarray(RNG.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path)
        path.write_bytes(path.read_bytes()[:300])
    elif case == "tiny":
        Image.fromarray(RGB[:1, :1]).save(path)
    elif case == "float":
        path = tmp_path / "f.tif"
        Image.fromarray(np.ones((4, 4), np.float32)).save(path)
    with pytest.raises(InputError) as info:
        read_image(path)
    text = str(info.value)
    assert message in text and str(path) in text and "\n" not in text


@pytest.mark.infrastructure
def test_writes_are_atomic_and_leave_no_temporary_files(tmp_path):
    write_png(tmp_path / "a.png", RGB)
    write_npz(tmp_path / "a.npz", x=np.arange(3))
    write_json(tmp_path / "a.json", {"b": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.npz", "a.png"]
    assert np.array_equal(np.load(tmp_path / "a.npz", allow_pickle=False)["x"], np.arange(3))

    class Boom(Exception):
        pass

    def explode(f):
        f.write(b"partial")
        raise Boom

    from refseg.publish import _atomic_write
    with pytest.raises(Boom):
        _atomic_write(tmp_path / "b.bin", explode)
    assert not (tmp_path / "b.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.npz", "a.png"]


@pytest.mark.infrastructure
@given(rgb=st.integers(3, 40).flatmap(lambda r: st.integers(3, 40).map(lambda c: (r, c)))
       .flatmap(lambda shape: st.just(np.random.default_rng(shape[0] * 41 + shape[1])
                                      .integers(0, 256, (*shape, 3), dtype=np.uint8))))
def test_png_round_trip_is_exact(tmp_path_factory, rgb):
    """write_png then read_image returns the same pixels, for any size >= 3x3."""
    path = tmp_path_factory.mktemp("rt") / "x.png"
    write_png(path, rgb)
    loaded = read_image(path)
    assert np.array_equal(loaded.pixels, rgb) and loaded.info()["rows"] == rgb.shape[0]


@pytest.mark.claim("claim1.step1.acquire", "claim5.acquisition_module")
def test_zero_size_png_is_refused(tmp_path):
    """A PNG whose header says 0 x 0 pixels (Pillow cannot write one; built by hand)."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + \
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 0, 0, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))
    path = tmp_path / "zero.png"
    path.write_bytes(png)
    with pytest.raises(InputError) as info:
        read_image(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.infrastructure
def test_npz_members_are_checked_from_their_headers_against_a_limit(tmp_path):
    """A consistent archive whose arrays together declare more than the limit is refused
    before loading (the CLI's limit is 2 GiB; a small one here keeps the file small), and so
    is one whose header declares more than its member holds."""
    import zipfile

    from refseg.images import check_npz_members

    np.savez_compressed(tmp_path / "a.npz", x=np.zeros(3000, np.float32),
                        y=np.zeros(3000, np.float32))
    check_npz_members(tmp_path / "a.npz", max_bytes=24_000)
    with pytest.raises(InputError) as info:
        check_npz_members(tmp_path / "a.npz", max_bytes=23_999)
    assert str(info.value) == (f"{tmp_path / 'a.npz'}: its arrays declare more than 23,999 "
                               "bytes (at 'y.npy'); refused before loading")
    with zipfile.ZipFile(tmp_path / "a.npz") as archive:
        member = archive.read("x.npy")
    with zipfile.ZipFile(tmp_path / "cut.npz", "w") as archive:
        archive.writestr("x.npy", member[:-4])
    with pytest.raises(InputError, match=r"declares \(3000,\) float32 \(12,000 bytes\) but "
                                         r"holds 11,996: truncated or forged"):
        check_npz_members(tmp_path / "cut.npz")
