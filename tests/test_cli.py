"""The command line: outputs of `refseg edges`, bad input, `demo`, `trace`, `explain`."""
import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from refseg.claim1 import features
from refseg.cli import main
from refseg.claim1.operators import OPERATORS
from refseg.data.synthetic import weld_image
from refseg.publish import OUTPUT_MARKER
from checkout import run_refseg

NPZ_KEYS = {"gray", "blurred", "canny", "sobel", "prewitt", "log", "mean_image", "final_weight",
            "feature_map", "weights", "cv"}


@pytest.fixture
def weld_png(tmp_path):
    path = tmp_path / "weld.png"
    Image.fromarray(weld_image(3).rgb).save(path)
    return path


@pytest.mark.claim("claim5.feature_module", "claim1.step2.extract")
def test_edges_writes_every_output(tmp_path, weld_png, capsys):
    out = tmp_path / "out"
    assert main(["edges", str(weld_png), "--out", str(out)]) == 0
    folder = out / "weld"
    names = {p.name for p in folder.iterdir()}
    assert names == {"canny.png", "sobel.png", "prewitt.png", "log.png", "mean_image.png",
                     "feature_map.png", "panel.png", "features.npz", "report.json"}
    expected = features.extract(weld_image(3).rgb)
    with np.load(folder / "features.npz", allow_pickle=False) as npz:
        assert NPZ_KEYS <= set(npz.files)
        assert np.array_equal(npz["feature_map"], expected.feature_map)
        assert np.array_equal(npz["weights"], expected.vector("weights"))
        for k in OPERATORS:
            assert np.array_equal(npz[k], expected.edges[k])
    assert np.array_equal(np.asarray(Image.open(folder / "feature_map.png")),
                          expected.feature_map * 255)
    report = json.loads((folder / "report.json").read_text())
    assert report["weights"] == expected.weights and report["claims"]["cv"] == "claim1.step2.cv"
    assert report["params"]["sigma"] == 0.8 and report["source"]["rows"] == 156
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [OUTPUT_MARKER]
    from refseg.publish import default_mode  # readable like any new file, not 0600 temporaries
    assert (folder / "panel.png").stat().st_mode & 0o777 == default_mode()
    assert folder.stat().st_mode & 0o777 == default_mode(folder=True)


@pytest.mark.infrastructure
def test_writing_every_array_needs_a_full_extraction(tmp_path):
    from refseg.claim1.outputs import write_outputs
    from refseg.images import LoadedImage

    rgb = weld_image(3).rgb
    maps_only = features.extract(rgb, keep="maps")
    with pytest.raises(ValueError, match='needs a result extracted with keep="all"'):
        write_outputs(tmp_path, LoadedImage(rgb, "weld.png", "RGB", 8), maps_only, "all")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.infrastructure
@given(st.integers(1, 60), st.integers(1, 60), st.integers(1, 59), st.integers(0, 2 ** 32 - 1))
@settings(max_examples=30)
def test_the_panel_shrinks_a_photograph_channel_by_channel_as_pillow_shrinks_it_whole(
        rows, cols, narrower, seed):
    from refseg.claim1.panel import _shrunk_colour

    rgb = np.random.default_rng(seed).integers(0, 256, (rows, cols, 3), dtype=np.uint8)
    width = max(1, cols - narrower)
    height = max(1, round(rows * width / cols))
    whole = Image.fromarray(rgb).resize((width, height), Image.Resampling.BOX).convert("RGB")
    assert np.array_equal(np.asarray(_shrunk_colour(rgb, width)), np.asarray(whole))


@pytest.mark.claim("claim5.feature_module", "claim1.step2.extract")
def test_edges_with_maps_only_writes_the_same_maps_and_report(tmp_path, weld_png):
    """``--arrays maps`` (extraction without the float planes) writes the same PNG files byte
    for byte, the same report, and an archive of exactly the maps and vectors, each equal to
    its member in the ``--arrays all`` archive."""
    second = tmp_path / "weld2.png"
    Image.fromarray(weld_image(4).rgb).save(second)
    folders = {}
    for arrays in ("all", "maps"):
        out = tmp_path / arrays
        assert main(["edges", str(weld_png), str(second), "--out", str(out),
                     "--arrays", arrays]) == 0
        folders[arrays] = out
    for stem in ("weld", "weld2"):
        full, maps = folders["all"] / stem, folders["maps"] / stem
        assert {p.name for p in full.iterdir()} == {p.name for p in maps.iterdir()}
        for png in full.glob("*.png"):
            assert png.read_bytes() == (maps / png.name).read_bytes(), png.name
        assert (json.loads((full / "report.json").read_text())
                == json.loads((maps / "report.json").read_text()))
        with np.load(full / "features.npz") as a, np.load(maps / "features.npz") as m:
            assert set(m.files) == {*OPERATORS, "feature_map", "weights", "cv", "std", "mean"}
            assert set(m.files) < set(a.files)
            for key in m.files:
                assert m[key].dtype == a[key].dtype and np.array_equal(m[key], a[key]), key




@pytest.mark.claim("claim5.feature_module", "claim5.acquisition_module")
@pytest.mark.parametrize("bad", ["missing.png", "notes.txt", "truncated.png", "tiny.png"])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, weld_png, bad):
    path = tmp_path / bad
    if bad == "notes.txt":
        path.write_text("hello")
    elif bad == "truncated.png":
        path.write_bytes(weld_png.read_bytes()[:500])
    elif bad == "tiny.png":
        Image.fromarray(np.zeros((1, 1, 3), np.uint8)).save(path)
    out = tmp_path / "out"
    result = run_refseg("edges", str(weld_png), str(path), "--out", str(out))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("refseg: error: ") and str(path) in lines[0]
    assert "Traceback" not in result.stderr and not out.exists()


@pytest.mark.claim("claim5.feature_module")
def test_colliding_names_are_refused(tmp_path, weld_png):
    other = tmp_path / "b"
    other.mkdir()
    (other / "weld.png").write_bytes(weld_png.read_bytes())
    result = run_refseg("edges", str(weld_png), str(other / "weld.png"), "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "same name stem" in result.stderr


@pytest.mark.claim("claim5.feature_module")
def test_a_failure_while_writing_leaves_no_output(tmp_path, weld_png, monkeypatch):
    from refseg.claim1 import outputs

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(outputs, "write_npz", fail)
    out = tmp_path / "out"
    assert main(["edges", str(weld_png), "--out", str(out)]) == 2
    assert not out.exists()


@pytest.mark.claim("claim1.step1.acquire", "claim1.step3.train", "claim1.step4.predict",
                   "claim5.output_module")
def test_demo_writes_a_report(tiny_demo):
    """The main job end to end at a tiny size: data, claim 1, four training runs, evaluation;
    its log names the folders where the outputs end up, in whole lines."""
    out, log = tiny_demo
    index = (out / "index.md").read_text()
    for text in ("| fusion-feature |", "| fusion-gray |", "| resnet50v2-feature |",
                 "| mobilenetv2-feature |", "97.41%", "claim1.step3.train"):
        assert text in index, text
    for name in ("index.html", "demo.json", "curves.png", "predictions.png", "scores.json",
                 "claim1/weld_00000/panel.png", "runs/fusion-feature/checkpoint.npz",
                 "data/images/weld_00005.png"):
        assert (out / name).is_file(), name
    assert not list(out.glob(".refseg-staging-*")) and not list(out.parent.glob(".refseg-*"))
    assert ".refseg-staging" not in log and "\r" not in log
    assert "done in " in log and str(out / "runs" / "fusion-gray") in log
    assert log.rstrip().splitlines()[-1].startswith("demo done in ") and \
        str(out / "index.html") in log.rstrip().splitlines()[-1]
    report = json.loads((out / "claim1" / "weld_00000" / "report.json").read_text())
    assert report["source"]["path"] == str(out / "data" / "images" / "weld_00000.png")


@pytest.mark.claim("claim1.step4.predict", "claim5.output_module")
def test_the_demo_keeps_the_runs_worth_predicting_with(tiny_demo, tmp_path):
    """The patent's network and the best run keep their weights and predict; every other run
    says, in one line, that its weights were removed and how to keep them."""
    out, _ = tiny_demo
    scores = json.loads((out / "scores.json").read_text())
    best = max(scores, key=lambda r: r["pixel_accuracy"])["run"]
    record = {r["name"]: r for r in json.loads((out / "demo.json").read_text())["runs"]}
    image = out / "test" / "images" / "test_weld_00000.png"
    for row in scores:
        run = out / "runs" / row["run"]
        kept = row["run"] in ("fusion-feature", best)
        assert record[row["run"]]["kept"] is kept
        assert (run / "checkpoint.npz").is_file() is kept, row["run"]
        assert (run / "pruned.json").is_file() is not kept, row["run"]
        assert record[row["run"]]["weight_bytes"] > 10_000_000
        result = run_refseg("predict", run, image, "--out", tmp_path / row["run"])
        if kept:
            assert result.returncode == 0, result.stderr
            assert (tmp_path / row["run"] / "test_weld_00000" / "label.png").is_file()
        else:
            assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
            assert "removed by refseg demo" in result.stderr
            assert "--keep-checkpoints" in result.stderr and " MB" in result.stderr


@pytest.mark.infrastructure
def test_keep_checkpoints_keeps_every_run(tmp_path):
    """With keep_checkpoints no run loses its weights; without it, the runs other than the
    first and the best do, each leaving a record of what was removed."""
    from types import SimpleNamespace

    from refseg.run import demo
    from refseg.run.config import DemoSettings

    scores = [0.5, 0.7, 0.6, 0.4]
    for keep, expected in ((True, [True] * 4), (False, [True, True, False, False])):
        runs = []
        for i in range(4):
            run = tmp_path / str(keep) / f"run{i}"
            run.mkdir(parents=True)
            (run / "checkpoint.npz").write_bytes(b"x" * 1000)
            (run / "backbones.npz").write_bytes(b"y" * 500)
            runs.append(run)
        rows = [SimpleNamespace(name=f"run{i}", scores=SimpleNamespace(pixel_accuracy=a))
                for i, a in enumerate(scores)]
        settings = DemoSettings(count=6, test_count=2, keep_checkpoints=keep)
        kept = demo._prune(settings, rows, runs, tmp_path / "demo-out")
        assert [kept[f"run{i}"]["kept"] for i in range(4)] == expected
        assert all(kept[f"run{i}"]["weight_bytes"] == 1500 for i in range(4))
        for run, keep_run in zip(runs, expected):
            assert (run / "checkpoint.npz").is_file() is keep_run
            if not keep_run:
                record = json.loads((run / "pruned.json").read_text())
                assert record["bytes"] == 1500 and record["keep_with"].endswith(
                    "--keep-checkpoints") and "--out " + str(tmp_path / "demo-out") in \
                    record["keep_with"]


@pytest.mark.infrastructure
def test_help_shows_defaults_and_required_options(capsys):
    """Every option's help names its default; options that must be given say so."""
    for verb, expected in (("synth", ["--count COUNT", "(required)", "(default: 0)",
                                      "(default: 156x550)"]),
                           ("demo", ["(default: 160)", "(default: demo-out)", "(default: 8)",
                                     "--keep-checkpoints"]),
                           ("train", ["(default: 10)", "(default: 8)", "(required)",
                                      "(default: feature)"]),
                           ("report", ["folder"])):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for piece in expected:
            assert piece in text, (verb, piece)
        if verb == "synth":
            assert text.count("(required)") == 2
    with pytest.raises(SystemExit) as stop:
        main(["synth", "--out", "x"])
    assert stop.value.code == 2 and "--count" in capsys.readouterr().err


@pytest.mark.infrastructure
def test_every_option_with_a_default_names_it_in_help():
    """Every option of every verb whose default is a value (0 included: ``demo --seed``)
    names it in ``--help``, in its own words or as "(default: VALUE)"; options without one
    (None, a flag's False, a repeatable option's empty list) name none."""
    import argparse

    from refseg.cli import _parser

    def options(parser, path=()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from options(sub, path + (name,))
            elif action.option_strings and not isinstance(
                    action, (argparse._HelpAction, argparse._VersionAction)):
                yield " ".join(path), parser, action

    checked = 0
    for verb, parser, action in options(_parser()):
        text = " ".join(parser.format_help().split())
        own = " ".join((action.help or "").split())
        if action.default is None or action.default is False or action.default in ([], ()):
            assert f"{own} (default:" not in text, (verb, action.option_strings)
            continue
        checked += 1
        assert "default" in own or f"{own} (default: {action.default})" in text, (
            verb, action.option_strings)
    assert checked > 15
    demo = " ".join(_parser()._subparsers._group_actions[0].choices["demo"].format_help()
                    .split())
    assert "seed of the first weld (default: 0)" in demo


@pytest.mark.claim("claim1.step3.train", "claim5.output_module")
def test_demo_can_train_the_backbones(tmp_path, monkeypatch):
    """`--train-backbone` reaches the training runs and the report says the backbones learned."""
    from refseg.run import demo
    from refseg.run.config import RUNS, DemoSettings

    out = tmp_path / "demo"
    mobile = [run for run in RUNS if run[0] == "mobilenetv2-feature"]  # 1/6 of fusion's bytes
    from refseg.report.chart import write_demo_pages

    demo.run_demo(out, DemoSettings(count=6, test_count=2, epochs=1, input_hw=(32, 96),
                                    jobs=1, runs=tuple(mobile), train_backbone=True),
                  log=io.StringIO(), pages=write_demo_pages)
    config = json.loads((out / "runs" / "mobilenetv2-feature" / "config.json").read_text())
    assert config["train_backbone"] is True
    index = (out / "index.md").read_text()
    assert "`--train-backbone`, an extension" in index and "frozen backbones are random" not in index

    seen = []
    monkeypatch.setattr(demo, "run_demo",
                        lambda out, settings, pages: seen.append(settings) or out)
    assert main(["demo", "--out", str(tmp_path / "x"), "--train-backbone"]) == 0
    assert main(["demo", "--out", str(tmp_path / "y"), "--keep-checkpoints"]) == 0
    assert [s.train_backbone for s in seen] == [True, False]
    assert [s.keep_checkpoints for s in seen] == [False, True]


@pytest.mark.claim("claim1.step2.cv")
def test_trace_and_explain(capsys):
    from refseg.registry import spec_dir

    assert main(["trace"]) == 0
    assert "claim1.step2.cv" in capsys.readouterr().out
    assert main(["explain", "claim1.step2.cv"]) == 0
    text = capsys.readouterr().out
    assert "R-cv" in text and "refseg.claim1.weighting.coefficients_of_variation" in text
    # the spec's Markdown links shown as the file they point at, never raw
    assert "](" not in text
    assert f"{spec_dir() / 'sensitivity.md'}#r-cv" in text
    assert main(["explain", "claim9.nothing"]) == 2


@pytest.mark.claim("claim5.feature_module")
@settings(max_examples=15)
@given(rows=st.integers(3, 60), cols=st.integers(3, 900), gray=st.booleans())
def test_panel_shape_depends_only_on_the_input_shape(rows, cols, gray):
    """The panel is 2 x 3 tiles whose width is the input width clamped to 360-720 pixels."""
    from refseg.claim1.panel import PANEL_TILE_WIDTH, panel

    rng = np.random.default_rng(rows * 1000 + cols)
    img = rng.integers(0, 256, (rows, cols) if gray else (rows, cols, 3), dtype=np.uint8)
    figure = panel(img, features.extract(img))
    width = min(max(cols, PANEL_TILE_WIDTH[0]), PANEL_TILE_WIDTH[1])
    assert figure.dtype == np.uint8 and figure.shape[2] == 3
    assert figure.shape[1] == 3 * width + 4 * 6


@pytest.mark.infrastructure
def test_sigterm_unwinds_like_ctrl_c_and_leaves_no_staging(tmp_path):
    """SIGTERM during `refseg synth` ends with exit 143 and one line; the staged images are
    removed and nothing is published (before, a killed run left .refseg-staging-* behind)."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "set"
    proc = subprocess.Popen([sys.executable, "-P", "-m", "refseg", "synth", "--count", "3000",
                             "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    staged = "set/.refseg-staging-*/images/*.png"  # staged inside the target
    while time.monotonic() < deadline and not list(tmp_path.glob(staged)):
        time.sleep(0.05)
    assert list(tmp_path.glob(staged)), "synth never started writing"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.strip() == "refseg: terminated"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.claim("claim5.feature_module")
def test_edges_replaces_its_own_outputs_but_never_a_folder_of_the_users(tmp_path, weld_png,
                                                                         capsys):
    out = tmp_path / "out"
    assert main(["edges", str(weld_png), "--out", str(out)]) == 0
    assert main(["edges", str(weld_png), "--out", str(out), "--sigma", "1.0"]) == 0
    assert json.loads((out / "weld" / "report.json").read_text())["params"]["sigma"] == 1.0
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "weld"]
    (out / "weld" / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["edges", str(weld_png), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds files refseg edges did not write (notes.txt)" in err and err.count("\n") == 1
    assert (out / "weld" / "notes.txt").read_text() == "mine"


@pytest.mark.infrastructure
def test_python_m_refseg_in_a_source_tree_without_kernels_says_so_in_one_line(tmp_path):
    """``python -m refseg`` run beside a source tree's ``refseg/`` (which shadows the
    installed package and has no compiled kernels): one line telling to install, exit 2, no
    traceback, nothing written."""
    import shutil
    import subprocess
    import sys

    from checkout import ROOT

    shutil.copytree(ROOT / "refseg", tmp_path / "refseg",
                    ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    image = tmp_path / "weld.png"
    Image.fromarray(weld_image(seed=0).rgb).save(image)
    result = subprocess.run([sys.executable, "-m", "refseg", "edges", str(image), "--out",
                             str(tmp_path / "out")], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("refseg: error: "), result.stderr
    assert "python -m pip install ." in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
