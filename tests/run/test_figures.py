"""The figures of training and prediction: the curves name their run, an overlay carries the
legend of the class colours, and the evaluation panel's column titles are shown whole."""
import numpy as np
import pytest
from PIL import Image, ImageDraw

from refseg.data.labels import LABEL_COLOURS
from refseg.run import curves, evaluation

pytestmark = pytest.mark.infrastructure

HISTORY = [{"epoch": e, "train_loss": 1.0 / e, "val_loss": 1.1 / e,
            "train_pixel_accuracy": 0.5 + e / 10, "val_pixel_accuracy": 0.45 + e / 10}
           for e in (1, 2, 3)]


def _title_band_text_width(image: np.ndarray, rows: slice) -> int:
    """How many columns of the band ``rows`` hold a dark (text) pixel."""
    return int((image[rows].min(axis=2) < 128).any(axis=0).sum())


def test_the_curves_name_their_run(tmp_path):
    """A band above the two panels holds the title; a longer run name takes more of it, and
    by default the name is that of the folder holding the file."""
    (tmp_path / "fusion-feature").mkdir()
    curves.write_curves(HISTORY, tmp_path / "fusion-feature" / "curves.png")
    curves.write_curves(HISTORY, tmp_path / "short.png", run="r")
    named = np.asarray(Image.open(tmp_path / "fusion-feature" / "curves.png"))
    short = np.asarray(Image.open(tmp_path / "short.png"))
    band = slice(0, curves.TITLE_HEIGHT)
    assert named.shape == (curves.PANEL_SIZE[1] + curves.TITLE_HEIGHT,
                           2 * curves.PANEL_SIZE[0], 3)
    assert _title_band_text_width(named, band) > _title_band_text_width(short, band) > 0


def test_the_overlay_carries_the_legend_of_the_class_colours():
    """overlay.png is the overlay, then a band with one swatch of each class colour."""
    rgb = np.full((40, 300, 3), 128, np.uint8)
    classes = np.zeros((40, 300), np.uint8)
    shown = evaluation.overlay_with_legend(rgb, classes)
    assert np.array_equal(shown[:40], evaluation.overlay(rgb, classes))
    band = shown[40:].reshape(-1, 3)
    for colour in LABEL_COLOURS:
        assert np.any(np.all(band == colour, axis=1)), colour


@pytest.mark.parametrize("width", [64, 96, 550])
def test_panel_titles_are_shown_whole(width):
    """Each column's title is drawn in lines that fit its column: the title row, laid out at
    the size chosen, holds every character of the name (no ellipsis), each line within the
    column's width."""
    rgb = np.zeros((20, width, 3), np.uint8)
    classes = np.zeros((20, width), np.uint8)
    titles = ["image", "label", "resnet50v2-feature", "mobilenetv2-feature"]
    panel = evaluation.comparison_panel([(rgb, classes)], [[classes], [classes]],
                                        titles=titles)
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    sizes = []
    for title in titles:
        size, lines = evaluation._fitted_title(measure, title, width)
        assert "".join(lines) == title
        assert all(measure.textlength(line, font=evaluation._font(size)) <= width - 4
                   for line in lines)
        sizes.append(size)
    assert panel.shape[1] == 4 * width + 3 * 4
    # the title row is above the first image row and holds text in every column
    first_row = next(r for r in range(panel.shape[0]) if np.array_equal(
        panel[r, :width], rgb[0]))
    for column in range(4):
        x = column * (width + 4)
        assert (panel[:first_row, x:x + width].min(axis=2) < 128).any(), titles[column]
