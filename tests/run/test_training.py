"""Training, resuming, predicting and evaluating on a tiny synthetic data set (claim 1 steps
2-4, claim 4, claim 5's training and output modules)."""
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refseg import publish
from refseg.images import read_image
from refseg.data import synthetic
from refseg.cli import main
from refseg.data.dataset import write_label
from refseg.errors import InputError
from refseg.data.inputs import network_input, resize_labels
from refseg.run.config import TrainConfig
from refseg.run.training import load_run, train

#: The runs of these tests train the MobileNetV2 branch alone: what they test (resuming, stopping,
#: learning-rate steps, weight files, what a run folder keeps) does not depend on the branches,
#: and a checkpoint with Adam's state takes a quarter of the fusion network's (70 against 275
#: MB). The fusion network trains in the demo's tests and in tests/run/test_evidence.py.
SMALL = dict(epochs=2, batch_size=4, input_hw=(32, 96), calibration_images=8,
             branches=("mobilenetv2",))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("welds")
    (root / "images").mkdir()
    (root / "labels").mkdir()
    for i in range(10):
        sample = synthetic.weld_image(100 + i, shape=(48, 160))
        publish.write_png(root / "images" / f"weld_{i:02d}.png", sample.rgb)
        write_label(root / "labels" / f"weld_{i:02d}.png", sample.classes)
    return root


def quiet_train(*args, **kwargs):
    return train(*args, log=io.StringIO(), jobs=1, **kwargs)


def stored_arrays(run):
    """The arrays of a run's checkpoint as stored."""
    with np.load(run / "checkpoint.npz", allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files if k != "history"}


def checkpoint_arrays(run):
    """The arrays of a run's checkpoint, the trained ones as values: a last epoch's, stored
    against the starting weights, rebuilt on them."""
    from refseg.run.records import read_run_config
    from refseg.run.storage import AGAINST_START_KEY, unpack_against_start

    arrays = stored_arrays(run)
    if AGAINST_START_KEY in arrays:
        start = starting_weights(run, read_run_config(run / "config.json"))
        planes = {k[len("model/"):]: arrays.pop(k) for k in list(arrays)
                  if k.startswith("model/")}
        trained = unpack_against_start(planes, arrays.pop(AGAINST_START_KEY), start, run)
        arrays.update({f"model/{k}": v for k, v in trained.items()})
    return arrays


def starting_weights(run, config):
    """Every starting weight of a run, regenerated from its backbones.npz."""
    from refseg.models import ResMobileNet
    from refseg.run.storage import load_starting_weights

    model = ResMobileNet(config.input_hw, branches=config.branches, seed=config.seed)
    load_starting_weights(model, run / "backbones.npz", config.seed)
    return {k: v.copy() for k, v in model.weights().items()}


@pytest.fixture(scope="module")
def straight(tmp_path_factory, data):
    """A 2-epoch run of 2 batches per epoch, the uninterrupted run the resumed ones must equal;
    its folder, history, log (a file, not a terminal) and the epochs whose checkpoint it wrote.
    Never resumed, it writes only its last epoch's checkpoint: Adam's state, twice the
    decoder's size, is not written for nothing."""
    from unittest import mock

    from refseg.run import training

    run = tmp_path_factory.mktemp("runs") / "straight"
    log = io.StringIO()
    written = []

    def write_npz(path, compressed=False, **arrays):
        if Path(path).name == "checkpoint.npz":
            written.append(int(arrays["epoch"]))
        return real_write_npz(path, compressed=compressed, **arrays)

    real_write_npz = training.write_npz
    with mock.patch.object(training, "write_npz", write_npz):
        history = train(data, run, TrainConfig(**SMALL), log=log, jobs=1,
                        checkpoint_every_epoch=False)
    return run, history, log.getvalue(), written


@pytest.fixture(scope="module")
def stopped(tmp_path_factory, data):
    """The run of ``straight`` stopped after epoch 1 (as a kill after its checkpoint), shared
    by the tests that resume it: each resumes its own :func:`linked_copy`."""
    run = tmp_path_factory.mktemp("runs") / "stopped"
    quiet_train(data, run, TrainConfig(**SMALL), stop_after_epoch=1)
    return run


def linked_copy(run, target):
    """A copy of the run folder ``run`` whose files are hard links to its files: training
    writes every file of a run anew (atomically, under a temporary name), never through a
    link, and reads the tap cache only."""
    shutil.copytree(run, target, copy_function=os.link)
    return target


@pytest.mark.claim("claim1.step3.train", "claim5.training_module", "claim4.update")
def test_a_smoke_run_writes_everything(straight):
    run, history, _, checkpoints = straight
    assert [h["epoch"] for h in history] == [1, 2]
    assert checkpoints == [2]  # checkpoint_every_epoch=False: the last epoch's only
    for entry in history:
        assert np.isfinite(entry["train_loss"]) and 0 <= entry["val_pixel_accuracy"] <= 1
        assert len(entry["val_iou"]) == 3
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]
    for name in ("config.json", "backbones.npz", "checkpoint.npz", "curves.png"):
        assert (run / name).is_file(), name
    assert not list(run.glob(".*.tmp"))
    model, config = load_run(run)
    assert config.input_hw == (32, 96) and model.input_shape == (32, 96)


@pytest.mark.infrastructure
def test_progress_in_a_log_file_is_whole_lines_with_the_time_left(straight):
    """Not a terminal: no carriage return rewrites a line; the first batch of each epoch gets
    its own line with the time left, and each epoch ends with its line of scores."""
    import re

    log = straight[2]
    assert "\r" not in log
    progress = [line for line in log.splitlines() if " batch " in line]
    assert [line.split(" loss")[0] for line in progress] == ["epoch 1/2 batch 1/2",
                                                               "epoch 2/2 batch 1/2"]
    assert all(re.fullmatch(r"epoch \d/2 batch 1/2 loss \d\.\d{4} [\d.]+ img/s ETA \d+s",
                            line) for line in progress), progress
    assert [line.split(":")[0] for line in log.splitlines()
            if line.startswith("epoch") and " batch " not in line] == ["epoch 1/2", "epoch 2/2"]


@pytest.mark.claim("claim1.step3.train", "claim5.training_module")
def test_resume_after_a_kill_gives_the_uninterrupted_weights(tmp_path, data, straight,
                                                            stopped):
    """Stopped after epoch 1 (as a kill after the checkpoint), resumed: the same weights and
    Adam state, bit for bit, as the uninterrupted run; a fresh run with the same seed too."""
    run = linked_copy(stopped, tmp_path / "resumed")
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["epoch"] == 1
    history = quiet_train(data, run, TrainConfig(**SMALL), resume=True)
    assert [h["epoch"] for h in history] == [1, 2]
    expected = checkpoint_arrays(straight[0])
    resumed = checkpoint_arrays(run)
    assert resumed.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)
    for a, b in zip(history, straight[1]):
        assert {k: v for k, v in a.items() if k != "seconds"} == {
            k: v for k, v in b.items() if k != "seconds"}


@pytest.mark.claim("claim1.step3.train", "claim5.training_module", "claim4.propagation",
                   "claim4.update")
def test_training_beside_a_busy_neighbour_sizes_its_steps_and_keeps_its_bits(
        tmp_path, data, straight, loaded_machine):
    """Other processes seem to keep a core busy: the steps, taps and validation of training run
    on 1 thread and on 2 (each kind timed on both, sized_to_load), and the run ends bit for
    bit where the same run did beside no one, its products cut for 2 threads throughout."""
    from refseg.engine.training import threads

    before = threads.SIZINGS.copy()
    quiet_train(data, tmp_path / "loaded", TrainConfig(**SMALL), checkpoint_every_epoch=False)
    sized = threads.SIZINGS - before
    assert set(sized) == {(2, 1), (2, 2)} and sized[2, 1] >= threads.TIMED_RUNS, sized
    expected = checkpoint_arrays(straight[0])
    for key, value in checkpoint_arrays(tmp_path / "loaded").items():
        np.testing.assert_array_equal(value, expected[key], err_msg=key)


@pytest.mark.claim("claim1.step3.train", "claim5.training_module", "claim4.update")
def test_training_the_backbones_moves_them_resumes_exactly_and_reloads(tmp_path, data):
    """--train-backbone (R-frozen): backbone kernels and moving statistics change; a run stopped after
    epoch 1 and resumed ends bit for bit where the uninterrupted one does; the reloaded run
    reproduces the last validation metrics, so the checkpoint holds every trained array, and
    its moving statistics are those of the final weights."""
    from refseg.data.inputs import prepare
    from refseg.data.dataset import load_dataset
    from refseg.engine.training import training_engine
    from refseg.run.training import _evaluate, _pairs, _split

    config = TrainConfig(**SMALL, train_backbone=True)
    whole = quiet_train(data, tmp_path / "whole", config, checkpoint_every_epoch=False)
    quiet_train(data, tmp_path / "resumed", config, stop_after_epoch=1)
    resumed = quiet_train(data, tmp_path / "resumed", config, resume=True)
    expected = checkpoint_arrays(tmp_path / "whole")
    got = checkpoint_arrays(tmp_path / "resumed")
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in resumed] == [
        {k: v for k, v in h.items() if k != "seconds"} for h in whole]

    start = starting_weights(tmp_path / "whole", config)
    for key in ("Conv1/kernel", "bn_Conv1/moving_variance", "block_16_project/kernel",
                "block_3_depthwise_BN/moving_mean"):
        assert not np.array_equal(expected[f"model/{key}"], start[key]), key

    model, _ = load_run(tmp_path / "whole")
    training, validation = _split(load_dataset(data), config)
    x_val, y_val = prepare(_pairs(validation), config.input_hw, config.input_kind, 1)
    # on training's engine, as the run computed them (the reference route rounds otherwise)
    with training_engine():
        again = _evaluate(model, x_val, y_val)
        # the checkpoint's moving statistics are those of the final weights on the calibration
        # images (recomputed at the end of each epoch): recomputing them changes nothing
        x_train, _ = prepare(_pairs(training), config.input_hw, config.input_kind, 1)
        before = {k: v.copy() for k, v in model.weights().items() if "moving" in k}
        model.calibrate_batch_norm(x_train[:config.calibration_images])
    for key, value in before.items():
        np.testing.assert_array_equal(model.weights()[key], value, err_msg=key)
    assert again["pixel_accuracy"] == whole[-1]["val_pixel_accuracy"]
    assert again["loss"] == pytest.approx(whole[-1]["val_loss"], rel=1e-12)


@pytest.mark.claim("claim1.step3.train", "claim5.training_module", "claim4.update")
def test_learning_rate_steps_apply_from_their_epoch_and_may_be_added_on_resume(tmp_path, data,
                                                                              straight,
                                                                              stopped):
    """A step 2:1e-4 trains epoch 1 at 0.001 and epoch 2 at 1e-4 (recorded per epoch); a run
    stopped after epoch 1 without the step and resumed with it ends bit for bit where the run
    planned with it does; a step for an epoch already trained is refused."""
    stepped = TrainConfig(**SMALL, learning_rate_steps=((2, 1e-4),))
    whole = quiet_train(data, tmp_path / "whole", stepped, checkpoint_every_epoch=False)
    assert [h["learning_rate"] for h in whole] == [1e-3, 1e-4]
    assert [h["learning_rate"] for h in straight[1]] == [1e-3, 1e-3]
    assert whole[0] | {"seconds": 0} == straight[1][0] | {"seconds": 0}
    linked_copy(stopped, tmp_path / "added")
    # Adam's state kept, so that the finished run can be resumed below
    resumed = quiet_train(data, tmp_path / "added", stepped, resume=True,
                          keep_optimizer_state=True)
    expected = checkpoint_arrays(tmp_path / "whole")
    got = {k: v for k, v in checkpoint_arrays(tmp_path / "added").items()
           if not k.startswith("optimizer/")}
    plain = checkpoint_arrays(straight[0])
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    moved = [k for k in expected if k.startswith("model/")
             and not np.array_equal(expected[k], plain[k])]
    assert moved, "the step changed no weight"
    assert [h | {"seconds": 0} for h in resumed] == [h | {"seconds": 0} for h in whole]
    saved = json.loads((tmp_path / "added" / "config.json").read_text())
    assert saved["learning_rate_steps"] == [[2, 1e-4]]

    late = TrainConfig(**{**SMALL, "epochs": 3}, learning_rate_steps=((2, 1e-5),))
    with pytest.raises(InputError, match="change epoch 2, already trained"):
        quiet_train(data, tmp_path / "added", late, resume=True)
    for steps in (((1, 1e-4),), ((2, 0.0),), ((2, 1e-4), (2, 1e-5))):
        with pytest.raises(InputError, match="step"):
            TrainConfig(learning_rate_steps=steps).check()
    from refseg.cli import _parser

    args = _parser().parse_args(["train", "d", "--out", "r", "--learning-rate-step", "3:1e-4",
                                 "--learning-rate-step", "5:1e-5"])
    assert args.learning_rate_step == [(3, 1e-4), (5, 1e-5)]
    with pytest.raises(SystemExit):
        _parser().parse_args(["train", "d", "--out", "r", "--learning-rate-step", "3"])


@pytest.mark.claim("claim1.step3.train", "claim5.training_module")
def test_a_run_can_start_from_another_runs_checkpoint_at_another_input_size(tmp_path, data,
                                                                            straight):
    """--init-from: a 64x128 run started from the 32x96 run's last checkpoint holds the source's
    weights and statistics as its starting point (backbones.npz), and after one epoch at a
    learning rate of 1e-12 its decoder has not moved from them; it resumes exactly; a source
    with other branches, a missing source, or --weights beside it are refused."""
    config = TrainConfig(**{**SMALL, "epochs": 2, "input_hw": (64, 128)},
                         learning_rate=1e-12, init_from=str(straight[0]))
    run = tmp_path / "bigger"
    quiet_train(data, run, config, stop_after_epoch=1)
    source = load_run(straight[0])[0].weights()
    start = starting_weights(run, config)
    assert start.keys() == source.keys()
    for key, value in start.items():
        np.testing.assert_array_equal(value, source[key], err_msg=key)
    after = checkpoint_arrays(run)  # after epoch 1 of 2: the arrays themselves
    decoder = [k[len("model/"):] for k in after if k.startswith("model/")]
    assert decoder and all(k in source for k in decoder)
    for key in decoder:
        np.testing.assert_allclose(after[f"model/{key}"], source[key], rtol=0, atol=1e-9,
                                   err_msg=key)
    history = quiet_train(data, run, config, resume=True)
    assert [h["epoch"] for h in history] == [1, 2]
    whole = tmp_path / "whole"
    quiet_train(data, whole, config, checkpoint_every_epoch=False)
    resumed = checkpoint_arrays(run)
    for key, value in checkpoint_arrays(whole).items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)

    with pytest.raises(InputError, match="branches"):
        quiet_train(data, tmp_path / "two", TrainConfig(**{
            **SMALL, "branches": ("resnet50v2", "mobilenetv2")}, init_from=str(straight[0])))
    with pytest.raises(InputError, match="checkpointed refseg run"):
        quiet_train(data, tmp_path / "none", TrainConfig(**SMALL, init_from=str(tmp_path)))
    with pytest.raises(InputError, match="exclude each other"):
        TrainConfig(init_from="a", weights="b.npz").check()


@pytest.mark.claim("claim1.step3.train", "claim5.training_module")
def test_a_gray_input_run_can_start_from_a_feature_input_run(tmp_path, data, straight):
    """--init-from across input kinds (how the README's gray-input network started): the gray
    run starts from the feature run's weights, and its data set is the gray images."""
    assert json.loads((straight[0] / "config.json").read_text())["input_kind"] == "feature"
    run = tmp_path / "gray"
    config = TrainConfig(**{**SMALL, "epochs": 1}, input_kind="gray", learning_rate=1e-12,
                         init_from=str(straight[0]))
    log = io.StringIO()
    train(data, run, config, log=log, jobs=1)
    assert "first data set (gray images)" in log.getvalue()
    source = checkpoint_arrays(straight[0])
    after = checkpoint_arrays(run)
    decoder = [k for k in after if k.startswith("model/")]
    assert decoder
    for key in decoder:
        np.testing.assert_allclose(after[key], source[key], rtol=0, atol=1e-9, err_msg=key)
    saved = json.loads((run / "config.json").read_text())
    assert saved["input_kind"] == "gray" and saved["init_from"] == str(straight[0])


@pytest.mark.claim("claim5.training_module")
def test_runs_refuse_to_overwrite_or_to_resume_with_other_settings(tmp_path, data, straight):
    with pytest.raises(InputError, match="not empty"):
        quiet_train(data, straight[0], TrainConfig(**SMALL))
    with pytest.raises(InputError, match="own settings: seed is 0 in the run, 3 now$"):
        quiet_train(data, straight[0], TrainConfig(**{**SMALL, "seed": 3}), resume=True)
    with pytest.raises(InputError, match="nothing to resume"):
        quiet_train(data, tmp_path / "none", TrainConfig(**SMALL), resume=True)
    with pytest.raises(InputError, match="input"):
        TrainConfig(input_kind="rgb").check()


def _tree(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.claim("claim5.training_module")
def test_resume_refuses_fewer_epochs_than_trained_and_changes_nothing(data, straight):
    run = straight[0]
    before = _tree(run)
    with pytest.raises(InputError, match=r"--epochs 1 is fewer than the 2 epochs already "
                                         r"trained"):
        quiet_train(data, run, TrainConfig(**{**SMALL, "epochs": 1}), resume=True)
    assert _tree(run) == before


@pytest.mark.claim("claim5.training_module")
def test_resume_takes_a_weight_file_spelled_relative_or_absolute(tmp_path, monkeypatch):
    from refseg.run.resume import check_run_folder

    (tmp_path / "w.npz").write_bytes(b"")
    run = tmp_path / "run"
    run.mkdir()
    started = TrainConfig(**{**SMALL, "weights": str(tmp_path / "w.npz")})
    (run / "config.json").write_text(json.dumps(started.to_json()))
    monkeypatch.chdir(tmp_path)
    assert check_run_folder(run, TrainConfig(**{**SMALL, "weights": "w.npz"}), True) == started
    with pytest.raises(InputError, match="own settings: weights"):
        check_run_folder(run, TrainConfig(**{**SMALL, "weights": "other.npz"}), True)


@pytest.mark.claim("claim1.step3.train", "claim5.training_module")
def test_resume_on_another_thread_count_keeps_the_runs_tiles_and_its_bits(tmp_path, data,
                                                                           straight, stopped):
    """The run records the thread count its products are cut for; resumed on one thread, it
    cuts for that count again and ends bit for bit where the uninterrupted run did."""
    from refseg.engine.training.threads import limit_threads

    recorded = json.loads((straight[0] / "threads.json").read_text())["tiling_threads"]
    run = linked_copy(stopped, tmp_path / "resumed")
    assert json.loads((run / "threads.json").read_text())["tiling_threads"] == recorded
    with limit_threads(1):
        quiet_train(data, run, TrainConfig(**SMALL), resume=True)
    expected = checkpoint_arrays(straight[0])
    for key, value in checkpoint_arrays(run).items():
        np.testing.assert_array_equal(value, expected[key], err_msg=key)


@pytest.mark.claim("claim5.training_module")
def test_a_run_that_fails_before_its_first_checkpoint_leaves_no_folder(tmp_path, data):
    weights = tmp_path / "bad.npz"
    np.savez(weights, x=np.zeros(3, np.float32))
    run = tmp_path / "run"
    with pytest.raises(InputError, match="bad.npz"):
        quiet_train(data, run, TrainConfig(**{**SMALL, "weights": str(weights)}))
    assert not run.exists()


@pytest.mark.claim("claim1.step4.predict", "claim5.output_module")
def test_predict_and_evaluate_commands(tmp_path, data, straight, capsys, monkeypatch):
    run = straight[0]
    images = sorted((data / "images").iterdir())[:2]
    assert main(["predict", str(run), *map(str, images), "--out", str(tmp_path / "p")]) == 0
    for image in images:
        folder = tmp_path / "p" / image.stem
        label = read_image(folder / "label.png").pixels
        assert label.shape == (48, 160, 3)
        colours = {tuple(c) for c in label.reshape(-1, 3).astype(int)}
        assert colours <= {(255, 0, 0), (0, 255, 0), (0, 0, 255)}
        assert json.loads((folder / "prediction.json").read_text())["seconds"] > 0
    capsys.readouterr()
    assert main(["evaluate", str(run), str(data), "--out", str(tmp_path / "e")]) == 0
    table = capsys.readouterr().out
    assert "| mobilenetv2, feature input" in table
    scores = json.loads((tmp_path / "e" / "scores.json").read_text())
    assert 0 <= scores[0]["pixel_accuracy"] <= 1
    assert main(["predict", str(tmp_path), str(images[0]), "--out", str(tmp_path / "q")]) == 2
    assert "not a finished or checkpointed refseg run" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()
    # a wrong --out fails before the evaluation, not after it
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    import refseg.run.evaluation as evaluation

    def not_called(*args, **kwargs):
        raise AssertionError("evaluated before the output folder was checked")

    monkeypatch.setattr(evaluation, "evaluate_runs", not_called)
    assert main(["evaluate", str(run), str(data), "--out", str(notes)]) == 2
    assert f"{notes}: exists and is not a folder" in capsys.readouterr().err
    assert notes.read_text() == "mine"


@pytest.mark.claim("claim1.step4.predict", "claim5.output_module")
def test_predict_and_evaluate_take_the_engine_by_default_and_the_reference_on_request(
        tmp_path, data, straight, capsys, monkeypatch):
    """Both routes predict the same probabilities within the engine's stated tolerance, and
    the commands' --route reaches what predicts."""
    from refseg.engine.planner import Plan
    from refseg.engine.runtime import PROBABILITY_TOLERANCE
    import refseg.run.evaluation as evaluation

    run = straight[0]
    model, config = evaluation.load_run(run)
    rgb = np.clip(read_image(sorted((data / "images").iterdir())[0]).pixels + 0.5, 0,
                  255).astype(np.uint8)
    on = {route: evaluation.predict_image(evaluation.predictor(model, route), config, rgb)
          for route in ("engine", "reference")}
    difference = np.abs(on["engine"].probabilities - on["reference"].probabilities).max()
    assert 0 < difference <= PROBABILITY_TOLERANCE
    seen = []
    original = evaluation.predict_image
    monkeypatch.setattr(evaluation, "predict_image",
                        lambda m, *args: seen.append(type(m)) or original(m, *args))
    image = str(sorted((data / "images").iterdir())[0])
    for route, kind in ((None, Plan), ("reference", type(model)), ("engine", Plan)):
        option = [] if route is None else ["--route", route]
        seen.clear()
        assert main(["predict", str(run), image, "--out", str(tmp_path / f"p{route}"),
                     *option]) == 0
        assert seen == [kind]
        seen.clear()
        assert main(["evaluate", str(run), str(data), *option]) == 0
        assert set(seen) == {kind}
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main(["predict", str(run), image, "--out", str(tmp_path / "x"), "--route", "fast"])
    assert refused.value.code == 2 and not (tmp_path / "x").exists()
    assert "invalid choice: 'fast'" in capsys.readouterr().err


@pytest.mark.claim("claim1.step2.dataset")
@given(h=st.integers(3, 40), w=st.integers(3, 40), seed=st.integers(0, 2**16),
       kind=st.sampled_from(["feature", "gray"]))
def test_network_input_range_shape_and_labels(h, w, seed, kind):
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    x = network_input(rgb, (32, 64), kind)
    assert x.shape == (32, 64, 3) and x.dtype == np.float32
    assert x.min() >= -1 and x.max() <= 1
    np.testing.assert_array_equal(x[:, :, 0], x[:, :, 2])
    classes = rng.integers(0, 3, (h, w), dtype=np.uint8)
    resized = resize_labels(classes, (32, 64))
    assert set(np.unique(resized)) <= set(np.unique(classes))


@pytest.mark.claim("claim1.step2.dataset")
def test_network_input_known_values():
    flat = np.full((20, 30, 3), 90, np.uint8)  # no edges anywhere: an empty feature map
    np.testing.assert_array_equal(network_input(flat, (32, 32), "feature"), -1)
    np.testing.assert_allclose(network_input(flat, (32, 32), "gray"), 90 / 127.5 - 1,
                               rtol=1e-6)
    same = np.arange(32 * 64, dtype=np.uint8).reshape(32, 64) % 3
    np.testing.assert_array_equal(resize_labels(same, (32, 64)), same)


def backbone_weights(seed=5):
    """Every backbone array of a seeded network, moving statistics drawn away from Keras'
    initial 0 and 1 so that a recalibration cannot leave them equal by chance."""
    from refseg.models import ResMobileNet

    model = ResMobileNet(SMALL["input_hw"], branches=SMALL["branches"], seed=seed)
    rng = np.random.default_rng(seed)
    arrays = {}
    for part in SMALL["branches"]:
        for layer in model.graph.layers(part):
            for key, value in layer.weights().items():
                if "moving_mean" in key:
                    value = rng.uniform(-0.5, 0.5, value.shape).astype(value.dtype)
                elif "moving_variance" in key:
                    value = rng.uniform(0.5, 2.0, value.shape).astype(value.dtype)
                arrays[key] = np.ascontiguousarray(value)
    return arrays


@pytest.fixture(scope="module")
def weight_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("weights") / "backbones.npz"
    np.savez(path, **backbone_weights())
    return path


@pytest.mark.claim("claim2.backbones", "claim1.step3.train")
@pytest.mark.parametrize("recalibrate", [False, True])
def test_loaded_backbones_are_used_as_loaded_unless_recalibration_is_asked(
        tmp_path, data, weight_file, recalibrate):
    """--weights: the run's backbones (weights and all 50 pairs of MobileNetV2's moving statistics) are the
    file's bit for bit, no calibration; --recalibrate changes the moving statistics only."""
    run = tmp_path / "run"
    quiet_train(data, run, TrainConfig(**{**SMALL, "epochs": 1}, weights=str(weight_file),
                                       recalibrate=recalibrate))
    used = starting_weights(run, TrainConfig(**{**SMALL, "epochs": 1}))
    with np.load(weight_file, allow_pickle=False) as given:
        moving = [k for k in given.files if "moving_" in k]
        assert len(moving) == 2 * 50
        for key in given.files:
            same = np.array_equal(given[key], used[key])
            assert same != (recalibrate and key in moving), key
    record = json.loads((run / "weights.json").read_text())
    assert record["source"] == str(weight_file) and record["loaded"] == len(given.files)
    assert not record["partial"] and "missing" not in record


def _damaged(path, weights, how):
    arrays = dict(weights)
    first = sorted(arrays)[0]
    if how == "renamed":
        arrays = {f"model/{key}": value for key, value in arrays.items()}
    elif how == "misshaped":
        arrays[first] = arrays[first][..., :1]
    elif how == "integer":
        arrays[first] = arrays[first].astype(np.int32)
    elif how == "nan":
        arrays[first] = arrays[first].copy()
        arrays[first].flat[0] = np.nan
    elif how == "missing":
        del arrays[first]
    if how == "no-npy":
        import zipfile

        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "not weights")
    else:
        np.savez(path, **arrays)
    return path


@pytest.mark.claim("claim2.backbones")
@pytest.mark.parametrize("how, problem", [
    ("renamed", "missing"), ("misshaped", "misshaped"), ("integer", "not-float"),
    ("nan", "non-finite"), ("missing", "missing"),
    ("no-npy", "member 'notes.txt' is not a .npy array")])
def test_a_weight_file_that_does_not_fit_fails_in_one_line_before_any_work(
        tmp_path, data, capsys, how, problem):
    """Strict by default: the first problem named with the file, a count of the rest, exit 2,
    and no run folder (the check comes before the data set's extraction)."""
    bad = _damaged(tmp_path / f"{how}.npz", backbone_weights(), how)
    out = tmp_path / "run"
    status = main(["train", str(data), "--out", str(out), "--epochs", "1",
                   "--input-size", "32x96", "--branches", *SMALL["branches"],
                   "--weights", str(bad)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"refseg: error: {bad}: ") and problem in err
    assert not out.exists()


@pytest.mark.claim("claim2.backbones", "claim1.step3.train")
def test_partial_weights_load_what_fits_and_the_run_records_the_rest(tmp_path, data):
    weights = backbone_weights()
    dropped = sorted(k for k in weights if k.startswith("Conv1/"))
    path = tmp_path / "half.npz"
    np.savez(path, **{k: v for k, v in weights.items() if k not in dropped})
    with pytest.raises(InputError, match="missing Conv1/"):
        quiet_train(data, tmp_path / "strict", TrainConfig(**{**SMALL, "epochs": 1},
                                                           weights=str(path)))
    run = tmp_path / "run"
    quiet_train(data, run, TrainConfig(**{**SMALL, "epochs": 1}, weights=str(path),
                                       partial_weights=True))
    record = json.loads((run / "weights.json").read_text())
    assert record["partial"] and record["missing"] == dropped
    assert record["loaded"] == len(weights) - len(dropped)
    with pytest.raises(InputError, match="--partial-weights needs --weights"):
        TrainConfig(partial_weights=True).check()


@pytest.mark.claim("claim1.step3.train", "claim5.training_module")
def test_resume_refuses_another_data_set_and_accepts_the_same_one_moved(tmp_path, data,
                                                                       straight, stopped):
    """The run records its data set (each pair's names, sizes and SHA-256); --resume with
    changed, added or removed pairs fails in one line naming them, before any work, and the
    run is left as it was; the same files in another folder resume to the weights of the
    uninterrupted run on the first folder."""
    import shutil

    config = TrainConfig(**SMALL)
    run = linked_copy(stopped, tmp_path / "run")
    record = json.loads((run / "data.json").read_text())
    assert record["pairs"] == 10 and record["folder"] == str(data.resolve())
    assert [f["stem"] for f in record["files"]] == [f"weld_{i:02d}" for i in range(10)]
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}

    changed = tmp_path / "changed"
    shutil.copytree(data, changed)
    sample = synthetic.weld_image(999, shape=(48, 160))
    write_label(changed / "labels" / "weld_03.png", sample.classes)
    (changed / "images" / "weld_09.png").unlink()
    (changed / "labels" / "weld_09.png").unlink()
    with pytest.raises(InputError, match=r"1 pairs gone \(weld_09\); 1 pairs changed "
                                         r"\(weld_03\)\); --resume needs the same"):
        quiet_train(changed, run, config, resume=True)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before

    moved = tmp_path / "moved"
    shutil.copytree(data, moved)
    log = io.StringIO()
    train(moved, run, config, resume=True, jobs=1, log=log)
    assert "data set moved" in log.getvalue()
    resumed, expected = checkpoint_arrays(run), checkpoint_arrays(straight[0])
    assert resumed.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)


@pytest.mark.claim("claim1.step4.predict", "claim5.output_module")
@pytest.mark.parametrize("damage, message", [
    ("config", "config.json: not the settings of a refseg run"),
    ("config-fields", "config.json: not the settings of a refseg run"),
    ("history", "checkpoint.npz: a damaged refseg checkpoint"),
    ("short-history", "checkpoint.npz: a damaged refseg checkpoint (a history of 1 epochs"),
])
def test_a_damaged_run_folder_is_one_line_not_a_traceback(tmp_path, data, straight, capsys,
                                                          damage, message):
    import shutil

    run = tmp_path / "run"
    # hard links, not copies of the weights; the damaged file is unlinked and written anew,
    # never written through the link into the shared run
    shutil.copytree(straight[0], run, copy_function=os.link)
    if damage == "config":
        (run / "config.json").unlink()
        (run / "config.json").write_text("{not json")
    elif damage == "config-fields":
        (run / "config.json").unlink()
        (run / "config.json").write_text(json.dumps({"epochs": 2, "colour": "red"}))
    else:
        with np.load(run / "checkpoint.npz", allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        history = b"{bad" if damage == "history" else json.dumps(
            json.loads(arrays["history"].tobytes())[:1]).encode()
        arrays["history"] = np.frombuffer(history, dtype=np.uint8)
        (run / "checkpoint.npz").unlink()
        np.savez(run / "checkpoint.npz", **arrays)
    image = sorted((data / "images").iterdir())[0]
    out = tmp_path / "predicted"
    assert main(["predict", str(run), str(image), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.exists()


@pytest.mark.claim("claim4.propagation", "claim4.update")
def test_a_training_step_is_forward_loss_backward_and_adam_and_reports_the_loss_before_it():
    """training_step on a batch of rows equals the same forward, cross-entropy, backward and
    Adam step written out, bit for bit, and returns the probabilities and loss from before the
    update."""
    from refseg import autograd as ag
    from refseg.autograd.optim import Adam
    from refseg.models import ResMobileNet
    from refseg.run.training import training_step

    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (5, 32, 64, 3)).astype(np.float32)
    labels = rng.integers(0, 3, size=(5, 32, 64))
    index = np.array([0, 3, 4])
    models = [ResMobileNet((32, 64), seed=1) for _ in range(2)]
    optimizers = [Adam(m.trainable_parameters(), learning_rate=1e-3) for m in models]
    for m in models:
        m.set_training(True)
    p, loss = training_step(models[0], optimizers[0], x, index, labels[index])
    q = models[1].forward(x[index])
    by_hand = ag.categorical_crossentropy(q, labels[index])
    by_hand.backward()
    optimizers[1].step()
    optimizers[1].zero_grad()
    assert np.array_equal(p.data, q.data) and float(loss.data) == float(by_hand.data)
    for a, b in zip(models[0].trainable_parameters(), models[1].trainable_parameters()):
        assert np.array_equal(a.data, b.data) and a.grad is None
    after, _ = training_step(models[0], optimizers[0], x, index, labels[index])
    assert not np.array_equal(after.data, p.data)  # the update moved the decoder


@pytest.mark.infrastructure
def test_a_finished_run_keeps_what_predicting_needs_and_no_more(tmp_path, data, straight):
    """A finished run's starting weights are the calibrated moving statistics over the seed's
    draw (a few percent of the weights' bytes), its checkpoint has no optimizer state and its
    tap cache is gone; a record that regenerates other weights, or names another seed, is
    refused naming the file."""
    from refseg.run.storage import DIGEST_KEY, SEED_KEY

    run = straight[0]
    with np.load(run / "backbones.npz", allow_pickle=False) as npz:
        stored = {k: npz[k] for k in npz.files}
    weights = [k for k in stored if not k.startswith("@")]
    assert weights and all("moving_" in k for k in weights), weights[:5]
    everything = starting_weights(run, TrainConfig(**SMALL))
    assert sum(stored[k].nbytes for k in weights) < 0.05 * sum(
        v.nbytes for v in everything.values())
    assert not any(k.startswith("optimizer/") for k in checkpoint_arrays(run))
    assert not (run / "cache").exists()

    for change, message in (({SEED_KEY: np.array(7)}, "drawn with seed 7"),
                            ({DIGEST_KEY: np.frombuffer(b"0" * 64, np.uint8)},
                             "regenerated from seed 0 differ")):
        copy = tmp_path / f"copy{len(message)}"
        shutil.copytree(run, copy)
        np.savez(copy / "backbones.npz", **{**stored, **change})
        with pytest.raises(InputError, match=message):
            load_run(copy)


@pytest.mark.claim("claim1.step3.train", "claim1.step4.predict")
def test_a_reloaded_run_predicts_bit_for_bit_what_the_live_model_did(tmp_path, data,
                                                                     monkeypatch):
    """The last checkpoint stores the trained arrays as byte planes against the starting
    weights, deflated, without Adam's state, in fewer bytes than the arrays; the run read back
    holds the live model's weights and predicts the same bits."""
    from refseg.run import training
    from refseg.run.storage import AGAINST_START_KEY

    live = []
    write_epoch = training._write_epoch

    def keep_live(run, model, *args):
        live.append(model)
        write_epoch(run, model, *args)

    monkeypatch.setattr(training, "_write_epoch", keep_live)
    run = tmp_path / "run"
    quiet_train(data, run, TrainConfig(**{**SMALL, "epochs": 1}))
    stored = stored_arrays(run)
    trained = {k: v for k, v in stored.items() if k.startswith("model/")}
    assert AGAINST_START_KEY in stored and not any(k.startswith("optimizer/") for k in stored)
    assert trained and all(v.dtype == np.uint8 and v.ndim == 2 for v in trained.values())
    assert (run / "checkpoint.npz").stat().st_size < sum(v.nbytes for v in trained.values())
    model, _ = load_run(run)
    expected = live[-1].weights()
    assert model.weights().keys() == expected.keys()
    for key, value in expected.items():
        assert model.weights()[key].tobytes() == value.tobytes(), key
    x = np.random.default_rng(3).uniform(-1, 1, (3, 32, 96, 3)).astype(np.float32)
    live[-1].set_training(False)
    assert model.predict(x).tobytes() == live[-1].predict(x).tobytes()


@pytest.mark.claim("claim1.step3.train")
def test_only_a_run_that_kept_its_optimizer_state_trains_further(tmp_path, data, straight):
    """keep_optimizer_state keeps Adam's state in the last checkpoint, and such a run resumed
    for a third epoch ends bit for bit where a 3-epoch run stopped after epoch 2 and resumed
    does; the run without it is refused, unchanged, with a line saying why."""
    config = TrainConfig(**{**SMALL, "epochs": 3})
    kept = tmp_path / "kept"
    quiet_train(data, kept, TrainConfig(**SMALL), keep_optimizer_state=True, keep_cache=True,
                checkpoint_every_epoch=False)
    assert any(k.startswith("optimizer/") for k in checkpoint_arrays(kept))
    assert (kept / "cache").is_dir()
    quiet_train(data, kept, config, resume=True)
    stopped = tmp_path / "stopped"
    quiet_train(data, stopped, config, stop_after_epoch=2, checkpoint_every_epoch=False)
    quiet_train(data, stopped, config, resume=True)
    expected, got = checkpoint_arrays(stopped), checkpoint_arrays(kept)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)

    dropped = tmp_path / "dropped"
    shutil.copytree(straight[0], dropped)
    before = checkpoint_arrays(dropped)
    with pytest.raises(InputError, match="optimizer state was dropped; training it further "
                                         "needs a run trained with --keep-optimizer-state"):
        quiet_train(data, dropped, config, resume=True)
    after = checkpoint_arrays(dropped)
    assert after.keys() == before.keys() and all(
        np.array_equal(after[k], v) for k, v in before.items())


@pytest.mark.claim("claim1.step3.train")
def test_a_run_of_another_seed_starts_from_the_source_runs_weights(tmp_path, data, straight):
    """--init-from a run of another seed: the new run's starting weights (stored against its
    own seed's draw) are the source's last weights, every one of them."""
    config = TrainConfig(**{**SMALL, "epochs": 1, "seed": 5}, learning_rate=1e-12,
                         init_from=str(straight[0]))
    run = tmp_path / "other-seed"
    quiet_train(data, run, config)
    source = load_run(straight[0])[0].weights()
    start = starting_weights(run, config)
    assert start.keys() == source.keys()
    for key, value in start.items():
        np.testing.assert_array_equal(value, source[key], err_msg=key)
