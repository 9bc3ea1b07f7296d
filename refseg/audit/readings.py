"""``refseg audit readings``: how much claim 1's outcome depends on each reading of a missing
formula.

Every alternative of :data:`refseg.claim1.alternatives.ALTERNATIVES` is computed, one at a
time against refseg's readings, on a fixed corpus (the golden bundle's three photographs and
40 synthetic welds); per alternative the audit reports the four weights and whether [0213]'s
order survives, whether the worked example [0107]-[0115] is still exact, how many feature-map
pixels change, how many feature maps are one operator's map, and how much of the labelled
contour the feature map keeps. Optionally (``--downstream``) it trains demo-sized networks on
the feature images of the alternatives that move the feature map most and of continuous edge
responses (:mod:`refseg.audit.downstream`).

The result is ``spec/sensitivity.md`` (regenerated in a checkout) or ``DIR/sensitivity.md``
and ``DIR/sensitivity.json`` (``--out DIR``, staged and published whole).
"""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy

from refseg import publish, registry
from refseg.audit import trace
from refseg.audit import network_inputs
from refseg.audit.network_inputs import marked_block
from refseg._version import __version__
from refseg.backend import cpu_model
from refseg.claim1.alternatives import ALTERNATIVES, BY_NAME, Variant, extract_variant, \
    worked_example
from refseg.claim1.operators import OPERATORS
from refseg.data.synthetic import weld_image
from refseg.errors import InputError
from refseg.golden.bundle_images import PHOTOS, shipped_photos
from refseg.run.config import DemoSettings
from refseg.run.metrics import contour_coverage
from refseg.data.synthetic_options import WELD_SHAPE

INFRASTRUCTURE = "the sensitivity audit of the claim-1 readings"

#: The file this audit generates, in ``spec/`` or in ``--out``.
SENSITIVITY_FILE = registry.SENSITIVITY_FILE
NUMBERS_FILE = "sensitivity.json"
#: Synthetic welds of the corpus (seeds), full and quick mode.
WELD_SEEDS = tuple(range(40))
QUICK_WELD_SEEDS = tuple(range(4))
#: The patent's weld weights ([0213]).
PATENT_WEIGHTS = registry.patent_weights(OPERATORS)
#: "Prewitt ~ Sobel" in [0213]'s order: their weights within this of each other (the
#: patent's gap is 0.0023).
SOBEL_PREWITT_GAP = 0.02
#: Alternatives trained downstream besides those that move the feature map most.
DOWNSTREAM_EXTRA = ("continuous-graded",)
#: How many of the alternatives that move the feature map most are trained downstream.
DOWNSTREAM_TOP = 3
#: The chosen readings' own row.
CHOSEN = "chosen"
#: What refseg reads for each reading audited (the row "chosen" of its table).
CHOSEN_TEXT = {
    "R-border": "reflect-101 (dcb|abcd|cba)",
    "R-gray": "BT.601 0.299 R + 0.587 G + 0.114 B, not rounded",
    "R-gauss": "sigma = 0.8 (OpenCV's rule for 3x3)",
    "R-binary": "binary maps, Otsu thresholds",
    "R-canny": "low = Otsu(Sobel magnitude), high = 2 x low, 8-connected hysteresis",
    "R-log": "4-neighbour Laplacian, jump > 2 x Otsu(|LoG|), negative side",
    "R-mean": "edge images 0/1",
    "R-std": "deviation about the gray-mean image, divisor M*N",
    "R-cv": "V_i = sigma_i / mu_i",
    "R-empty": "an empty map gets V = 0",
    "R-weights": "w_i = V_i / sum V",
    "R-final": "F = sum w_i X_i - 1.5",
}
#: Claim-1 readings with no alternative that this corpus can measure, and why.
NOT_AUDITED = {
    "R-input": "its choices (16-bit scaling, colour modes) concern files this corpus does not "
               "hold: every image is 8-bit RGB",
    "R-traverse": "no alternative: each pixel's decision depends on that pixel alone, so no "
                  "traversal order changes the feature map",
}
#: Readings audited downstream only (their alternatives change the network's input, not the
#: feature map): their section is rendered from trainings.
AUDITED_DOWNSTREAM = ("R-dataset",)
#: Markers of the sections the command keeps or the test compares.
QUICK_BEGIN, QUICK_END = "<!-- quick-check: begin -->", "<!-- quick-check: end -->"
#: The downstream block carries its numbers, so that a later regeneration renders it anew.
NUMBERS_BEGIN, NUMBERS_END = "<!-- downstream-numbers: ", " -->"
#: Test pixel accuracy that single runs move by between code versions (docs/experiments.md).
RUN_SPREAD = 0.02
#: A run whose best contour IoU is below this has not found the contour class.
CONTOUR_FOUND = 0.05
DOWN_BEGIN, DOWN_END = "<!-- downstream: begin -->", "<!-- downstream: end -->"


@dataclass(frozen=True)
class CorpusImage:
    """One image of the corpus: its name, RGB pixels, and class ids when labelled."""

    name: str
    rgb: np.ndarray
    classes: np.ndarray | None


def corpus(quick: bool = False) -> list[CorpusImage]:
    """The three photographs, then the synthetic welds (40, or 4 in quick mode) at the
    patent's 550x156."""
    photos, _ = shipped_photos()
    images = [CorpusImage(name, photos[name], None) for name in PHOTOS]
    for seed in (QUICK_WELD_SEEDS if quick else WELD_SEEDS):
        sample = weld_image(seed, WELD_SHAPE)
        images.append(CorpusImage(f"weld{seed}", sample.rgb, sample.classes))
    return images


def _variants() -> dict[str, Variant]:
    return {CHOSEN: Variant(), **{a.name: a.variant for a in ALTERNATIVES}}


def measure_image(image: CorpusImage) -> dict[str, dict]:
    """Every variant's numbers on one image: weights, feature-pixel share, changed share
    against the chosen readings, the operator whose map the feature map equals (or None),
    and the contour pixels kept (labelled images)."""
    out, chosen = {}, None
    for name, variant in _variants().items():
        r = extract_variant(image.rgb, variant)
        if chosen is None:
            chosen = r.feature_map
        fm = r.feature_map
        single = [k for k in OPERATORS
                  if np.array_equal(fm, (np.asarray(r.edges[k]) > 0).astype(np.uint8))]
        entry = {"weights": [r.weights[k] for k in OPERATORS], "feature": float(fm.mean()),
                 "changed": float(np.mean(fm != chosen)),
                 "single": single[0] if single else None,
                 "distance": patent_distance(r.weights),
                 "decides": deciding_operator(r.weights, variant.offset)}
        if image.classes is not None:
            entry["contour"] = list(contour_coverage(fm, image.classes))
        out[name] = entry
    return out


def patent_distance(weights) -> float:
    """How far four weights lie from [0213]'s: half the sum of the absolute differences (the
    share of the vote that would have to move; 0 equal, 1 disjoint)."""
    return 0.5 * sum(abs(float(weights[k]) - PATENT_WEIGHTS[k]) for k in OPERATORS)


def deciding_operator(weights, offset: float = 1.5) -> str | None:
    """The operator whose edge alone decides every pixel of a binary vote, or None.

    F = sum_i w_i X_i - offset >= 0 with X_i in {1, 2} (R-final) rises with each X_i, so one
    operator decides alone exactly when a pixel where it alone has an edge is an edge and a
    pixel where all but it have one is not: its edge map is then the feature map whatever the
    others find. Both cases are computed as the vote computes F (float64, in
    :data:`OPERATORS` order). [0213]'s weights never allow it (0.4124 < 0.5).
    """
    def final(x) -> float:
        total = 0.0
        for k in OPERATORS:
            total += float(weights[k]) * x[k]
        return total - offset

    for k in OPERATORS:
        alone = final({i: 2.0 if i == k else 1.0 for i in OPERATORS})
        without = final({i: 1.0 if i == k else 2.0 for i in OPERATORS})
        if alone >= 0 > without:
            return k
    return None


def measure(images, log=None) -> dict[str, dict[str, dict]]:
    """{image name: :func:`measure_image`} over the corpus."""
    results = {}
    for i, image in enumerate(images, start=1):
        if log is not None:
            print(f"\rclaim 1: image {i}/{len(images)} ({image.name})", end="", file=log,
                  flush=True)
        results[image.name] = measure_image(image)
    if log is not None:
        print(file=log)
    return results


def _in_order(w) -> bool:
    c, s, p, log = w
    return c > log > max(s, p) and abs(s - p) <= SOBEL_PREWITT_GAP


def summarise(results: dict, labelled: list[str]) -> dict[str, dict]:
    """Per variant, over the images of ``results``: mean weights over the labelled ones (all
    when none is), [0213]'s order on them, the worked example, the changed share (median,
    worst and where), the feature share (median), the single-operator maps, the contour
    kept (pooled)."""
    names = list(results)
    welds = [n for n in names if n in labelled] or names
    out = {}
    for variant_name, variant in _variants().items():
        rows = {n: results[n][variant_name] for n in names}
        weights = np.mean([rows[n]["weights"] for n in welds], axis=0)
        changed = [rows[n]["changed"] for n in names]
        worst = max(names, key=lambda n: (rows[n]["changed"], n))
        singles = Counter(rows[n]["single"] for n in names if rows[n]["single"])
        deciders = Counter(rows[n]["decides"] for n in names if rows[n]["decides"])
        covered = sum(rows[n]["contour"][0] for n in names if "contour" in rows[n])
        total = sum(rows[n]["contour"][1] for n in names if "contour" in rows[n])
        out[variant_name] = {
            "weights": [float(w) for w in weights],
            "order": sum(_in_order(rows[n]["weights"]) for n in welds), "order_of": len(welds),
            "example": worked_example(variant),
            "changed_median": float(np.median(changed)), "changed_worst": float(max(changed)),
            "worst_image": worst, "feature_median": float(np.median(
                [rows[n]["feature"] for n in names])),
            "single": sum(singles.values()), "single_by": dict(sorted(singles.items())),
            "distance": float(np.median([rows[n]["distance"] for n in welds])),
            "decides": sum(deciders.values()), "decides_by": dict(sorted(deciders.items())),
            "images": len(names), "contour": covered / total if total else None}
    return out


# ------------------------------------------------------------------------------ rendering
COLUMNS = ("| alternative | weights C / S / P / L | [0213] order | [0213] distance | "
           "[0107]-[0115] | feature px | changed: median | changed: worst | one operator "
           "decides | single-operator maps | contour kept |\n"
           "|---|---|---|---:|---|---:|---:|---:|---|---|---:|")


def _pct(x, digits=2) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f} %"


def _count_by(total, by, images) -> str:
    named = ", ".join(f"{k} {n}" for k, n in by.items())
    return f"{total}/{images}" + (f" ({named})" if named else "")


def _row(label, s) -> str:
    weights = " / ".join(f"{w:.3f}" for w in s["weights"])
    single = _count_by(s["single"], s["single_by"], s["images"])
    decides = _count_by(s["decides"], s["decides_by"], s["images"])
    worst = (f"{_pct(s['changed_worst'])} ({s['worst_image']})" if s["changed_worst"] > 0
             else _pct(0.0))
    label = label.replace("|", "\\|")  # a pipe inside a cell would split it
    return (f"| {label} | {weights} | {s['order']}/{s['order_of']} | {s['distance']:.3f} | "
            f"{'exact' if s['example'] else 'fails'} | {_pct(s['feature_median'])} | "
            f"{_pct(s['changed_median'])} | {worst} | {decides} | {single} | "
            f"{_pct(s['contour'], 1)} |")


def _reading_titles() -> dict[str, str]:
    text = (registry.spec_dir() / "readings.md").read_text(encoding="utf-8")
    titles = {}
    for line in text.splitlines():
        if line.startswith("## R-"):
            rid, _, title = line[3:].partition(":")
            titles[rid.strip()] = title.strip()
    return titles


def slug(heading: str) -> str:
    """The anchor a Markdown heading gets (GitHub's rule: lower case, punctuation dropped,
    spaces to hyphens)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def audited_readings() -> list[str]:
    """The readings with alternatives, in the order of :data:`ALTERNATIVES`."""
    return list(dict.fromkeys(a.reading for a in ALTERNATIVES))


def reading_tables(summary: dict) -> str:
    """One table per audited reading: the chosen reading's row, then each alternative's."""
    titles = _reading_titles()
    parts = []
    for rid in audited_readings():
        title = titles.get(rid, "")
        parts += [f"### {rid}", "",
                  f"{title} ([readings.md](readings.md#{slug(f'{rid}: {title}')})).", "",
                  COLUMNS, _row(f"chosen: {CHOSEN_TEXT[rid]}", summary[CHOSEN])]
        parts += [_row(f"{a.text} (`{a.name}`)", summary[a.name])
                  for a in ALTERNATIVES if a.reading == rid]
        parts.append("")
    return "\n".join(parts)


def quick_section(summary: dict) -> str:
    """The quick-check block (markers included): every row on the quick corpus."""
    lines = [QUICK_BEGIN,
             "The same measures on the quick corpus (the three photographs and welds "
             f"{QUICK_WELD_SEEDS[0]}-{QUICK_WELD_SEEDS[-1]}). `refseg audit readings --quick` "
             "prints this block; `tests/audit/test_audit.py` recomputes it with the "
             "installed code and fails when it differs.", "",
             COLUMNS.replace("| alternative |", "| reading: alternative |", 1),
             _row("chosen readings", summary[CHOSEN])]
    lines += [_row(f"{a.reading}: `{a.name}`", summary[a.name]) for a in ALTERNATIVES]
    lines.append(QUICK_END)
    return "\n".join(lines)


def downstream_choice(summary: dict) -> list[str]:
    """The alternatives trained downstream: the :data:`DOWNSTREAM_TOP` that move the feature
    map most (median changed share, then worst; the continuous kinds, trained on their own,
    left out), then :data:`DOWNSTREAM_EXTRA`."""
    ranked = sorted((a for a in ALTERNATIVES if a.variant.edge_kind == "binary"),
                    key=lambda a: (-summary[a.name]["changed_median"],
                                   -summary[a.name]["changed_worst"], a.name))
    return [a.name for a in ranked[:DOWNSTREAM_TOP]] + list(DOWNSTREAM_EXTRA)


def downstream_block(result: dict | None, commit: str, command: str) -> str:
    """The downstream block (markers included): the table of the runs, or a note that they
    were not run."""
    if result is None:
        return "\n".join([DOWN_BEGIN, "Not measured.", "", "Downstream: not measured.",
                          DOWN_END])
    s = result["settings"]
    demo = DemoSettings()
    reduced = [f"{what} {s[key]} (the demo's {getattr(demo, key)})"
               for key, what in (("count", "training welds"), ("test_count", "test welds"),
                                 ("epochs", "epochs")) if s[key] < getattr(demo, key)]
    lines = [DOWN_BEGIN,
             f"Measured at commit {commit} by `{command}`: the fusion network with frozen "
             "random backbones (batch norm calibrated, R-frozen), trained on "
             f"{s['count']} synthetic welds (seeds {s['seed']}-{s['seed'] + s['count'] - 1}; "
             f"80 % training, 20 % validation) for {s['epochs']} epochs, batch "
             f"{s['batch_size']}, input {s['input_hw'][0]}x{s['input_hw'][1]}, Adam 0.001, "
             f"seed {s['seed']}; scored on {s['test_count']} test welds (seeds "
             f"{s['test_seeds'][0]}-{s['test_seeds'][1]})"
             + (": the settings of `refseg demo`." if not reduced else
                ". Reduced from the demo's settings to fit the time the six trainings could "
                "take on the shared 2-core machine they ran on: " + ", ".join(reduced)
                + "; the networks are therefore further from convergence than the demo's, "
                "and the comparison is between runs of equal budget."), "",
             "| run | input | validation accuracy | test pixel accuracy | IoU contour | "
             "IoU inside | IoU outside | mIoU | boundary F1 | training |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["runs"]:
        ious = " | ".join("-" if v is None else f"{v:.4f}" for v in r["iou"])
        what = ("gray image" if r["input"] == "gray" else
                "feature image, refseg's readings" if r["reading"] is None else
                f"feature image, `{r['reading']}` ({BY_NAME[r['reading']].reading})")
        lines.append(f"| {r['name']} | {what} | {r['val_pixel_accuracy']:.4f} | "
                     f"{r['pixel_accuracy']:.4f} | {ious} | {r['miou']:.4f} | "
                     f"{r['boundary_f1']:.4f} | {r['seconds'] / 60:.1f} min |")
    runs = {r["name"]: r for r in result["runs"]}
    gray, chosen = runs["gray input"], runs["chosen readings"]
    features = [r for r in result["runs"] if r["input"] == "feature"]
    best = max(features, key=lambda r: r["pixel_accuracy"])
    margin = gray["pixel_accuracy"] + RUN_SPREAD
    above = [r["name"] for r in features if r["pixel_accuracy"] > margin]
    contour = max((r["iou"][0] or 0.0) for r in result["runs"])
    lines += ["", f"Downstream: test pixel accuracy {chosen['pixel_accuracy']:.2%} with "
              f"refseg's readings, {gray['pixel_accuracy']:.2%} with the gray image; the best "
              f"feature input is {best['name']} ({best['pixel_accuracy']:.2%}, contour IoU "
              f"{best['iou'][0] or 0:.4f}). "
              + (f"Feature inputs more than {RUN_SPREAD:.0%} above the gray image: "
                 f"{', '.join(above)}." if above else
                 f"No feature input is more than {RUN_SPREAD:.0%} (the spread of single runs) "
                 "above the gray image, so no reading is shown to let the feature image help "
                 "as [0121] claims in this setting.")
              + (f" No run finds the contour class (best contour IoU {contour:.4f}): the "
                 "networks are near the class prior, and this budget does not tell the inputs "
                 "apart." if contour < CONTOUR_FOUND else ""),
              f"Single runs move by about {RUN_SPREAD:.0%} between code versions (float32 "
              "rounding, amplified by training; docs/experiments.md): differences below that "
              "are not resolved by one run each.",
              f"{NUMBERS_BEGIN}{json.dumps({**result, 'commit': commit, 'command': command})}"
              f"{NUMBERS_END}", DOWN_END]
    return "\n".join(lines)


def closing_note(summary: dict, downstream_text: str, dataset_text: str = "") -> str:
    """The closing note: the readings whose choice changes the outcome most, what the
    patent's order and example tolerate, how close the weights come to [0213]'s, the contour
    kept, and the downstream lines."""
    by_reading = {}
    for a in ALTERNATIVES:
        s = summary[a.name]
        best = by_reading.get(a.reading)
        if best is None or s["changed_median"] > summary[best]["changed_median"]:
            by_reading[a.reading] = a.name
    ranked = sorted(by_reading.items(), key=lambda kv: -summary[kv[1]]["changed_median"])
    chosen = summary[CHOSEN]
    most = "; ".join(f"{rid} (`{name}`: {_pct(summary[name]['changed_median'])} of the pixels "
                     f"change, median; worst {_pct(summary[name]['changed_worst'])})"
                     for rid, name in ranked[:5])
    lost = [a.name for a in ALTERNATIVES
            if summary[a.name]["order"] < chosen["order"] / 2]
    failing = [a.name for a in ALTERNATIVES if not summary[a.name]["example"]]
    idle = [a.name for a in ALTERNATIVES if summary[a.name]["changed_worst"] == 0]
    covered = [(summary[a.name]["contour"], a.name) for a in ALTERNATIVES
               if summary[a.name]["contour"] is not None]
    high, low = max(covered), min(covered)
    distances = [(summary[a.name]["distance"], a.name) for a in ALTERNATIVES]
    near, far = min(distances), max(distances)
    block = downstream_text.splitlines()
    first = next((i for i, line in enumerate(block) if line.startswith("Downstream:")), None)
    down = ("Downstream: not measured." if first is None else " ".join(
        line for line in block[first:] if line and not line.startswith("<!--")))
    return "\n".join([
        "## Closing note", "",
        f"- The readings whose choice changes the feature map most: {most}.",
        f"- [0213]'s order (Canny > LoG > Prewitt ~ Sobel) holds on {chosen['order']} of "
        f"{chosen['order_of']} welds with refseg's readings; fewer than half as many with: "
        + (", ".join(f"`{n}` ({summary[n]['order']})" for n in lost) or "none") + ".",
        "- The worked example [0107]-[0115] is exact under every alternative but: "
        + (", ".join(f"`{n}`" for n in failing) or "none")
        + " (only the vote's choices can break it: the example gives its weights).",
        f"- Contour pixels kept: {_pct(chosen['contour'], 1)} with refseg's readings; most "
        f"with `{high[1]}` ({_pct(high[0], 1)}), fewest with `{low[1]}` "
        f"({_pct(low[0], 1)}).",
        f"- [0213]'s values: refseg's readings lie {chosen['distance']:.3f} from them (median "
        f"over the welds); closest `{near[1]}` ({near[0]:.3f}), farthest `{far[1]}` "
        f"({far[0]:.3f}). One operator decides alone on {chosen['decides']} of "
        f"{chosen['images']} images with refseg's readings (never with [0213]'s weights).",
        f"- Single-operator feature maps: {chosen['single']} of {chosen['images']} images with "
        "refseg's readings.",
        "- No pixel changes on any image under: "
        + (", ".join(f"`{n}`" for n in idle) or "none") + ".",
        f"- {down}",
        f"- {network_inputs.closing_line(dataset_text)}", ""])


def _machine() -> str:
    model = cpu_model()
    return (f"{platform.system()} {platform.machine()}" + (f", {model}" if model else "")
            + f", {os.cpu_count()} cores; Python {platform.python_version()}, NumPy "
            f"{np.__version__}, SciPy {scipy.__version__}, refseg {__version__}")


def _commit(folder: Path | None) -> str:
    """The checkout's commit (short), with "+ uncommitted changes" when tracked files
    differ from it; "unknown" outside a git checkout."""
    if folder is None:
        return "unknown"
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes" if dirty else "")


def render(summary: dict, quick_summary: dict, downstream_text: str, dataset_text: str, *,
           quick: bool, commit: str) -> str:
    """The whole ``sensitivity.md``."""
    seeds = QUICK_WELD_SEEDS if quick else WELD_SEEDS
    count = len(seeds) + len(PHOTOS)
    lines = [
        "# Sensitivity of claim 1 to the readings of its missing formulas", "",
        "Generated by `refseg audit readings`" + (" --quick" if quick else "")
        + ": in a checkout it rewrites `spec/sensitivity.md` (keeping the downstream block "
        "unless `--downstream` is given); `--out DIR` writes `sensitivity.md` and "
        "`sensitivity.json` (every number, per image) there instead. Do not edit by hand.", "",
        f"- Corpus: the golden bundle's three photographs ({', '.join(PHOTOS)}; 160x224 crops "
        "of scikit-image's data, `refseg/golden/photos/`) and "
        f"{len(seeds)} synthetic welds (`refseg.data.synthetic.weld_image`, seeds "
        f"{seeds[0]}-{seeds[-1]}, {WELD_SHAPE[1]}x{WELD_SHAPE[0]}, the patent's size): "
        f"{count} images; only the welds have labels."
        + (" This is the quick mode's corpus." if quick else
           f" Quick mode (`--quick`): the photographs and welds {QUICK_WELD_SEEDS[0]}-"
           f"{QUICK_WELD_SEEDS[-1]} (the section *Quick check*, which the tests recompute)."),
        f"- Claim-1 tables computed at commit {commit} on {_machine()}.",
        "- Each alternative changes one reading and keeps every other (the code: "
        "`refseg/claim1/alternatives.py`, whose default variant equals "
        "`refseg.claim1.features.extract` bit for bit).", "",
        "Columns:", "",
        "- *weights C / S / P / L*: mean of w_Canny, w_Sobel, w_Prewitt, w_LoG over the welds "
        f"([0213]: {' / '.join(f'{PATENT_WEIGHTS[k]:.4f}' for k in OPERATORS)}).",
        "- *[0213] order*: welds on which w_C > w_L > max(w_S, w_P) and w_S, w_P lie within "
        f"{SOBEL_PREWITT_GAP} of each other (the patent's gap is 0.0023).",
        "- *[0213] distance*: how far the weights lie from [0213]'s values, half the sum of "
        "the four absolute differences (the share of the vote that would have to move: 0 "
        "equal, 1 disjoint), median over the welds.",
        "- *[0107]-[0115]*: the worked example with the text's weights 0.4 / 0.2 / 0.2 / 0.2: "
        "all four positions decided as the text says (exact) or not.",
        "- *feature px*: median share of feature pixels per image.",
        "- *changed*: share of feature-map pixels that differ from the map of refseg's "
        "readings: median over the images, and the worst image.",
        "- *one operator decides*: images on which one operator's weight alone reaches the "
        "vote's quorum (offset - 1, one half for refseg's 1.5) and the other three together "
        "do not, so that its edge map is the feature map whatever the others find (by "
        f"operator; [0213]'s weights never allow it: {max(PATENT_WEIGHTS.values()):.4f} < 0.5).",
        "- *single-operator maps*: images whose feature map equals one operator's edge map "
        "exactly (by operator): those of the previous column, and maps equal by chance.",
        "- *contour kept*: share of the welds' labelled contour pixels within 1 pixel "
        "(4-neighbourhood) of a feature pixel, pooled over the welds (the demo measures 61 % "
        "on its first 20 training welds).", "",
        "## Claim 1: each reading against its alternatives", "",
        reading_tables(summary),
        "### Not audited", "",
        *(f"- {rid}: {why}." for rid, why in NOT_AUDITED.items()),
        "- The readings of the network and its training (claim 1's steps 3-4, claims 2-4): "
        "outside this audit, which measures the feature extraction; the downstream runs "
        "below keep them fixed.", "",
        "## Downstream: does any reading let the feature image help?", "",
        "The single-seed screen that chose the claim-1 readings paired in *R-dataset* below. "
        f"Runs: the gray input, refseg's readings, the {DOWNSTREAM_TOP} alternatives that move "
        "the feature map most (median changed share; the continuous kinds left out) and "
        "continuous edge responses (`continuous-graded`: the network gets "
        "sum_i w_i E_i in [0, 1] instead of the binary feature map). Kept as measured; "
        "`--downstream` now trains the grid of *R-dataset*, whose `feature` rows repeat these "
        "runs over seeds.", "",
        downstream_text, "",
        network_inputs.section_intro(),
        dataset_text, "",
        closing_note(summary, downstream_text, dataset_text),
        "## Quick check", "",
        quick_section(quick_summary), ""]
    return "\n".join(lines)


def shipped_quick_section(text: str) -> str | None:
    """The quick-check block of a ``sensitivity.md`` text (markers included), or None."""
    return marked_block(text, QUICK_BEGIN, QUICK_END)


def quick_summary_of(results: dict, images) -> dict:
    """:func:`summarise` over the quick corpus's images of a (full or quick) measurement."""
    quick = {im.name for im in images
             if im.classes is None or int(im.name[4:]) in QUICK_WELD_SEEDS}
    subset = {n: r for n, r in results.items() if n in quick}
    return summarise(subset, [im.name for im in images if im.classes is not None])


def run_audit(out=None, *, quick: bool = False, downstream: bool = False, jobs=None,
              count=None, test_count=None, epochs=None, seeds=None, record=None,
              log=sys.stderr) -> str:
    """``refseg audit readings``; returns the line (or, ``quick`` without ``out``, the
    quick-check block) to print.

    Parameters
    ----------
    out : path or None
        Write ``sensitivity.md`` and ``sensitivity.json`` into this folder, staged and
        published together. None: rewrite ``spec/sensitivity.md`` of the source checkout
        (the working folder or the package's), or with ``quick`` print the quick-check
        block and write nothing.
    quick : bool
        The quick corpus (3 photographs, 4 welds) and, with ``downstream``, tiny trainings.
    downstream : bool
        Also train the R-dataset grid (:func:`refseg.audit.downstream.run_grid`): every
        input kind with refseg's and the paired claim-1 readings, and the gray input, at
        each of ``seeds``.
    jobs : int or None
        Extraction processes of the trainings.
    count, test_count, epochs : int or None
        Training welds, test welds and epochs of the trainings, in place of the demo's (or,
        with ``quick``, the quick mode's); the file says when they are fewer than the demo's.
    seeds : sequence of int or None
        Training seeds of the grid (default :data:`refseg.audit.downstream.DEFAULT_SEEDS`).
    record : path or None
        Record the grid's runs in this file as they finish, and skip those it already holds
        (a killed grid resumes). Without ``downstream``: render the R-dataset section from
        the runs of ``seeds`` that the record holds, training nothing. None: a temporary
        record.
    """
    checkout = trace.checkout_folder()
    out, seeds, settings = _checked_options(out, quick, downstream, checkout, seeds, record,
                                            jobs=jobs, count=count, test_count=test_count,
                                            epochs=epochs)
    images = corpus(quick)
    results = measure(images, log)
    summary = summarise(results, [im.name for im in images if im.classes is not None])
    quick_summary = quick_summary_of(results, images)
    if out is None and quick:
        return quick_section(quick_summary)
    commit = _commit(checkout)
    command = ("refseg audit readings" + (" --quick" if quick else "") + " --downstream --seeds "
               + ",".join(map(str, seeds)))
    target = None if out is not None else checkout / "spec" / SENSITIVITY_FILE
    previous = target.read_text(encoding="utf-8") if target and target.is_file() else ""
    screen, screen_numbers = network_inputs.kept_block(
        previous, DOWN_BEGIN, DOWN_END, (NUMBERS_BEGIN, NUMBERS_END), downstream_block)
    if screen is None:
        screen = downstream_block(None, commit, command)
    dataset, grid = _dataset_section(previous, downstream, settings, seeds, record, summary,
                                     commit, command, log)
    text = render(summary, quick_summary, screen, dataset, quick=quick, commit=commit)
    if target is not None:
        if previous == text:
            return f"{target}: up to date"
        publish.write_text(target, text)
        return f"wrote {target}"
    with publish.staged_folders(out) as staging:
        publish.write_text(staging.root / SENSITIVITY_FILE, text)
        publish.write_json(staging.root / NUMBERS_FILE, {
            "corpus": [im.name for im in images], "quick": quick, "commit": commit,
            "machine": _machine(),
            "alternatives": {a.name: {"reading": a.reading, "text": a.text,
                                      "changes": a.variant.changes()} for a in ALTERNATIVES},
            "per_image": results, "summary": summary, "quick_summary": quick_summary,
            "downstream": screen_numbers, "r_dataset": grid})
    return f"{out / SENSITIVITY_FILE}, {out / NUMBERS_FILE}"


def _checked_options(out, quick, downstream, checkout, seeds, record, **sizes):
    """The output folder (checked), the seeds and the trainings' settings of
    :func:`run_audit`, every option refused before any work; ``sizes``: jobs, count,
    test_count and epochs, None for the mode's own."""
    from refseg.audit.downstream import grid_settings

    if out is not None:
        out = publish.check_output_folder(out)
    elif quick and downstream:
        raise InputError("audit readings: --quick --downstream needs --out (quick trainings "
                         "do not belong in spec/sensitivity.md)")
    elif not quick and checkout is None:
        raise InputError(f"{Path.cwd()}: not a refseg source checkout (no spec/registry.toml "
                         "and tests/conftest.py); give --out DIR")
    return (out, *grid_settings(quick, seeds, record, **sizes))


def _dataset_section(previous, downstream, settings, seeds, record, summary, commit, command,
                     log):
    """The R-dataset section and its numbers: trained now (``downstream``), rendered from the
    runs ``record`` holds, or kept from the ``previous`` file."""
    if downstream or record is not None:
        from refseg.audit.downstream import recorded_grid, train_grid

        grid = (train_grid(settings, seeds, downstream_choice(summary), record, commit, log)
                if downstream else recorded_grid(settings, seeds, record))
        grid["machine"] = _machine()
    else:
        dataset, grid = network_inputs.kept_block(
            previous, network_inputs.BEGIN, network_inputs.END,
            (network_inputs.NUMBERS_BEGIN, network_inputs.NUMBERS_END), network_inputs.block)
        if dataset is not None:
            return dataset, grid
    return network_inputs.block(grid, commit, command), grid
