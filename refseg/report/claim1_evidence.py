"""What ran here, for claim 1's steps: the images and numbers of the demo's first two welds
at each step of the feature extraction, as the claim chart shows them under each element.

Each renderer takes the folder (:class:`refseg.report.folder.Source`) and the element and
returns HTML; :data:`EVIDENCE` maps the element ids to them.
"""
from __future__ import annotations

import numpy as np

from refseg.claim1.operators import OPERATORS
from refseg.data.inputs import network_input
from refseg.report import html as h
from refseg.report.results import PATENT_WEIGHTS
from refseg.claim1.operators import OPERATOR_NAMES


def _no_welds(source) -> str:
    if source.kind == "run":
        return ("<p>A training run keeps no claim-1 images; <code>refseg demo</code> and "
                "<code>refseg edges</code> write them.</p>")
    return "<p>This folder has no <code>claim1/</code> images.</p>"


def _per_weld(source, caption_of, image_of) -> str:
    if not source.welds:
        return _no_welds(source)
    return '<div class="welds">' + "".join(
        h.figure(h.png(image_of(w), f"{w['stem']}"), caption_of(w)) for w in source.welds) \
        + "</div>"


def _edge_evidence(op):
    def show(source, e):
        def caption(w):
            r = w["report"]
            thresholds = ", ".join(f"{k} {v:.2f}" for k, v in r["thresholds"][op].items())
            pixels = r["edge_pixels"][op]
            share = pixels / (r["shape"][0] * r["shape"][1])
            return (f"{h.escape(w['stem'])}: {OPERATOR_NAMES[op]} edge map (white: edge), "
                    f"threshold {thresholds}; {pixels} edge pixels ({share:.1%}); weight "
                    f"w = {r['weights'][op]:.3f}")
        return _per_weld(source, caption, lambda w: w["arrays"][op] * np.uint8(255))
    return show


def _weights_chart(weights: dict, patent: bool = True) -> str:
    rows = []
    for op in OPERATORS:
        rows.append(f'<tr><th>{OPERATOR_NAMES[op]}</th><td class="bars">'
                    f'<div class="bar" style="width:{weights[op] * 100:.1f}%"></div>'
                    + (f'<div class="bar patent" style="width:{PATENT_WEIGHTS[op] * 100:.1f}%">'
                       "</div>" if patent else "")
                    + f"</td><td>{weights[op]:.4f}</td>"
                    + (f"<td>{PATENT_WEIGHTS[op]:.4f}</td>" if patent else "") + "</tr>")
    head = ("<tr><th>operator</th><th>w (bars: here, and the patent's [0213] in grey)</th>"
            "<th>here</th><th>[0213]</th></tr>")
    return f'<table class="weights">{head}{"".join(rows)}</table>'


def _statistics_table(source, keys) -> str:
    if not source.welds:
        return _no_welds(source)
    labels = {"mean": "μ (pixel mean)", "std": "σ (from the mean image)",
              "cv": "V = σ / μ", "weights": "w = V / ΣV"}
    out = []
    for w in source.welds:
        r = w["report"]
        head = "".join(f"<th>{labels[k]}</th>" for k in keys)
        rows = "".join(f"<tr><th>{OPERATOR_NAMES[op]}</th>"
                       + "".join(f"<td>{r[k][op]:.4f}</td>" for k in keys) + "</tr>"
                       for op in OPERATORS)
        out.append(f"<table><caption>{h.escape(w['stem'])}</caption><tr><th>operator</th>{head}"
                   f"</tr>{rows}</table>")
    return '<div class="welds">' + "".join(out) + "</div>"


def _acquire(source, e):
    def caption(w):
        rows, cols = w["input"].shape[:2]
        return f"{h.escape(w['stem'])}: the input image, {rows} rows x {cols} columns, RGB"
    if not source.welds or any(w["input"] is None for w in source.welds):
        return _no_welds(source)
    settings = source.record.get("settings", {})
    return (f"<p>{settings.get('count', '?')} synthetic training welds and "
            f"{settings.get('test_count', '?')} test welds were drawn "
            "(<code>refseg synth</code>). The first two:</p>"
            + _per_weld(source, caption, lambda w: w["input"]))


def _gray(source, e):
    return _per_weld(source, lambda w: f"{h.escape(w['stem'])}: gray = (299 R + 587 G + 114 B) "
                     "/ 1000 "
                     "(float64; rounded for display)", lambda w: h.gray8(w["arrays"]["gray"]))


def _gauss(source, e):
    def caption(w):
        sigma = w["report"]["params"]["sigma"]
        return (f"{h.escape(w['stem'])}: the gray image after the 3x3 Gaussian, σ = {sigma:g}, "
                "border reflect-101")
    return _per_weld(source, caption, lambda w: h.gray8(w["arrays"]["blurred"]))


def _mean_image(source, e):
    return _per_weld(source, lambda w: f"{h.escape(w['stem'])}: Ē, the per-pixel mean of the four "
                     "binary edge maps (0, ¼, ½, ¾, 1 shown as black to white)",
                     lambda w: h.gray8(w["arrays"]["mean_image"] * 255))


def _std(source, e):
    return _statistics_table(source, ("mean", "std"))


def _cv(source, e):
    return _statistics_table(source, ("mean", "std", "cv"))


def _intermediate(source, e):
    if not source.welds:
        return _no_welds(source)
    return "<ul>" + "".join(
        f"<li>{h.escape(w['stem'])}: ΣV = {w['report']['intermediate_cv']:.4f} ("
        + " + ".join(f"{w['report']['cv'][op]:.4f}" for op in OPERATORS) + ")</li>"
        for w in source.welds) + "</ul>"


def _operator_weights(source, e):
    if not source.welds:
        return _no_welds(source)
    return '<div class="welds">' + "".join(
        f"<div><p>{h.escape(w['stem'])}</p>{_weights_chart(w['report']['weights'])}</div>"
        for w in source.welds) + "</div>"


def _final_weight(source, e):
    def caption(w):
        f = w["arrays"]["final_weight"]
        return (f"{h.escape(w['stem'])}: F = Σ w<sub>i</sub> X<sub>i</sub> − 1.5 (X = 2 on an "
                "edge "
                f"of operator i, else 1), from {f.min():.3f} to {f.max():.3f}: blue below 0 "
                "(darkest: no operator), orange to yellow from 0 up (the pixels the vote "
                "keeps)")
    return _per_weld(source, caption,
                     lambda w: h.final_weight_colours(w["arrays"]["final_weight"]))


def _decision(source, e):
    def caption(w):
        fm = w["arrays"]["feature_map"]
        return (f"{h.escape(w['stem'])}: the feature map, 1 (white) where F ≥ 0: "
                f"{int(fm.sum())} pixels ({fm.mean():.1%})")
    return _per_weld(source, caption, lambda w: w["arrays"]["feature_map"] * np.uint8(255))


def _traverse(source, e):
    if not source.welds:
        return _no_welds(source)
    return "<ul>" + "".join(
        f"<li>{h.escape(w['stem'])}: input {w['report']['shape'][0]}x{w['report']['shape'][1]}, "
        f"feature map {w['arrays']['feature_map'].shape[0]}x"
        f"{w['arrays']['feature_map'].shape[1]}: every pixel decided, at the input's "
        "resolution (the map is under claim1.step2.decision).</li>"
        for w in source.welds) + "</ul>"


def _extract(source, e):
    if not source.welds or any(w["input"] is None for w in source.welds):
        return _no_welds(source)
    out = []
    for w in source.welds:
        out.append(h.figure(h.png(w["input"], w["stem"], "half"), f"{h.escape(w['stem'])}: input")
                   + h.figure(h.png(w["arrays"]["feature_map"] * np.uint8(255), w["stem"],
                                  "half"), f"{h.escape(w['stem'])}: its feature-region image"))
    coverage = source.record.get("contour_coverage")
    note = (f"<p>Of the labels' contour pixels, {coverage:.1%} lie within one pixel of a "
            "feature-map pixel (first 20 training images): the rest of the seam's edges are "
            "lost by the vote before the network sees the image.</p>"
            if coverage is not None else "")
    note += ("<p>Any image, step by step, with who decided each pixel: <code>refseg explain "
             "claim1 --image IMAGE --out DIR</code>.</p>")
    return '<div class="welds">' + "".join(out) + "</div>" + note


def _dataset(source, e):
    if not source.welds or source.input_hw is None or \
            any(w["input"] is None or w["label"] is None for w in source.welds):
        return _no_welds(source)
    rows, cols = source.input_hw
    out = []
    for w in source.welds:
        x = network_input(w["input"], source.input_hw, "feature")
        out.append(h.figure(h.png(h.gray8((x[..., 0] + 1) * 127.5), w["stem"], "fit"),
                            f"{h.escape(w['stem'])}: the network's input, the feature image "
                            f"resized to {rows}x{cols} (bilinear; in [-1, 1], shown black to "
                            "white)")
                   + h.figure(h.png(w["label"], w["stem"], "half"),
                             f"{h.escape(w['stem'])}: its label ([0263] colours)"))
    return '<div class="welds">' + "".join(out) + "</div>"


#: The renderer of each claim-1 element's "what ran here".
EVIDENCE = {
    "claim1.step1.acquire": _acquire, "claim1.step2.gray": _gray, "claim1.step2.gauss": _gauss,
    **{f"claim1.step2.edges.{op}": _edge_evidence(op) for op in OPERATORS},
    "claim1.step2.mean_image": _mean_image, "claim1.step2.std": _std, "claim1.step2.cv": _cv,
    "claim1.step2.intermediate_cv": _intermediate,
    "claim1.step2.weights": _operator_weights,
    "claim1.step2.final_weight": _final_weight, "claim1.step2.decision": _decision,
    "claim1.step2.traverse": _traverse, "claim1.step2.extract": _extract,
    "claim1.step2.dataset": _dataset,
}
