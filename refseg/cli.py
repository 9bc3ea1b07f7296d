"""The ``refseg`` command line.

``refseg edges IMAGE... --out DIR``   claim-1 feature extraction, every intermediate written out
``refseg demo [--out DIR]``           the main job (today: claim 1 on synthetic weld images)
``refseg trace [--write]``            print (or regenerate) the traceability matrix
``refseg explain ID``                 one claim element: text, readings, functions, tests
``refseg weights convert FILE.h5 OUT.npz``  Keras HDF5 weights to refseg's .npz weight file
``refseg weights inspect FILE.npz``   the keys of a weight file against the expected weights
``refseg model summary [--input-size HxW]``  every layer of the fusion network, with totals

Bad input ends with one line on stderr naming the file and the problem, exit status 2, and no
output left behind: results are staged in a hidden folder inside ``--out`` and renamed into
place only when complete.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from refseg.errors import InputError
from refseg.imageio import default_mode
from refseg.trace import implements

EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="refseg", description=(
        "Reference implementation of the image semantic segmentation method of patent "
        "CN114419081B."))
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("edges", help="claim-1 feature extraction of images")
    e.add_argument("images", nargs="+", type=Path, help="image files (any format Pillow reads)")
    e.add_argument("--out", type=Path, required=True, help="output folder (one subfolder each)")
    e.add_argument("--sigma", type=float, default=None, help="Gaussian sigma (default 0.8)")

    d = sub.add_parser("demo", help="the main job: claim 1 on synthetic weld images")
    d.add_argument("--out", type=Path, default=Path("demo-out"), help="report folder")
    d.add_argument("--count", type=int, default=4, help="number of synthetic welds")
    d.add_argument("--seed", type=int, default=0, help="seed of the first weld")

    t = sub.add_parser("trace", help="print the traceability matrix")
    t.add_argument("--write", action="store_true",
                   help="regenerate spec/traceability.md from the code and tests (checkout only)")

    x = sub.add_parser("explain", help="explain one claim element")
    x.add_argument("element", help="claim-element ID, e.g. claim1.step2.cv")

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
    return p


class _Staging:
    """Stage a set of output folders inside ``out``; publish them only when all are done."""

    def __init__(self, out: Path):
        self.out = out
        self.created_out = not out.exists()
        if out.exists() and not out.is_dir():
            raise InputError(f"{out}: exists and is not a folder")
        out.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix=".refseg-staging-", dir=out))

    def folder(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(mode=default_mode(folder=True))
        return path

    def publish(self) -> None:
        for staged in sorted(self.root.iterdir()):
            final = self.out / staged.name
            if final.exists():
                old = self.root.with_name(self.root.name + ".old")
                final.rename(old)
                staged.rename(final)
                shutil.rmtree(old)
            else:
                staged.rename(final)
        self.root.rmdir()

    def abandon(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if self.created_out and self.out.exists() and not any(self.out.iterdir()):
            self.out.rmdir()


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
    staging = _Staging(out)
    try:
        for stem, img, result in zip(stems, loaded, results):
            report.write_outputs(staging.folder(stem), img, result)
        staging.publish()
    except BaseException:
        staging.abandon()
        raise
    return [out / s for s in stems]


@implements("claim1.step1.acquire", "claim5.feature_module")
def run_demo(out: Path, count: int = 4, seed: int = 0) -> Path:
    """``refseg demo``: draw synthetic welds, run claim-1 extraction on each, and write a report
    folder with the inputs, labels, every edge output and an ``index.md`` summary.

    Parameters
    ----------
    out : Path
    count : int
        Number of weld images, >= 1.
    seed : int
        Seed of the first image; image i uses ``seed + i``.

    Returns
    -------
    Path
        ``out / "index.md"``.

    References
    ----------
    [0201]-[0214].
    """
    from refseg import features, imageio, report, synthetic
    from refseg.operators import OPERATORS

    if count < 1:
        raise InputError(f"--count: expected at least 1, got {count}")
    staging = _Staging(out)
    rows = []
    try:
        for i in range(count):
            sample = synthetic.weld_image(seed + i)
            name = f"weld_{seed + i:04d}"
            folder = staging.folder(name)
            imageio.write_png(folder / "input.png", sample.rgb)
            imageio.write_png(folder / "label.png", sample.label_rgb)
            start = time.perf_counter()
            result = features.extract(sample.rgb)
            elapsed = time.perf_counter() - start
            loaded = imageio.LoadedImage(sample.rgb, f"synthetic seed {seed + i}", "RGB", 8)
            report.write_outputs(folder, loaded, result)
            rows.append((name, result, elapsed))
        lines = ["# refseg demo: claim 1 on synthetic weld images", "",
                 "Each row: a synthetic 550x156 weld image (seed in the name), the operator weights",
                 "of claim 1 ([0213] reports 0.4124, 0.1316, 0.1339, 0.3221 on the patent's weld),",
                 "and the share of pixels in the feature map. Panels: `<name>/panel.png`.", "",
                 "| image | Canny | Sobel | Prewitt | LoG | feature px | time (ms) |",
                 "|---|---|---|---|---|---|---|"]
        for name, result, elapsed in rows:
            w = " | ".join(f"{result.weights[k]:.4f}" for k in OPERATORS)
            lines.append(f"| [{name}]({name}/panel.png) | {w} | "
                         f"{result.feature_map.mean():.2%} | {elapsed * 1e3:.1f} |")
        lines += ["", "Claim elements: gray `claim1.step2.gray`, Gaussian `claim1.step2.gauss`, "
                  "operators `claim1.step2.edges.*`, weights `claim1.step2.weights`, vote "
                  "`claim1.step2.final_weight` / `claim1.step2.decision`. "
                  "`refseg explain ID` tells more.", ""]
        index = staging.root / "index.md"
        index.write_text("\n".join(lines), encoding="utf-8")
        staging.publish()
    except BaseException:
        staging.abandon()
        raise
    return out / "index.md"


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


def _explain(element_id: str) -> str:
    from refseg import trace

    registry = trace.load_registry()
    if element_id not in registry.elements:
        raise InputError(f"{element_id}: no such claim element (see `refseg trace`)")
    tests_dir = registry.source.parent / "tests"
    tests = trace.scan_test_citations(tests_dir) if tests_dir.is_dir() else None
    return trace.explain(registry, element_id, trace.code_citations(), tests)


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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``refseg`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "edges":
            for folder in run_edges(args.images, args.out, args.sigma):
                print(folder)
        elif args.command == "demo":
            print(run_demo(args.out, args.count, args.seed))
        elif args.command == "trace":
            print(_trace(args.write))
        elif args.command == "explain":
            print(_explain(args.element))
        elif args.command == "weights":
            print(_weights(args))
        elif args.command == "model":
            print(_model_summary(args))
    except InputError as exc:
        print(f"refseg: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"refseg: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
