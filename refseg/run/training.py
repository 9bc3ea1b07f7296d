"""Training the fusion network on the first data set (claim 1 step 3, claim 4; [0122], [0215],
[0242]-[0257]), with checkpoints that a killed run resumes from exactly.

A run folder holds:

- ``config.json``: the settings (``refseg.run.config.TrainConfig``; a resumed run must use
  the same ones, except the number of epochs and learning-rate steps of epochs not yet
  trained);
- ``cache/``: the network inputs' tap features, computed once per image by the frozen
  backbones and kept as ``.npy`` files, written through ``write`` and read memory-mapped (the
  page cache holds them when they fit in memory, the disk when they do not), removed when
  training ends unless ``keep_cache``;
  absent with ``train_backbone``, where the backbones change every step and run on the images
  themselves;
- ``backbones.npz``: the weights the run started from (after batch-norm calibration), as
  what regenerates them: the arrays that differ from the seed's draw, the seed and a digest
  (``refseg.run.storage``);
- ``checkpoint.npz``: the trained weights (the decoder's, plus the backbones' weights and
  moving statistics with ``train_backbone``), Adam's state, the epoch and the metrics history,
  written atomically at the end of every epoch (one file, so a kill leaves the last one whole;
  a run nobody resumes, such as the demo's, writes only its last epoch's);
  at the last epoch Adam's state is dropped unless ``keep_optimizer_state``, and the trained
  arrays are stored against the starting weights (``refseg.run.storage.pack_against_start``);
- ``metrics.jsonl``: one line per epoch (training loss and pixel accuracy, validation loss,
  pixel accuracy, per-class IoU and mIoU);
- ``curves.png``: loss and accuracy per epoch (like fig. 8).
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from refseg import autograd as ag
from refseg.errors import InputError, reason
from refseg.publish import (atomic_files, locked_folder, naming, write_json, write_npz,
                            write_text)
from refseg.data.inputs import prepare
from refseg.models import ResMobileNet
from refseg.models.weights import read_weight_file
from refseg.autograd.optim import Adam
from refseg.data import dataset
from refseg.run import metrics
from refseg.run.config import TrainConfig, check_range
from refseg.run.curves import write_curves
from refseg.run.records import read_json, read_run_config
from refseg.run.resume import (DATA_RECORD, THREADS_RECORD, check_apart, check_run_folder,
                               check_same_data, clear_new_run, data_identity, recorded_tiles)
from refseg.run.storage import (AGAINST_START_KEY, MODEL_PREFIX, OPTIMIZER_PREFIX,
                                STARTING_FILE, check_resumable, drop_optimizer_state,
                                load_starting_weights, pack_against_start,
                                unpack_against_start, write_starting_weights)
from refseg.cite import implements, infrastructure
from refseg.engine.training import training_engine
from refseg.engine.training.threads import bits_independent_of_load, sized_to_load

#: Images per batch when computing taps and validation predictions (memory, not results).
INFERENCE_BATCH = 8
#: When the log is not a terminal, a progress line is printed at most this often (seconds).
PROGRESS_SECONDS = 15.0
#: What a run folder holds instead of its weights when ``refseg demo`` removed them.
PRUNED_RECORD = "pruned.json"


# ----------------------------------------------------------------------------------- data
def _split(data, config):
    train_set, validation_set = dataset.split(data, config.validation_fraction, config.seed)
    if not len(train_set) or not len(validation_set):
        raise InputError(f"{data.folder}: {len(data)} images are too few to split "
                         f"{1 - config.validation_fraction:.0%} / "
                         f"{config.validation_fraction:.0%}")
    return train_set, validation_set


def _pairs(samples):
    for sample in samples:
        yield dataset.load_pair(sample)


def _cache_taps(model, x, y, folder: Path, split: str) -> dict:
    """Taps of every image and the labels, as ``.npy`` files written whole (through ``write``
    under temporary names, then renamed: a full disk ends with an OSError naming the file,
    never a SIGBUS of a memory-mapped page); returns them opened read-only."""
    done = folder / f"{split}.json"
    names = model.decoder_inputs
    if not done.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        first = model.taps(x[:1])
        paths = [folder / f"{split}_{name}.npy" for name in names]
        with atomic_files([*paths, folder / f"{split}_labels.npy"]) as files:
            for name, path, f in zip(names, paths, files):
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                          "fortran_order": False, "shape": (len(x), *first[name].shape[1:])}
                with naming(path):
                    np.lib.format.write_array_header_1_0(f, header)
            for start in range(0, len(x), INFERENCE_BATCH):
                batch = x[start:start + INFERENCE_BATCH]
                with sized_to_load(("taps", id(model), len(batch))):
                    taps = model.taps(batch)
                for name, path, f in zip(names, paths, files):
                    with naming(path):
                        f.write(np.ascontiguousarray(taps[name], dtype=np.float32).data)
            with naming(folder / f"{split}_labels.npy"):
                np.save(files[-1], y)
        write_json(done, {"images": len(x), "taps": list(names)})
    taps = {name: np.load(folder / f"{split}_{name}.npy", mmap_mode="r") for name in names}
    labels = np.load(folder / f"{split}_labels.npy", allow_pickle=False)
    return {"taps": taps, "labels": labels}


# ------------------------------------------------------------------------------ checkpoint
def _trained_arrays(model) -> dict:
    """Every array a training step changes (views): trainable layers' weights and moving
    statistics."""
    return {key: value for layer in model.graph.layers() if layer.trainable
            for key, value in layer.weights().items()}


def _checkpoint_arrays(model, optimizer, epoch, history) -> dict:
    arrays = {f"{MODEL_PREFIX}{key}": value for key, value in _trained_arrays(model).items()}
    arrays.update({f"{OPTIMIZER_PREFIX}{k}": v for k, v in optimizer.state_dict().items()})
    arrays["epoch"] = np.array(epoch)
    arrays["history"] = np.frombuffer(json.dumps(history).encode(), dtype=np.uint8)
    return arrays


def _read_checkpoint(path: Path, model: ResMobileNet):
    """The trained arrays, Adam's state, the epoch and the history of the checkpoint ``path``
    of a run whose starting weights ``model`` holds (they rebuild a last epoch's arrays)."""
    arrays = read_weight_file(path)
    for key in ("epoch", "history"):
        if key not in arrays:
            raise InputError(f"{path}: not a refseg checkpoint (no {key!r})")
    trained = {k[len(MODEL_PREFIX):]: v for k, v in arrays.items()
               if k.startswith(MODEL_PREFIX)}
    if AGAINST_START_KEY in arrays:
        trained = unpack_against_start(trained, arrays[AGAINST_START_KEY], model.weights(),
                                       path)
    optimizer = {k[len(OPTIMIZER_PREFIX):]: v for k, v in arrays.items()
                 if k.startswith(OPTIMIZER_PREFIX)}
    try:
        history = json.loads(arrays["history"].tobytes().decode())
        epoch = int(arrays["epoch"])
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path}: a damaged refseg checkpoint (its epoch or history: "
                         f"{reason(exc)})") from None
    if not isinstance(history, list) or len(history) != epoch:
        raise InputError(f"{path}: a damaged refseg checkpoint (a history of "
                         f"{len(history) if isinstance(history, list) else 'no'} epochs "
                         f"after epoch {epoch})")
    return trained, optimizer, epoch, history


@infrastructure("reading a run folder")
def load_run(run_dir) -> tuple[ResMobileNet, TrainConfig]:
    """The trained model of a run folder (backbones + last checkpoint) and its settings."""
    run = Path(run_dir)
    config = _run_config(run, "not a finished or checkpointed refseg run")
    model = ResMobileNet(config.input_hw, branches=config.branches, seed=config.seed)
    _restore(model, run, config.seed)
    return model, config


def _run_config(run: Path, problem: str) -> TrainConfig:
    """The settings of a checkpointed run folder (else InputError: ``run: problem (...)``)."""
    if (run / PRUNED_RECORD).is_file() and not (run / "checkpoint.npz").is_file():
        pruned = read_json(run / PRUNED_RECORD, "a record of removed weights")
        if not isinstance(pruned, dict) or not isinstance(pruned.get("bytes"), (int, float)) \
                or not isinstance(pruned.get("keep_with"), str):
            raise InputError(f"{run / PRUNED_RECORD}: a damaged record of removed weights")
        raise InputError(f"{run}: its weights were removed by refseg demo to save "
                         f"{pruned['bytes'] / 1e6:.0f} MB (metrics and curves kept); "
                         f"`{pruned['keep_with']}` keeps every run's")
    if not (run / "config.json").is_file() or not (run / "checkpoint.npz").is_file():
        raise InputError(f"{run}: {problem} (config.json and checkpoint.npz expected)")
    return read_run_config(run / "config.json")


def _restore(model, run: Path, seed: int) -> int:
    """Set ``model`` (built with the run's ``seed``) to the run's starting weights
    (``backbones.npz``), then to its last checkpoint's; returns the checkpoint's epoch."""
    load_starting_weights(model, run / STARTING_FILE, seed)
    weights, _, epoch, _ = _read_checkpoint(run / "checkpoint.npz", model)
    report = model.set_weights(weights, strict=False, source=str(run / "checkpoint.npz"))
    if report.problems and set(report.problems) != {"missing"}:
        raise InputError(f"{run / 'checkpoint.npz'}: {report.problem_line()}")
    return epoch


def _initialise_from(model, config) -> int:
    """Set every weight and moving statistic of ``model`` to those of the last checkpoint of
    the run ``config.init_from``; returns that checkpoint's epoch."""
    source = Path(config.init_from)
    source_config = _run_config(source, "--init-from needs a checkpointed refseg run")
    if tuple(source_config.branches) != tuple(config.branches):
        raise InputError(f"{source}: its branches {list(source_config.branches)} differ from "
                         f"this run's {list(config.branches)}")
    if source_config.seed == config.seed:
        return _restore(model, source, config.seed)
    # the source's starting weights regenerate from its own seed, not this run's
    source_model = ResMobileNet(config.input_hw, branches=config.branches,
                                seed=source_config.seed)
    epoch = _restore(source_model, source, source_config.seed)
    model.set_weights(source_model.weights(), source=str(source))
    return epoch


# -------------------------------------------------------------------------------- training
def _run(model, source, index):
    """The prediction for one batch of a source: cached taps (a dict) or the images."""
    if isinstance(source, dict):
        return model.decode({name: np.asarray(taps[index]) for name, taps in source.items()})
    return model.forward(source[index])


@implements("claim4.propagation", "claim4.update")
def training_step(model, optimizer, source, index, labels):
    """One step of training on a batch: forward, per-pixel cross-entropy, backward, Adam.

    Parameters
    ----------
    model : ResMobileNet
        In training mode, with the parameters ``optimizer`` updates trainable.
    optimizer : refseg.autograd.optim.Adam
    source : ndarray of shape (N, H, W, 3), float32, or dict of name -> ndarray
        The network inputs in [-1, 1], or the cached taps by name (frozen backbones).
    index : ndarray of shape (B,), int
        The batch's rows of ``source``.
    labels : ndarray of shape (B, H, W), int
        Class per pixel (0 contour, 1 inside, 2 outside).

    Returns
    -------
    (Tensor, Tensor)
        The probabilities (B, H, W, 3) and the scalar loss, both from before the update.

    Notes
    -----
    1. The probabilities from the images (both backbones and the decoder) or from the taps
       (the decoder alone).
    2. The cross-entropy averaged over the batch's pixels ([0242]-[0245]).
    3. Backward; Adam's update of every trainable parameter; the gradients zeroed
       ([0246]-[0255]).
    The step runs on as many threads as the machine's load leaves free
    (``refseg.engine.training.threads.sized_to_load``, timed per batch size); inside
    ``refseg.engine.training.threads.bits_independent_of_load`` its results are the same on any of them.

    References
    ----------
    [0242]-[0255].
    """
    with sized_to_load(("training step", id(model), len(index))):
        p = _run(model, source, index)
        loss = ag.categorical_crossentropy(p, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return p, loss


def _evaluate(model, source, labels) -> dict:
    total, cm = 0.0, np.zeros((3, 3), np.int64)
    model.set_training(False)
    with ag.no_grad():
        for start in range(0, len(labels), INFERENCE_BATCH):
            batch = slice(start, start + INFERENCE_BATCH)
            with sized_to_load(("validation", id(model), len(labels[batch]))):
                p = _run(model, source, batch)
            y = labels[batch]
            total += float(ag.categorical_crossentropy(p, y).data) * y.size
            cm += metrics.confusion_matrix(y, p.data.argmax(axis=-1))
    iou = metrics.class_iou(cm)
    return {"loss": total / labels.size, "pixel_accuracy": float(metrics.pixel_accuracy(cm)),
            "iou": [None if np.isnan(v) else float(v) for v in iou],
            "miou": float(metrics.mean_iou(cm))}


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@implements("claim1.step3.train", "claim4.propagation", "claim4.update",
            "claim5.training_module")
def train(data_dir, run_dir, config: TrainConfig, *, resume: bool = False, jobs=None,
          stop_after_epoch: int | None = None, log=None, shown_as=None,
          keep_optimizer_state: bool = False, keep_cache: bool = False,
          checkpoint_every_epoch: bool = True) -> list[dict]:
    """Train the fusion network on a data set folder; returns the metrics history.

    Parameters
    ----------
    data_dir : path
        ``images/`` and ``labels/`` (see :mod:`refseg.data.dataset`).
    run_dir : path
        The run folder (created; must be empty unless resuming).
    config : TrainConfig
    resume : bool
        Continue the run in ``run_dir`` from its last checkpoint, exactly.
    jobs : int or None
        Processes for the claim-1 extraction (default: all cores).
    stop_after_epoch : int or None
        Stop (as if killed) after this epoch's checkpoint (tests of resuming).
    log : file or None
        Progress, rewritten in place on a terminal (None: ``sys.stderr`` at the call).
    shown_as : path or None
        The run folder as the log names it (default ``run_dir``).
    keep_optimizer_state : bool
        Keep Adam's state in the last checkpoint (needed to ``resume`` a finished run).
    keep_cache : bool
        Keep the tap cache when training ends (removed by default; rebuilt on demand).
    checkpoint_every_epoch : bool
        Write the checkpoint (what a killed run resumes from) after every epoch; False: only
        the last epoch's, for a run nobody resumes, such as the demo's.

    Returns
    -------
    list of dict
        One entry per epoch, as written to ``metrics.jsonl``.

    Notes
    -----
    1. Split by seed; claim-1 extraction of every image, resized, in [-1, 1] ([0075], [0203]).
    2. Build the network: backbone weights loaded, or batch norms calibrated (R-frozen), or
       ``init_from``'s run; backbones frozen ([0143], [0241]), their taps cached, unless
       ``train_backbone`` (an extension, R-frozen).
    3. Each epoch: shuffle by seed and epoch; per batch :func:`training_step` ([0242]-[0255]);
       validate; write ``metrics.jsonl``, the checkpoint and the curves.
    The convolutions run on training's engine (``refseg.engine.training``; the reference route
    under ``refseg.engine.use_engine(False)``), each step on the threads the machine's load
    leaves, the products cut for one count throughout: a run, resumed or not, ends bit for bit
    where the same run does.

    References
    ----------
    [0122], [0129]-[0132], [0215], [0242]-[0257].
    """
    log = sys.stderr if log is None else log
    config.check()
    if jobs is not None:
        check_range(jobs, "jobs")
    run = Path(run_dir)
    check_apart(run, Path(data_dir))
    fresh = not resume and not run.exists()
    saved = check_run_folder(run, config, resume)
    # one writer at a time; what a killed one left is swept under the lock
    with locked_folder(run):
        saved = check_run_folder(run, config, resume)
        if resume:
            check_resumable(run / "checkpoint.npz", config.epochs)
        tiles = recorded_tiles(run, log) if resume else None
        try:
            with training_engine(), bits_independent_of_load(tiles) as count:
                if tiles is None:
                    write_json(run / THREADS_RECORD, {"tiling_threads": count})
                return _train(data_dir, run, config, saved, resume=resume, jobs=jobs,
                              stop_after_epoch=stop_after_epoch, log=log, shown_as=shown_as,
                              keep_optimizer_state=keep_optimizer_state, keep_cache=keep_cache,
                              checkpoint_every_epoch=checkpoint_every_epoch)
        except Exception:
            if not resume and not (run / "checkpoint.npz").exists():
                clear_new_run(run, fresh)  # nothing to resume: the folder as it was
            raise


def _network_and_inputs(data_dir, run: Path, config: TrainConfig, *, resume, jobs, log):
    """Steps 1-3 of :func:`train`: the data set checked and split, the network built (its
    starting weights loaded, calibrated or restored), the run's records written, and what
    each step reads: the cached taps, or the images when the backbones train.

    Returns ``(model, train_source, labels, val_source, val_labels)``."""
    data = dataset.load_dataset(data_dir)
    identity = data_identity(data)
    if resume:
        check_same_data(run, identity, log)
    train_set, validation_set = _split(data, config)
    model = ResMobileNet(config.input_hw, branches=config.branches, seed=config.seed)
    calibrated = resume and (run / STARTING_FILE).is_file()
    # the starting weights are read and checked before any image is extracted
    loaded = None if calibrated else _load_starting_weights(model, config, log)
    if not resume:
        run.mkdir(parents=True, exist_ok=True)
    print(f"data: {len(train_set)} training, {len(validation_set)} validation images; "
          f"input {config.input_kind} at {config.input_hw[0]}x{config.input_hw[1]}",
          file=log)
    cache_dir = run / "cache"
    cached = not config.train_backbone and all(
        (cache_dir / f"{s}.json").is_file() for s in ("train", "validation"))
    x_train = x_val = y_train = y_val = None
    if not (cached and calibrated):
        x_train, y_train, x_val, y_val = _first_data_set(train_set, validation_set, config,
                                                         jobs, log)
    if calibrated:
        load_starting_weights(model, run / STARTING_FILE, config.seed)
    else:
        if (loaded is None and config.calibrate) or config.recalibrate:
            calibration = x_train[:config.calibration_images]
            count = model.calibrate_batch_norm(calibration)
            print(f"calibrated {count} backbone batch-norm layers on {len(calibration)} "
                  "training images (R-frozen)", file=log)
        if loaded is not None:
            write_json(run / "weights.json", loaded)
        write_json(run / DATA_RECORD, identity)
        write_json(run / "config.json", config.to_json())
        write_starting_weights(model, run / STARTING_FILE, config.seed)
    if config.train_backbone:
        for branch in config.branches:
            model.freeze(branch, frozen=False)
        train_source, labels, val_source, val_labels = x_train, y_train, x_val, y_val
        print(f"training the backbones too (an extension, R-frozen): "
              f"{model.parameter_count(trainable_only=True):,} trainable parameters", file=log)
    else:
        t = time.perf_counter()
        train_cache = _cache_taps(model, x_train, y_train, cache_dir, "train")
        val_cache = _cache_taps(model, x_val, y_val, cache_dir, "validation")
        del x_train, x_val  # the cached taps replace the images
        train_source, labels = train_cache["taps"], train_cache["labels"]
        val_source, val_labels = val_cache["taps"], val_cache["labels"]
        print(f"taps cached in {_duration(time.perf_counter() - t)}", file=log)
    return model, train_source, labels, val_source, val_labels

def _train(data_dir, run: Path, config: TrainConfig, saved, *, resume, jobs, stop_after_epoch,
           log, shown_as, keep_optimizer_state, keep_cache,
           checkpoint_every_epoch=True) -> list[dict]:
    """:func:`train` in its locked run folder."""
    started = time.perf_counter()
    model, train_source, labels, val_source, val_labels = _network_and_inputs(
        data_dir, run, config, resume=resume, jobs=jobs, log=log)
    optimizer = Adam(model.trainable_parameters(), learning_rate=config.learning_rate)
    # the last epoch's checkpoint is stored against them
    start = {key: value.copy() for key, value in _trained_arrays(model).items()}
    history, first_epoch = [], 1
    if resume and (run / "checkpoint.npz").is_file():
        history, first_epoch = _resume_checkpoint(run, model, optimizer, saved, config, log)
    if resume:
        write_json(run / "config.json", config.to_json())  # the epochs and steps now planned
    for epoch in range(first_epoch, config.epochs + 1):
        t0 = time.perf_counter()
        loss_sum, correct, pixels = _train_epoch(model, optimizer, train_source, labels,
                                                 config, epoch, log)
        if config.train_backbone:
            # trainable batch norm normalises with batch statistics; its moving averages
            # (momentum 0.99) trail weights that change every step, and predicting with them
            # cost 4 points of validation accuracy (91.6 % against 95.8 % on 200 validation
            # welds after epoch 2 of the 2640-weld run). Recompute them for the epoch's final
            # weights, as the calibration does
            model.calibrate_batch_norm(train_source[:config.calibration_images])
        validation = _evaluate(model, val_source, val_labels)
        entry = {"epoch": epoch, "learning_rate": optimizer.learning_rate,
                 "train_loss": loss_sum / pixels,
                 "train_pixel_accuracy": correct / pixels,
                 **{f"val_{k}": v for k, v in validation.items()},
                 "seconds": time.perf_counter() - t0}
        history.append(entry)
        print(f"{_line_start(log)}epoch {epoch}/{config.epochs}: loss "
              f"{entry['train_loss']:.4f}, accuracy "
              f"{entry['train_pixel_accuracy']:.4f}; validation loss {entry['val_loss']:.4f}, "
              f"accuracy {entry['val_pixel_accuracy']:.4f}, mIoU {entry['val_miou']:.4f} "
              f"({_duration(entry['seconds'])})", file=log)
        stopping = stop_after_epoch is not None and epoch >= stop_after_epoch
        last = epoch == config.epochs
        _write_epoch(run, model, optimizer, epoch, history, keep_optimizer_state,
                     start if last else None, checkpoint_every_epoch or last or stopping)
        if stopping:
            break
    if not keep_cache and len(history) == config.epochs:
        remove_cache(run)
    print(f"done in {_duration(time.perf_counter() - started)}: {shown_as or run}", file=log)
    return history


def _first_data_set(train_set, validation_set, config: TrainConfig, jobs, log):
    """The network inputs and resized labels of both splits ([0075], [0203])."""
    t = time.perf_counter()
    x_train, y_train = prepare(_pairs(train_set), config.input_hw, config.input_kind, jobs,
                               config.feature_reading)
    x_val, y_val = prepare(_pairs(validation_set), config.input_hw, config.input_kind, jobs,
                           config.feature_reading)
    print(f"first data set ({config.input_kind} images): {len(x_train) + len(x_val)} "
          f"images in {_duration(time.perf_counter() - t)}", file=log)
    return x_train, y_train, x_val, y_val


def _load_starting_weights(model, config: TrainConfig, log) -> dict | None:
    """The weights a new run starts from, if not random: a weight file (strictly, unless
    ``partial_weights``) or another run's last checkpoint (backbones and decoder). Returns what
    was loaded, as recorded in the run's ``weights.json``, or None for random backbones."""
    if config.weights:
        report = model.load_part_weights(config.weights, config.branches,
                                         strict=not config.partial_weights)
        for notice in report.notices():
            print(notice, file=log)
        return {"source": str(config.weights), "partial": config.partial_weights,
                "loaded": len(report.loaded),
                **{kind: sorted(keys) for kind, keys in report.problems.items()},
                "ignored": sorted(report.ignored)}
    if config.init_from:
        epoch = _initialise_from(model, config)
        print(f"initialised from {config.init_from} (epoch {epoch}: backbones and decoder)",
              file=log)
        return {"source": str(config.init_from), "epoch": epoch,
                "loaded": "every weight and moving statistic of its last checkpoint"}
    return None


def _resume_checkpoint(run: Path, model, optimizer, saved: TrainConfig, config: TrainConfig,
                       log) -> tuple[list, int]:
    """Load the last checkpoint into ``model`` and ``optimizer``; returns the history so far
    and the first epoch still to train. Refuses learning-rate steps that would change an
    epoch already trained."""
    weights, state, epoch, history = _read_checkpoint(run / "checkpoint.npz", model)
    changed = [e for e in range(1, epoch + 1)
               if saved.learning_rate_at(e) != config.learning_rate_at(e)]
    if changed:
        raise InputError(f"{run}: the learning-rate steps change epoch {changed[0]}, "
                         f"already trained (the checkpoint is after epoch {epoch})")
    model.set_weights(weights, strict=False, source=str(run / "checkpoint.npz"))
    if state:
        optimizer.load_state_dict(state)
    print(f"resumed after epoch {epoch}", file=log)
    return history, epoch + 1


def _train_epoch(model, optimizer, source, labels, config: TrainConfig, epoch: int,
                 log) -> tuple[float, int, int]:
    """One epoch of steps, in the order drawn from (seed, epoch): forward, per-pixel
    cross-entropy, backward, Adam ([0242]-[0255]). Returns the summed loss, the correct pixels
    and the pixels seen."""
    count = len(labels)
    batches = -(-count // config.batch_size)
    order = np.random.default_rng([config.seed, epoch]).permutation(count)
    optimizer.learning_rate = config.learning_rate_at(epoch)
    t0, loss_sum, correct, pixels = time.perf_counter(), 0.0, 0, 0
    terminal, printed = _on_terminal(log), None
    model.set_training(True)
    for b in range(batches):
        index = np.sort(order[b * config.batch_size:(b + 1) * config.batch_size])
        y = labels[index]
        p, loss = training_step(model, optimizer, source, index, y)
        loss_sum += float(loss.data) * y.size
        correct += int((p.data.argmax(axis=-1) == y).sum())
        pixels += y.size
        elapsed = time.perf_counter() - t0
        rate = (b + 1) * len(index) / elapsed
        eta = elapsed / (b + 1) * (batches - b - 1)
        text = (f"epoch {epoch}/{config.epochs} batch {b + 1}/{batches} loss "
                f"{loss_sum / pixels:.4f} {rate:.1f} img/s ETA {_duration(eta)}")
        if terminal:
            print(f"\r{text}  ", end="", file=log, flush=True)
        elif b + 1 < batches and (printed is None or elapsed - printed >= PROGRESS_SECONDS):
            # a log file gets whole lines, few of them; the epoch's line follows the last batch
            print(text, file=log, flush=True)
            printed = elapsed
    return loss_sum, correct, pixels


def _on_terminal(log) -> bool:
    try:
        return log.isatty()
    except (AttributeError, ValueError):  # not a real file, or closed
        return False


def _line_start(log) -> str:
    """A carriage return on a terminal, where the progress line is rewritten in place; nothing
    in a log file."""
    return "\r" if _on_terminal(log) else ""


def _write_epoch(run: Path, model, optimizer, epoch: int, history: list,
                 keep_optimizer_state: bool, start: dict | None, checkpoint: bool) -> None:
    """The epoch's checkpoint (when ``checkpoint``), metrics and curves, each written
    atomically. The last epoch's checkpoint (``start``: the starting weights of the trained
    arrays) stores the trained arrays against them, deflated, and drops Adam's state unless
    ``keep_optimizer_state``; an earlier one is written plainly and whole, for resuming."""
    if checkpoint:
        arrays = _checkpoint_arrays(model, optimizer, epoch, history)
        if start is not None:
            if not keep_optimizer_state:
                arrays = drop_optimizer_state(arrays)
            arrays = pack_against_start(arrays, start)
        write_npz(run / "checkpoint.npz", compressed=start is not None, **arrays)
    _write_metrics(run / "metrics.jsonl", history)
    write_curves(history, run / "curves.png")


def _write_metrics(path: Path, history):
    write_text(path, "".join(json.dumps(entry) + "\n" for entry in history))


@infrastructure("cache housekeeping")
def remove_cache(run_dir) -> None:
    """Delete a run's tap cache (it is rebuilt on demand)."""
    shutil.rmtree(Path(run_dir) / "cache", ignore_errors=True)


