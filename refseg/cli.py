"""The ``refseg`` command line.

``refseg edges IMAGE... --out DIR``   claim-1 feature extraction, every intermediate written out
``refseg demo [--out DIR]``           the main job: the whole method on synthetic weld seams
``refseg synth --count N --out DIR [--seed S] [--size HxW]``  a synthetic weld data set:
                                      DIR/images/, DIR/labels/ ([0263] colours), DIR/synth.json
``refseg dataset check DIR``          check a data set folder (pairs, sizes, label colours)
``refseg trace [--write]``            print (or regenerate) the traceability matrix
``refseg explain ID``                 one claim element: text, readings, functions, tests
``refseg weights convert FILE.h5 OUT.npz``  Keras HDF5 weights to refseg's .npz weight file
``refseg weights inspect FILE.npz``   the keys of a weight file against the expected weights
``refseg model summary [--input-size HxW]``  every layer of the fusion network, with totals
``refseg train DATA --out RUN [...]``  train the fusion network on a data set (claims 1, 4)
``refseg predict RUN IMAGE... --out DIR``  label and overlay PNGs of images, and their times
``refseg evaluate RUN DATA [--compare RUN...]``  scores on a data set, runs side by side
``refseg golden write DIR`` / ``golden check DIR CANDIDATE.npz``  golden-file bundles (issue 6)

Bad input ends with one line on stderr naming the file and the problem, exit status 2, and no
output left behind: results are staged in a hidden folder inside ``--out`` and renamed into
place only when complete.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from refseg.errors import InputError
from refseg.imageio import StagedFolders
from refseg.trace import implements

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="refseg", description=(
        "Reference implementation of the image semantic segmentation method of patent "
        "CN114419081B."))
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("edges", help="claim-1 feature extraction of images")
    e.add_argument("images", nargs="+", type=Path, help="image files (any format Pillow reads)")
    e.add_argument("--out", type=Path, required=True, help="output folder (one subfolder each)")
    e.add_argument("--sigma", type=float, default=None, help="Gaussian sigma (default 0.8)")

    d = sub.add_parser("demo", help="the main job: the whole method on synthetic weld seams")
    d.add_argument("--out", type=Path, default=Path("demo-out"), help="report folder")
    d.add_argument("--count", type=int, default=160, help="synthetic training welds")
    d.add_argument("--test-count", type=int, default=40, help="synthetic test welds")
    d.add_argument("--epochs", type=int, default=8)
    d.add_argument("--input-size", default="64x224", help="network input HxW")
    d.add_argument("--seed", type=int, default=0, help="seed of the first weld")
    d.add_argument("--jobs", type=int, default=None, help="extraction processes")
    d.add_argument("--train-backbone", action="store_true",
                   help="train the backbones too (an extension; the patent freezes them)")

    t = sub.add_parser("trace", help="print the traceability matrix")
    t.add_argument("--write", action="store_true",
                   help="regenerate spec/traceability.md from the code and tests (checkout only)")

    x = sub.add_parser("explain", help="explain one claim element")
    x.add_argument("element", help="claim-element ID, e.g. claim1.step2.cv")
    x.add_argument("--golden", type=Path, default=None,
                   help="a bundle of `refseg golden write`: also list the arrays pinning it")

    w = sub.add_parser("weights", help="convert and inspect backbone weight files")
    wsub = w.add_subparsers(dest="weights_command", required=True)
    wc = wsub.add_parser("convert", help="Keras HDF5 weights (.h5, .weights.h5) to .npz")
    wc.add_argument("source", type=Path, help="Keras HDF5 weight or model file")
    wc.add_argument("destination", type=Path, help="the .npz weight file to write")
    wi = wsub.add_parser("inspect", help="keys, shapes and dtypes of an .npz weight file")
    wi.add_argument("path", type=Path, help="an .npz weight file")

    m = sub.add_parser("model", help="the fusion network of claims 2-4")
    msub = m.add_subparsers(dest="model_command", required=True)
    ms = msub.add_parser("summary", help="every layer: op, output shape, parameters, MACs, "
                                         "paragraphs; totals")
    ms.add_argument("--input-size", default="224x224", help="HxW, multiples of 32")
    ms.add_argument("--part", choices=("resnet50v2", "mobilenetv2", "decoder"), default=None,
                    help="only the layers of one part (totals still cover all)")

    # count, seed and size are parsed by run_synth, not argparse, so that a bad value ends
    # with refseg's one-line error like every other bad input
    sy = sub.add_parser("synth", help="write a synthetic weld data set (images and labels)")
    sy.add_argument("--count", default=None, help="number of image/label pairs (>= 1)")
    sy.add_argument("--out", type=Path, default=None, help="data set folder")
    sy.add_argument("--seed", default="0", help="seed of the first image; image i uses S+i")
    sy.add_argument("--size", default="156x550", help="HxW, rows x cols (default 156x550)")

    ds = sub.add_parser("dataset", help="data set folders (images/ and labels/)")
    dsub = ds.add_subparsers(dest="dataset_command", required=True)
    dc = dsub.add_parser("check", help="check every image/label pair; print a summary")
    dc.add_argument("folder", type=Path, help="folder with images/ and labels/")

    tr = sub.add_parser("train", help="train the fusion network on a data set folder")
    tr.add_argument("data", type=Path, help="folder with images/ and labels/")
    tr.add_argument("--out", type=Path, required=True, help="run folder")
    tr.add_argument("--epochs", type=int, default=10)
    tr.add_argument("--batch-size", type=int, default=8)
    tr.add_argument("--input-size", default="64x224", help="HxW, multiples of 32")
    tr.add_argument("--input", choices=("feature", "gray"), default="feature",
                    help="claim-1 feature image (the patent's) or the plain gray image")
    tr.add_argument("--branches", choices=("both", "resnet50v2", "mobilenetv2"),
                    default="both", help="both backbones (the patent's) or one alone")
    tr.add_argument("--weights", type=Path, default=None,
                    help=".npz of backbone weights (default: random, BN-calibrated)")
    tr.add_argument("--no-calibrate", action="store_true",
                    help="keep the backbones' BN statistics as they are")
    tr.add_argument("--train-backbone", action="store_true",
                    help="train the backbones too (an extension: the patent freezes them; "
                         "no tap cache, each step runs them)")
    tr.add_argument("--init-from", type=Path, default=None, metavar="RUN",
                    help="start from the last checkpoint of another run (backbones and "
                         "decoder; any input size) instead of random, calibrated backbones")
    tr.add_argument("--validation", type=float, default=0.2, help="validation fraction")
    tr.add_argument("--learning-rate", type=float, default=1e-3)
    tr.add_argument("--learning-rate-step", type=_learning_rate_step, action="append",
                    default=[], metavar="EPOCH:RATE",
                    help="from EPOCH on, use RATE (repeatable; an extension: the patent keeps "
                         "0.001; a resumed run may add steps for epochs not yet trained)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--resume", action="store_true", help="continue the run in --out")
    tr.add_argument("--jobs", type=int, default=None, help="extraction processes")

    pr = sub.add_parser("predict", help="predict label images with a trained run")
    pr.add_argument("run", type=Path, help="run folder of refseg train")
    pr.add_argument("images", nargs="+", type=Path)
    pr.add_argument("--out", type=Path, required=True, help="output folder (one per image)")

    ev = sub.add_parser("evaluate", help="score a run on a data set (and compare runs)")
    ev.add_argument("run", type=Path, help="run folder of refseg train")
    ev.add_argument("data", type=Path, help="folder with images/ and labels/")
    ev.add_argument("--compare", type=Path, nargs="*", default=[],
                    help="more runs to score side by side (branches alone, gray input)")
    ev.add_argument("--out", type=Path, default=None,
                    help="write table.md, scores.json and panel.png here")

    go = sub.add_parser("golden", help="golden-file bundles for cross-checking other "
                                       "implementations")
    gsub = go.add_subparsers(dest="golden_command", required=True)
    gw = gsub.add_parser("write", help="write DIR/manifest.json and DIR/arrays.npz")
    gw.add_argument("folder", type=Path, help="bundle folder (created or replaced)")
    gc = gsub.add_parser("check", help="compare a candidate .npz with a bundle")
    gc.add_argument("folder", type=Path, help="bundle folder")
    gc.add_argument("candidate", type=Path, help=".npz keyed by the manifest's array names")
    gc.add_argument("--report", type=Path, default=None, help="write the rows as JSON here")
    gc.add_argument("--select", action="append", default=None, metavar="PATTERN",
                    help="check only arrays matching this shell pattern (repeatable)")
    gx = gsub.add_parser("weights", help="regenerate the bundle's network weights as .npz")
    gx.add_argument("folder", type=Path, help="bundle folder")
    gx.add_argument("destination", type=Path, help="the .npz weight file to write")
    return p


def _stems(paths: list[Path]) -> list[str]:
    stems = [p.stem for p in paths]
    seen = {}
    for p, s in zip(paths, stems):
        if s in seen:
            raise InputError(f"{p}: has the same name stem {s!r} as {seen[s]}; "
                             "outputs would collide")
        seen[s] = p
    return stems


@implements("claim5.feature_module")
def run_edges(images: list[Path], out: Path, sigma: float | None = None) -> list[Path]:
    """``refseg edges``: read every image (all are checked before anything is written), extract
    claim-1 features and write each image's outputs into ``out/<stem>/``.

    Parameters
    ----------
    images : list of Path
    out : Path
    sigma : float or None

    Returns
    -------
    list of Path
        The folders written.

    References
    ----------
    [0266]-[0268].
    """
    from refseg import features, imageio, report

    stems = _stems(images)
    loaded = [imageio.read_image(p) for p in images]
    kwargs = {} if sigma is None else {"sigma": sigma}
    results = [features.extract(img.pixels, **kwargs) for img in loaded]
    staging = StagedFolders(out)
    try:
        for stem, img, result in zip(stems, loaded, results):
            report.write_outputs(staging.folder(stem), img, result)
        staging.publish()
    except BaseException:
        staging.abandon()
        raise
    return [out / s for s in stems]


#: Largest image side ``refseg synth`` draws: far above the patent's 550x156, low enough that a
#: typo cannot ask for gigabytes.
SYNTH_MAX_SIDE = 8192
SYNTH_MANIFEST = "synth.json"


def _integer(text, name: str, minimum: int) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise InputError(f"{name}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise InputError(f"{name}: expected at least {minimum}, got {value}")
    return value


def _synth_size(text) -> tuple[int, int]:
    parts = str(text).lower().split("x")
    try:
        rows, cols = (int(v) for v in parts)
    except ValueError:
        raise InputError(f"--size: expected HxW (rows x cols) such as 156x550, "
                         f"got {text!r}") from None
    from refseg.synthetic import MIN_SIDE

    if min(rows, cols) < MIN_SIDE or max(rows, cols) > SYNTH_MAX_SIDE:
        raise InputError(f"--size: each side must be {MIN_SIDE}-{SYNTH_MAX_SIDE} pixels, "
                         f"got {rows}x{cols}")
    return rows, cols


@implements("claim5.acquisition_module", "claim1.step2.dataset")
def run_synth(out, count, seed=0, size="156x550") -> Path:
    """``refseg synth``: write a synthetic weld data set in the layout of
    :mod:`refseg.dataset`.

    Parameters
    ----------
    out : Path or None
        The data set folder; ``images/``, ``labels/`` and ``synth.json`` are written inside.
    count : int or str
        Number of image/label pairs, >= 1.
    seed : int or str
        Seed of the first image (>= 0); image i (``weld_<i>``) uses ``seed + i``.
    size : str or (rows, cols)
        ``"HxW"``, rows x cols, each side 32-8192; default 156x550 ([0202]).

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    InputError
        Bad arguments, or ``out`` already holds ``images/`` or ``labels/`` that ``refseg
        synth`` did not write (a hand-labelled data set is never overwritten).

    Notes
    -----
    Images are RGB PNGs (:func:`refseg.synthetic.weld_image`), labels RGB PNGs in the colours
    of [0263]. Both folders are staged in a hidden folder inside ``out`` and renamed into place
    when every file is written (replacing those of an earlier ``refseg synth``); then
    ``synth.json`` (seeds, size, each image's drawn parameters, refseg version) is written
    atomically. The same arguments give byte-identical files.

    References
    ----------
    [0201]-[0203], [0261]-[0263], [0266]-[0267].
    """
    import refseg
    from refseg import dataset, imageio, synthetic

    if out is None:
        raise InputError("--out: the data set folder is required")
    if count is None:
        raise InputError("--count: the number of images is required")
    count = _integer(count, "--count", 1)
    seed = _integer(seed, "--seed", 0)
    rows, cols = _synth_size(size) if isinstance(size, str) else (int(size[0]), int(size[1]))
    out = Path(out)
    ours = (out / SYNTH_MANIFEST).is_file()
    for name in (dataset.IMAGES_DIR, dataset.LABELS_DIR):
        if (out / name).exists() and not ours:
            raise InputError(f"{out / name}: exists and was not written by refseg synth "
                             f"(no {SYNTH_MANIFEST}); choose another --out")
    digits = max(5, len(str(count - 1)))
    staging = StagedFolders(out)
    records = []
    try:
        images = staging.folder(dataset.IMAGES_DIR)
        labels = staging.folder(dataset.LABELS_DIR)
        for i in range(count):
            sample = synthetic.weld_image(seed + i, (rows, cols))
            stem = f"weld_{i:0{digits}d}"
            imageio.write_png(images / f"{stem}.png", sample.rgb)
            dataset.write_label(labels / f"{stem}.png", sample.classes)
            records.append({"stem": stem, "seed": seed + i, "params": sample.params})
        staging.publish()
    except BaseException:
        staging.abandon()
        raise
    imageio.write_json(out / SYNTH_MANIFEST, {
        "generator": "refseg.synthetic.weld_image", "refseg_version": refseg.__version__,
        "count": count, "seed": seed, "size": {"rows": rows, "cols": cols},
        "classes": {"0": "contour", "1": "inside", "2": "outside"},
        "label_colours": {"contour": [255, 0, 0], "inside": [0, 255, 0],
                          "outside": [0, 0, 255]},
        "contour_half_width": synthetic.CONTOUR_HALF_WIDTH, "samples": records})
    return out


def _dataset_check(folder: Path) -> str:
    import numpy as np

    from refseg import dataset

    data = dataset.load_dataset(folder)
    sizes, counts = {}, np.zeros(3, dtype=np.int64)
    for sample in data:
        classes = dataset.read_label(sample.label_path)
        key = f"{classes.shape[1]}x{classes.shape[0]}"
        sizes[key] = sizes.get(key, 0) + 1
        counts += np.bincount(classes.ravel(), minlength=3)
    shares = ", ".join(f"{name} {100 * n / counts.sum():.1f} %"
                       for name, n in zip(("contour", "inside", "outside"), counts))
    size_text = ", ".join(f"{k} ({v})" for k, v in sorted(sizes.items()))
    return (f"{folder}: {len(data)} image/label pairs, all valid; sizes (width x height) "
            f"{size_text}; label pixels {shares}")


def _trace(write: bool) -> str:
    from refseg import trace

    registry = trace.load_registry()
    if not write:
        return (registry.source / trace.MATRIX_FILE).read_text(encoding="utf-8")
    tests_dir = registry.source.parent / "tests"
    if not tests_dir.is_dir():
        raise InputError(f"{tests_dir}: no tests folder; --write works in a source checkout")
    text = trace.render_matrix(registry, trace.code_citations(),
                               trace.scan_test_citations(tests_dir))
    (registry.source / trace.MATRIX_FILE).write_text(text, encoding="utf-8")
    return f"wrote {registry.source / trace.MATRIX_FILE}"


def _explain(element_id: str, golden_dir: Path | None = None) -> str:
    from refseg import trace

    registry = trace.load_registry()
    if element_id not in registry.elements:
        raise InputError(f"{element_id}: no such claim element (see `refseg trace`)")
    tests_dir = registry.source.parent / "tests"
    tests = trace.scan_test_citations(tests_dir) if tests_dir.is_dir() else None
    text = trace.explain(registry, element_id, trace.code_citations(), tests)
    if golden_dir is not None:
        from refseg import golden

        manifest, _ = golden.read_bundle(golden_dir)
        names = golden.pinned_elements(manifest).get(element_id, [])
        text += (f"\nGolden arrays in {golden_dir} ({len(names)}):\n"
                 + ("\n".join(f"  {n}" for n in names) if names else "  none"))
    return text


def _weights(args) -> str:
    from refseg import h5weights

    if args.weights_command == "convert":
        return h5weights.convert_h5(args.source, args.destination).text()
    return h5weights.inspect_npz(args.path).text()


def _model_summary(args) -> str:
    from refseg.models import ResMobileNet
    from refseg.models.summary import format_summary, parse_size

    size = parse_size(args.input_size)
    return format_summary(ResMobileNet(size), size, args.part)


def _demo(args) -> Path:
    from refseg.demo import DemoSettings, run_demo
    from refseg.models.summary import parse_size

    if args.count < 5 or args.test_count < 1 or args.epochs < 1:
        raise InputError("demo: --count must be >= 5, --test-count and --epochs >= 1")
    return run_demo(args.out, DemoSettings(
        count=args.count, test_count=args.test_count, epochs=args.epochs,
        input_hw=parse_size(args.input_size), seed=args.seed, jobs=args.jobs,
        train_backbone=args.train_backbone))


def _learning_rate_step(text: str) -> tuple[int, float]:
    try:
        epoch, rate = text.split(":")
        return int(epoch), float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected EPOCH:RATE, got {text!r}") from None


def _train(args) -> str:
    from refseg.models.decoder import BRANCHES
    from refseg.models.summary import parse_size
    from refseg.training import TrainConfig, train

    config = TrainConfig(
        epochs=args.epochs, batch_size=args.batch_size, input_hw=parse_size(args.input_size),
        input_kind=args.input, seed=args.seed, learning_rate=args.learning_rate,
        learning_rate_steps=tuple(args.learning_rate_step),
        validation_fraction=args.validation,
        branches=BRANCHES if args.branches == "both" else (args.branches,),
        weights=None if args.weights is None else str(args.weights),
        calibrate=not args.no_calibrate, train_backbone=args.train_backbone,
        init_from=None if args.init_from is None else str(args.init_from))
    history = train(args.data, args.out, config, resume=args.resume, jobs=args.jobs)
    return str(args.out / "metrics.jsonl") if history else str(args.out)


def _predict(args) -> str:
    from refseg.evaluation import run_predict

    done = run_predict(args.run, args.images, args.out)
    return "\n".join(f"{folder}  {seconds * 1e3:.0f} ms" for folder, seconds in done)


def _evaluate(args) -> str:
    from refseg import imageio
    from refseg.evaluation import comparison_panel, evaluate_runs, format_table

    rows, pairs, predictions = evaluate_runs(args.data, [args.run, *args.compare])
    table = format_table(rows)
    if args.out is not None:
        staging = StagedFolders(args.out)
        try:
            folder = staging.folder("evaluation")
            (folder / "table.md").write_text(table + "\n", encoding="utf-8")
            imageio.write_json(folder / "scores.json", [r.as_dict() for r in rows])
            imageio.write_png(folder / "panel.png", comparison_panel(pairs, predictions))
            staging.publish()
        except BaseException:
            staging.abandon()
            raise
    return table


def _golden(args) -> tuple[str, int]:
    from refseg import golden, imageio

    if args.golden_command == "write":
        done = golden.write_bundle(args.folder)
        return (f"{done.folder}: {done.arrays} arrays, {golden.ARRAYS} "
                f"{done.npz_bytes / 1e6:.1f} MB, in {done.seconds:.1f} s"), 0
    if args.golden_command == "weights":
        digest = golden.export_weights(args.folder, args.destination)
        return f"{args.destination}: network weights, sha256 {digest}", 0
    report = golden.check_bundle(args.folder, args.candidate, args.select)
    if args.report is not None:
        imageio.write_json(args.report, report.as_dict())
    return report.text(), 0 if report.passed else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``refseg`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "edges":
            for folder in run_edges(args.images, args.out, args.sigma):
                print(folder)
        elif args.command == "demo":
            print(_demo(args))
        elif args.command == "trace":
            print(_trace(args.write))
        elif args.command == "explain":
            print(_explain(args.element, args.golden))
        elif args.command == "weights":
            print(_weights(args))
        elif args.command == "model":
            print(_model_summary(args))
        elif args.command == "synth":
            out = run_synth(args.out, args.count, args.seed, args.size)
            print(f"{out}: {int(args.count)} synthetic weld images in {out / 'images'}, "
                  f"labels in {out / 'labels'}")
        elif args.command == "dataset":
            print(_dataset_check(args.folder))
        elif args.command == "train":
            print(_train(args))
        elif args.command == "predict":
            print(_predict(args))
        elif args.command == "evaluate":
            print(_evaluate(args))
        elif args.command == "golden":
            text, status = _golden(args)
            print(text)
            return status
    except InputError as exc:
        print(f"refseg: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"refseg: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        # outputs are staged or written atomically: what exists is whole (the last checkpoint)
        print("\nrefseg: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
