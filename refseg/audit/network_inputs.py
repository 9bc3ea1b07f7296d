"""The R-dataset section of ``spec/sensitivity.md``: what the network sees, judged over seeds.

:func:`refseg.audit.downstream.run_grid` trains every input kind of :mod:`refseg.data.kinds`
(each with refseg's claim-1 readings and with the paired ones) at several training seeds, and
the gray input at the same seeds. This module turns those runs into the section: per input its
mean and spread over the seeds, and per input the paired difference to the gray input of the
same seed with a t interval over the seeds, for pixel accuracy, contour IoU and boundary F1;
then one sentence on [0121] that says what the intervals support.
"""
from __future__ import annotations

import json

import numpy as np
from scipy import stats

from refseg.data.kinds import DESCRIPTIONS, FEATURE_KINDS, GRAY, INPUT_KINDS, MASK_RADIUS
from refseg.run.config import DemoSettings

INFRASTRUCTURE = "the R-dataset section of the sensitivity audit"

#: Coverage of the paired t intervals.
CONFIDENCE = 0.95
#: The measures the section reports, with their labels: key of a run's record -> label.
MEASURES = {"pixel_accuracy": "pixel accuracy", "contour_iou": "contour IoU",
            "boundary_f1": "boundary F1"}
#: Markers of the section's block and of the numbers it carries.
BEGIN, END = "<!-- r-dataset: begin -->", "<!-- r-dataset: end -->"
NUMBERS_BEGIN, NUMBERS_END = "<!-- r-dataset-numbers: ", " -->"
#: How the block's sentence on [0121] begins (the claim chart quotes it).
SENTENCE_START = "[0121] at the demo's size"


def _value(run: dict, measure: str) -> float:
    if measure == "contour_iou":
        return run["iou"][0] or 0.0
    return run[measure]


def paired_interval(differences, confidence: float = CONFIDENCE) -> dict:
    """Mean, standard deviation (divisor n - 1) and the two-sided t interval of the mean of
    paired differences; sd and interval None for fewer than two pairs.

    The interval is mean -/+ t_{(1 + confidence) / 2, n - 1} sd / sqrt(n): Student's t for
    the mean of n paired differences, assuming them independent and roughly normal.
    """
    d = np.asarray(differences, dtype=np.float64)
    n = len(d)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "low": None, "high": None}
    mean = float(d.mean())
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "low": None, "high": None}
    sd = float(d.std(ddof=1))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * sd / np.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "low": mean - half, "high": mean + half}


def _arms(runs) -> list[tuple[str, str | None]]:
    """The (kind, reading) pairs of the runs in a fixed order: gray, then refseg's readings
    before the paired ones, kinds in :data:`INPUT_KINDS` order."""
    seen = {(r["kind"], r["reading"]) for r in runs}
    readings = sorted({r for _, r in seen}, key=lambda r: (r is not None, r or ""))
    order = [(GRAY, None)] + [(k, r) for r in readings for k in INPUT_KINDS if k != GRAY]
    return [arm for arm in order if arm in seen]


def summarise_grid(runs: list[dict]) -> list[dict]:
    """Per arm (input kind and reading): its seeds, per measure the mean and spread over the
    seeds, and, for every arm but gray, per measure the paired difference to gray over the
    seeds both have."""
    by_arm = {}
    for r in runs:
        by_arm.setdefault((r["kind"], r["reading"]), {})[r["seed"]] = r
    gray = by_arm.get((GRAY, None), {})
    out = []
    for kind, reading in _arms(runs):
        seeds = by_arm[(kind, reading)]
        entry = {"kind": kind, "reading": reading, "seeds": sorted(seeds),
                 "minutes": float(np.mean([r["seconds"] for r in seeds.values()]) / 60)}
        for m in MEASURES:
            values = [_value(seeds[s], m) for s in sorted(seeds)]
            entry[m] = {"values": values, "mean": float(np.mean(values)),
                        "sd": float(np.std(values, ddof=1)) if len(values) > 1 else None}
            if kind != GRAY:
                common = sorted(set(seeds) & set(gray))
                differences = [_value(seeds[s], m) - _value(gray[s], m) for s in common]
                entry[m]["paired"] = paired_interval(differences)
                entry[m]["differences"] = differences
        out.append(entry)
    return out


def verdict(p: dict) -> str:
    """"above gray" or "below gray" when the interval excludes 0, "not resolved" otherwise
    ("one seed" when there is no interval)."""
    if p["low"] is None:
        return "one seed" if p["n"] == 1 else "no pair"
    return "above gray" if p["low"] > 0 else "below gray" if p["high"] < 0 else "not resolved"


def _arm_label(e) -> str:
    reading = "refseg's" if e["reading"] is None else f"`{e['reading']}`"
    return f"`{e['kind']}`" + ("" if e["kind"] == GRAY else f" | {reading}")


def _spread(s) -> str:
    return f"{s['mean']:.4f}" + ("" if s["sd"] is None else f" ± {s['sd']:.4f}")


def _difference(p) -> str:
    if p["mean"] is None:
        return "-"
    if p["low"] is None:
        return f"{p['mean']:+.4f}"
    return f"{p['mean']:+.4f} [{p['low']:+.4f}, {p['high']:+.4f}]"


def sentence_0121(summary: list[dict]) -> str:
    """One sentence on [0121] from the paired pixel-accuracy intervals: the inputs above,
    level with and below the gray input, each with its mean difference, interval and
    seeds."""
    arms = [e for e in summary if e["kind"] != GRAY]
    if not arms:
        return "[0121]: not measured."
    groups = {"above gray": [], "below gray": [], "other": []}
    for e in arms:
        v = verdict(e["pixel_accuracy"]["paired"])
        groups[v if v in groups else "other"].append(e)

    def names(group):
        return "; ".join(
            f"{_arm_name(e)} {_difference(e['pixel_accuracy']['paired'])} "
            f"({_count(e['pixel_accuracy']['paired']['n'], 'seed')})" for e in group)

    parts = [f"{SENTENCE_START}, as the paired difference in test pixel accuracy to "
             f"the gray input of the same seeds (mean [{CONFIDENCE:.0%} t interval]): "
             + (f"above the gray image: {names(groups['above gray'])}" if groups["above gray"]
                else "no input built from the feature regions is shown above the gray image")]
    if groups["other"]:
        parts.append(f"not resolved (interval around 0, or one seed): {names(groups['other'])}")
    if groups["below gray"]:
        parts.append(f"below it: {names(groups['below gray'])}")
    return "; ".join(parts) + "." + _multiplicity(arms)


def _multiplicity(arms: list[dict]) -> str:
    """When an interval excludes 0 among several inputs compared: which still do at the
    Bonferroni-corrected coverage 1 - (1 - CONFIDENCE) / k over the k inputs with an interval
    (k intervals at CONFIDENCE each exclude a true 0 by chance more often than one does)."""
    compared = [e for e in arms if e["pixel_accuracy"]["paired"]["low"] is not None]
    resolved = [e for e in compared
                if verdict(e["pixel_accuracy"]["paired"]) in ("above gray", "below gray")]
    if len(compared) < 2 or not resolved:
        return ""
    coverage = 1 - (1 - CONFIDENCE) / len(compared)
    held = []
    for e in resolved:
        corrected = paired_interval(e["pixel_accuracy"]["differences"], coverage)
        if verdict(corrected) in ("above gray", "below gray"):
            held.append(f"{_arm_name(e)} {_difference(corrected)}")
    return (f" Over the {len(compared)} inputs compared, at the Bonferroni-corrected coverage "
            f"{coverage:.2%}: " + ("; ".join(held) if held else
                                   "no interval excludes 0 (the differences above are leads, "
                                   "not yet shown)") + ".")


def _arm_name(e) -> str:
    """An input in the sentence: its kind, and the claim-1 reading when not refseg's."""
    return f"`{e['kind']}`" + (f" with `{e['reading']}`" if e["reading"] else "")


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _commits(result: dict, commit: str) -> list[str]:
    return sorted({r.get("commit", commit) for r in result["runs"]})


def block(result: dict | None, commit: str, command: str) -> str:
    """The section's block (markers included): the two tables and the sentence, or a note
    that the runs were not made."""
    if result is None or not result["runs"]:
        return "\n".join([BEGIN, "Not measured: `refseg audit readings --downstream` trains "
                          "these runs (CPU hours).", END])
    s, settings = result["settings"], DemoSettings()
    summary = summarise_grid(result["runs"])
    minutes = sum(r["seconds"] for r in result["runs"]) / 60
    demo = all(s[k] == getattr(settings, k) for k in ("count", "test_count", "epochs"))
    lines = [
        BEGIN,
        f"Measured at commit {', '.join(_commits(result, commit))} by `{command}`: the fusion "
        "network with frozen random backbones (batch norm calibrated, R-frozen) trained on "
        f"{s['count']} synthetic welds "
        f"(seeds {s['seed']}-{s['seed'] + s['count'] - 1}, drawn once; 80 % training, 20 % "
        f"validation) for {s['epochs']} epochs, batch {s['batch_size']}, input "
        f"{s['input_hw'][0]}x{s['input_hw'][1]}, Adam 0.001"
        + (" (the demo's settings)" if demo else " (fewer than the demo's)")
        + f"; scored on {s['test_count']} test welds (seeds {s['test_seeds'][0]}-"
        f"{s['test_seeds'][1]}). A run's seed draws its split, its random backbones (then "
        "calibrated on its own inputs), the decoder's initial weights and the shuffles; every "
        f"input is trained at the same seeds. {_count(len(result['runs']), 'run')}, "
        f"{minutes / 60:.1f} h of training (wall time) in all, on {result.get('machine', 'unknown')}.", "",
        "Inputs: " + "; ".join(f"`{k}`: {DESCRIPTIONS[k]}" for k in INPUT_KINDS) + ". A reading "
        "other than refseg's replaces the claim-1 feature map inside the input.", "",
        "| input | claim-1 reading | seeds | " + " | ".join(
            f"{label}: mean ± sd" for label in MEASURES.values()) + " | pixel accuracy per "
        "seed | training (wall time) |",
        "|---|---|---|" + "---:|" * len(MEASURES) + "---|---:|"]
    for e in summary:
        label = _arm_label(e) if e["kind"] != GRAY else "`gray` | -"
        lines.append(f"| {label} | {', '.join(map(str, e['seeds']))} | "
                     + " | ".join(_spread(e[m]) for m in MEASURES) + " | "
                     + " / ".join(f"{v:.4f}" for v in e["pixel_accuracy"]["values"])
                     + f" | {e['minutes']:.1f} min |")
    lines += ["", f"Paired differences to the gray input of the same seed: mean "
              f"[{CONFIDENCE:.0%} t interval over the seeds, t with n - 1 degrees of freedom]; "
              "*verdict* on pixel accuracy: above or below gray when the interval excludes 0.",
              "", "| input | claim-1 reading | pairs | " + " | ".join(
                  f"Δ {label}" for label in MEASURES.values()) + " | verdict |",
              "|---|---|---:|" + "---:|" * len(MEASURES) + "---|"]
    for e in summary:
        if e["kind"] == GRAY:
            continue
        p = e["pixel_accuracy"]["paired"]
        lines.append(f"| {_arm_label(e)} | {p['n']} | "
                     + " | ".join(_difference(e[m]["paired"]) for m in MEASURES)
                     + f" | {verdict(p)} |")
    lines += ["", sentence_0121(summary),
              f"{NUMBERS_BEGIN}{json.dumps({**result, 'commit': commit, 'command': command})}"
              f"{NUMBERS_END}", END]
    return "\n".join(lines)


def section_intro() -> str:
    """The section's heading and the text above its block."""
    kinds = ", ".join(f"`{k}`" for k in FEATURE_KINDS)
    return "\n".join([
        "## Downstream over seeds: what the network sees", "",
        "### R-dataset", "",
        "The first data set and the network's input ([readings.md](readings.md#r-dataset-the-"
        "first-data-set-and-the-networks-input)). Claim 1 step 2 and [0075] form the first "
        "data set from the \"feature regions\" (特征区域) with their labels; [0121] speaks of "
        "the image \"containing the feature regions\", which drops much useless information; "
        "[0264] of \"edge-extraction images\". A region of an image can be read as the map "
        "(refseg's reading, `feature`), as the image's pixels inside it (`masked-gray`; "
        f"`masked-gray-dilated`, the map dilated by {MASK_RADIUS} pixels: the 5x5 "
        "neighbourhood each feature pixel is decided from), or as both "
        "(`gray-and-feature`). `--downstream` trains each of them "
        f"({kinds}) with refseg's claim-1 readings, then with `weights-equal` and "
        "`weights-inverse` (R-weights: the two readings that raised the feature input most in "
        "the single-seed screen above), and the gray input, at the same seeds; the tables "
        "show the runs made, with the seeds of each.", ""])


def marked_block(text: str, begin: str, end: str) -> str | None:
    """The part of ``text`` from ``begin`` to the first ``end`` after it (markers included),
    or None."""
    if begin not in text or end not in text:
        return None
    start = text.index(begin)
    return text[start:text.index(end, start) + len(end)]


def kept_block(previous: str, begin: str, end: str, numbers: tuple[str, str], render):
    """A block of the previous file re-rendered from the numbers it carries (at the commit
    they were measured), with those numbers; (None, None) when it has none."""
    kept = marked_block(previous, begin, end)
    carried = None if kept is None else marked_block(kept, *numbers)
    if carried is None:
        return None, None
    result = json.loads(carried[len(numbers[0]):-len(numbers[1])])
    return render(result, result.pop("commit"), result.pop("command")), result


def closing_line(dataset_text: str) -> str:
    """The R-dataset block's sentence on [0121], its run count, compute and machine."""
    carried = marked_block(dataset_text, NUMBERS_BEGIN, NUMBERS_END)
    if carried is None:
        return "R-dataset: not measured."
    result = json.loads(carried[len(NUMBERS_BEGIN):-len(NUMBERS_END)])
    hours = sum(r["seconds"] for r in result["runs"]) / 3600
    return (sentence_0121(summarise_grid(result["runs"]))
            + f" ({_count(len(result['runs']), 'run')}, {hours:.1f} h of training on "
            f"{result.get('machine', 'an unrecorded machine')}.)")
