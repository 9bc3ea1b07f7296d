"""Flagged vectors: the claim-1 arrays of every alternative reading, and the diagnosis of a
candidate by them.

For each alternative of :data:`refseg.claim1.alternatives.ALTERNATIVES` and each image of a
bundle, the claim-1 steps are computed under the alternative
(:func:`~refseg.claim1.alternatives.extract_variant`); every step whose array differs from
refseg's beyond the step's tolerance becomes part of a *flagged vector*: the alternative's
array under the bundle's array name, with ``result`` (``acceptable`` where the patent's text
allows the alternative as well as refseg's reading, ``invalid`` otherwise; refseg's own arrays
are the ``valid`` ones) and ``flags`` (the reading id and the alternative's name, as in
``spec/sensitivity.md``). Binary maps and short vectors are stored whole; float images as a
*fingerprint* (the values at a seeded sample of positions, per-block sums and statistics),
which tells the alternatives apart at a fraction of the size. Identical arrays are stored once.

A failing candidate array is compared with the flagged vectors of its name: an alternative
matches an image when the earliest of its arrays that the candidate fails (in pipeline order)
agrees with the alternative's within the array's tolerance.

References: [0077]-[0119]; spec ``readings.md``, ``sensitivity.md``.
"""
from __future__ import annotations

import zlib

import numpy as np

from refseg.claim1 import alternatives
from refseg.claim1.operators import OPERATORS
from refseg.golden.format import (TOLERANCES, array_sha256, block_sums,
                                  sample_positions, summary_statistics)
from refseg.registry import load_registry

INFRASTRUCTURE = "golden files: flagged vectors of the alternative readings"

#: The thresholds of each operator, as the bundle names them (``threshold/<op>/<key>``).
THRESHOLD_KEYS = {"canny": ("low", "high"), "sobel": ("magnitude",),
                  "prewitt": ("magnitude",), "log": ("slope",)}
#: The claim-1 steps an alternative's arrays are compared at, in pipeline order: every
#: claim-1 array of the bundle, so that a failing array upstream of a match is either one the
#: alternative changes as well or one that contradicts it.
STEPS = ("gray", "blurred",
         *(s for op in OPERATORS for s in (f"response/{op}",
                                           *(f"threshold/{op}/{k}" for k in THRESHOLD_KEYS[op]),
                                           f"edges/{op}")),
         "mean_image", "std", "mean", "cv", "intermediate_cv", "weights", "final_weight",
         "feature_map")
#: Positions of a float image stored in its fingerprint, and its blocks.
FINGERPRINT_SAMPLE = 256
FINGERPRINT_BLOCKS = 32
#: Alternatives that the patent's text allows as well as refseg's reading, and why; every
#: other alternative's result is "invalid" (``readings.md`` rejects it, or the text excludes
#: it).
ACCEPTABLE = {
    "border-replicate": "the text is silent on borders; readings.md calls replicate as "
                        "defensible",
    "gauss-sigma-1": "the text gives no sigma ([0211])",
    "gauss-sigma-0.5": "the text gives no sigma ([0211])",
    "gauss-sigma-1.5": "the text gives no sigma ([0211])",
    "canny-ratio-1.5": "the text names Canny only; its threshold ratio is a free parameter",
    "canny-ratio-3": "the text names Canny only; its threshold ratio is a free parameter",
    "canny-otsu-high": "the text gives no threshold; which Canny threshold Otsu sets is open",
    "canny-4-connected": "the text names Canny only; the hysteresis connectivity is open",
    "log-ratio-1": "the text gives no threshold for the zero crossings",
    "log-ratio-3": "the text gives no threshold for the zero crossings",
    "log-positive": "the text does not say which side of a zero crossing is marked",
    "log-laplace8": "the text gives no Laplacian kernel",
    "mean-255": "[0085]-[0087] do not fix the scale of the edge images",
    "std-ddof-1": "[0089]-[0091] do not fix the divisor",
    "empty-takes-all": "the text is silent on an operator that finds no edge",
    "offset-1.45": "any offset in (1.4, 1.6] reproduces the worked example [0107]-[0115]",
    "offset-1.55": "any offset in (1.4, 1.6] reproduces the worked example [0107]-[0115]",
    "offset-1.6": "any offset in (1.4, 1.6] reproduces the worked example [0107]-[0115]",
    "skimage.filters.sobel": "the text fixes no scale of the gradient; Otsu's threshold "
                             "follows the scale",
    "skimage.filters.sobel-canny": "the text fixes no scale of the gradient; Otsu's "
                                   "thresholds follow the scale",
    "skimage.filters.threshold_otsu": "the text gives no threshold; Otsu's binning is open",
    "cv2.Canny-L2": "the text names Canny only; the precision of its gradients is open",
    "cv2.Canny-L1": "the text names Canny only; its gradient norm is open",
    "cv2.Laplacian-ksize3": "the text gives no Laplacian kernel",
}
#: The library calls (with their defaults) that give an alternative of the readings exactly,
#: for the notes: the diagnosis then names the call an engineer wrote.
LIBRARY_CALLS = {
    "border-replicate": ["scipy.ndimage.correlate / convolve / sobel / prewitt / laplace "
                         "(default mode 'reflect', the same as replicate for a 3x3 kernel)",
                         "a 3x3 filter in mode 'nearest' (skimage.filters.gaussian's default "
                         "mode)",
                         "cv2 borderType=BORDER_REPLICATE"],
    "border-zero": ["scipy.signal.convolve2d / correlate2d (default boundary 'fill')",
                    "cv2 borderType=BORDER_CONSTANT"],
    "gauss-binomial": ["cv2.GaussianBlur(gray, (3, 3), 0)"],
    "canny-4-connected": ["skimage.filters.apply_hysteresis_threshold (labels through 4 "
                          "neighbours)"],
    "binary-matlab": ["MATLAB edge(I, 'canny' | 'sobel' | 'prewitt' | 'log') defaults"],
    "log-laplace8": ["a 3x3 all-ones Laplacian (e.g. scipy.ndimage.generic_laplace with "
                     "diagonals)"],
    "log-13x13": ["MATLAB fspecial('log', 13, 2)"],
}
#: Where an alternative computes a step from other steps than refseg's (the manifest's
#: ``computed_from``), the steps it reads: scipy's ``gaussian_laplace`` takes the gray image
#: and makes its own Gaussian, so a failing blurred image does not contradict it, and a LoG
#: that matches it is a cause of its own; skimage's Canny reads neither Canny's response
#: nor, with its defaults, the thresholds.
READS = {"scipy.ndimage.gaussian_laplace": {"response/log": ["gray"]},
         "skimage.feature.canny": {"edges/canny": ["blurred"]},
         "skimage.feature.canny-otsu": {"edges/canny": ["blurred", "threshold/canny/low",
                                                       "threshold/canny/high"]}}
#: Elements per block of :func:`difference` (2 MiB of float64): its temporaries are a
#: block's, not a whole image's.
BLOCK = 1 << 18
#: Every alternative a bundle carries flagged vectors of: the readings' alternatives, then
#: the libraries' defaults.
FLAGGED = (*alternatives.ALTERNATIVES, *alternatives.LIBRARY_DEFAULTS)
#: What each result means, for the manifest.
RESULTS = {
    "valid": "refseg's reading: the bundle's own arrays (manifest 'arrays')",
    "acceptable": "an alternative the patent's text allows as well as refseg's reading",
    "invalid": "an alternative the text or readings.md excludes",
}


def step_tolerance(step: str) -> str:
    """The tolerance kind of a claim-1 step: ``exact`` for the binary maps, else ``float64``
    (a continuous edge image in place of a binary map is matched as ``float64`` too,
    :func:`match_kind`)."""
    return "exact" if step.startswith("edges/") or step == "feature_map" else "float64"


def result_of(name: str) -> tuple[str, str]:
    """(result, why) of an alternative."""
    if name in ACCEPTABLE:
        return "acceptable", ACCEPTABLE[name]
    return "invalid", "readings.md rejects it, or the text excludes it"


def variant_arrays(rgb, variant=None) -> dict[str, np.ndarray]:
    """The arrays of :data:`STEPS` for one image under a variant (None: refseg's readings);
    a variant without thresholds (the continuous edge kinds) has no ``threshold/*`` arrays."""
    r = alternatives.extract_variant(rgb, variant or alternatives.Variant())
    out = {"gray": r.gray, "blurred": r.blurred}
    for op in OPERATORS:
        out[f"response/{op}"] = r.responses[op]
        for key, value in r.thresholds.get(op, {}).items():
            out[f"threshold/{op}/{key}"] = np.float64(value)
        out[f"edges/{op}"] = np.asarray(r.edges[op])
    out.update(r.statistics)
    out["weights"] = np.array([r.weights[op] for op in OPERATORS], dtype=np.float64)
    out.update(final_weight=r.final_weight, feature_map=r.feature_map)
    return out


def difference(value, reference, kind: str) -> tuple[int, float | None]:
    """(elements beyond the tolerance ``kind``, the largest difference in tolerance units;
    None for exact tolerances) of ``value`` against ``reference``; another shape counts every
    element."""
    value, reference = np.asarray(value), np.asarray(reference)
    if value.shape != reference.shape:
        return int(max(value.size, reference.size, 1)), None
    value, reference = value.reshape(-1), reference.reshape(-1)
    # two buffers of a block, reused: the blocks' temporaries are neither whole planes nor
    # fresh mappings of the allocator per block
    diff, above = np.empty(min(BLOCK, value.size)), np.empty(min(BLOCK, value.size), bool)

    def blocks():
        for start in range(0, value.size, BLOCK):
            d = diff[:value[start:start + BLOCK].size]
            np.subtract(value[start:start + BLOCK], reference[start:start + BLOCK], out=d,
                        dtype=np.float64)
            yield np.abs(d, out=d)

    if kind == "exact" or TOLERANCES[kind]["rule"] == "exact":
        return sum(int(np.count_nonzero(d)) for d in blocks()), None
    # np.max over the blocks' maxima, as over the whole array: a NaN anywhere is the maximum
    top = []
    for start in range(0, reference.size, BLOCK):
        d = diff[:reference[start:start + BLOCK].size]
        np.copyto(d, reference[start:start + BLOCK], casting="unsafe")
        top.append(np.abs(d, out=d).max())
    scale = (float(np.max(top)) if reference.size else 0.0) or 1.0
    allowed = TOLERANCES[kind]["rtol"] * scale
    count, worst = 0, []
    for d in blocks():
        count += int(np.count_nonzero(np.greater(d, allowed, out=above[:d.size])))
        worst.append(d.max())
    worst = float(np.max(worst)) if worst else 0.0
    return count, worst / allowed


def reading_paragraphs(reading: str) -> str:
    """The paragraphs of the claim elements that cite a reading, ``"[0079], [0205]"``."""
    registry = load_registry()
    found = sorted({p for e in registry.elements.values() if reading in e.readings
                    for p in e.paragraphs})
    return ", ".join(f"[{p}]" for p in found)


# -- building ------------------------------------------------------------------------------------
class _Store:
    """The ``arrays.npz`` members of the flagged vectors: each distinct array once."""

    def __init__(self):
        self.members: dict[str, np.ndarray] = {}

    def add(self, name: str, array: np.ndarray) -> dict:
        digest = array_sha256(array)
        key = f"flagged/{digest[:20]}"
        entry = {"sha256": digest, "shape": list(array.shape), "dtype": array.dtype.str}
        if array.dtype.kind in "ub" or array.ndim < 2:
            # np.ascontiguousarray would make a threshold's 0-d array 1-d
            self.members.setdefault(key, np.array(array, order="C"))
            return {**entry, "storage": "full", "member": key}
        index_key = f"flagged@index/{name}"
        if index_key not in self.members:
            self.members[index_key] = fingerprint_positions(name, array.size)
        index = self.members[index_key].astype(np.int64)
        key = f"{key}:{zlib.crc32(name.encode()):08x}"  # the sample depends on the name
        length = -(-array.size // FINGERPRINT_BLOCKS)
        self.members.setdefault(f"{key}@sample_value", np.ascontiguousarray(
            array.reshape(-1)[index]))
        self.members.setdefault(f"{key}@blocks", block_sums(array, length))
        return {**entry, "storage": "fingerprint",
                "sample": {"index": index_key, "value": f"{key}@sample_value"},
                "blocks": {"member": f"{key}@blocks", "length": length},
                "stats": summary_statistics(array)}


def fingerprint_positions(name: str, size: int) -> np.ndarray:
    """The sorted sample positions of a fingerprint (uint32): :data:`FINGERPRINT_SAMPLE` of
    them, drawn as the bundle's summary samples are
    (:func:`~refseg.golden.format.sample_positions`) under the name ``flagged/<name>``."""
    return sample_positions(f"flagged/{name}", size, FINGERPRINT_SAMPLE)


def compute_changes(images: dict) -> dict:
    """{(alternative, image): {step: (array, changed, units)}} for every alternative that
    changes a step of an image beyond its tolerance, and refseg's arrays per image under
    ``None``."""
    base = {name: variant_arrays(rgb) for name, rgb in images.items()}
    out = {None: base}
    for alt in FLAGGED:
        for name, rgb in images.items():
            arrays = variant_arrays(rgb, alt.variant)
            changed = {}
            for step in (s for s in STEPS if s in arrays):
                count, units = difference(arrays[step], base[name][step], step_tolerance(step))
                if count or arrays[step].dtype != base[name][step].dtype:
                    changed[step] = (arrays[step], count, units)
            if changed:
                out[alt.name, name] = changed
    return out


def _same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(a[s][0].dtype == b[s][0].dtype
               and difference(a[s][0], b[s][0], step_tolerance(s))[0] == 0 for s in a)


def _indistinguishable(changes: dict, images) -> list[dict]:
    names = [a.name for a in FLAGGED]
    silent = [n for n in names if not any((n, i) in changes for i in images)]
    groups = []
    if silent:
        groups.append({"alternatives": silent, "from": "refseg's reading",
                       "why": "no array of the bundle's images changes beyond its tolerance"})
    seen = set(silent)
    for i, a in enumerate(names):
        if a in seen:
            continue
        group = [a]
        for b in names[i + 1:]:
            if b not in seen and all(_same(changes.get((a, im), {}), changes.get((b, im), {}))
                                     for im in images):
                group.append(b)
        if len(group) > 1:
            seen.update(group)
            groups.append({"alternatives": group, "from": "each other",
                           "why": "their arrays agree within tolerance on every image of the "
                                  "bundle"})
    return groups


def flagged_section(images: dict) -> tuple[dict, dict]:
    """The manifest's ``flagged`` table and its ``arrays.npz`` members.

    Parameters
    ----------
    images : dict of str to ndarray
        The bundle's images, (M, N, 3) uint8, by name.

    Returns
    -------
    section : dict
        ``results``, ``notes`` (per alternative: reading, what it does, result, paragraphs,
        effect per image), ``vectors`` (per alternative and image: flags, result, arrays)
        and ``indistinguishable`` (groups the bundle's images cannot tell apart).
    members : dict of str to ndarray
    """
    changes = compute_changes(images)
    store = _Store()
    notes, vectors = {}, []
    for alt in FLAGGED:
        result, why = result_of(alt.name)
        effect = {}
        for image in images:
            changed = changes.get((alt.name, image))
            if not changed:
                continue
            arrays = {}
            for step, (array, count, units) in changed.items():
                arrays[f"claim1/{image}/{step}"] = {
                    **store.add(f"claim1/{image}/{step}", array), "changed": count,
                    "tolerance_units": units}
            first = next(iter(changed))
            effect[image] = {"first_array": f"claim1/{image}/{first}",
                             "changed": changed[first][1],
                             "tolerance_units": changed[first][2],
                             "feature_pixels_changed": changed.get(
                                 "feature_map", (None, 0, None))[1]}
            vectors.append({"id": f"{alt.name}/{image}", "image": image, "result": result,
                            "flags": [alt.reading, alt.name], "arrays": arrays})
        notes[alt.name] = {"reading": alt.reading, "alternative": alt.name, "does": alt.text,
                           "result": result, "why": why,
                           "paragraphs": reading_paragraphs(alt.reading), "effect": effect,
                           "calls": LIBRARY_CALLS.get(alt.name, [])}
        if alt.name in READS:
            notes[alt.name]["reads"] = READS[alt.name]
    section = {
        "about": "the claim-1 arrays of each alternative reading (refseg/claim1/"
                 "alternatives.py, spec/sensitivity.md) and of each library default (named "
                 "after the call: skimage.filters.sobel, cv2.Canny-L1, ...) that differ from "
                 "refseg's beyond their tolerance, per image; 'golden check' compares a "
                 "failing candidate array with them and names the alternatives it matches",
        "diagnosis": "an alternative matches an image where the candidate fails the first "
                     "array the alternative changes, agrees with the alternative's array "
                     "there, and fails no array that one is computed from (computed_from, "
                     "transitively; for a step the alternative's note lists under 'reads', "
                     "the arrays it names instead); an agreement below a failing array the "
                     "alternative leaves as refseg's is reported as 'not claimed' with that "
                     "array; a binary map that is the one the manifest's rule gives on the "
                     "candidate's own arrays is attributed to no alternative; a root cause no "
                     "alternative explains is reported as 'no known reading'",
        "storage": {"full": "member: the array itself",
                    "fingerprint": f"sample.value: the values at the {FINGERPRINT_SAMPLE} "
                                   "C-order positions of sample.index (uint32, shared by "
                                   "every vector of that array name); blocks: (sum, sum of "
                                   "|x|) per run of blocks.length elements; stats as for "
                                   "summary arrays"},
        "match": "a candidate array matches a vector's array when it is within the bundle "
                 "array's tolerance of it (relmax scale: max|vector|): everywhere for full "
                 "storage; at the sample, the blocks and the statistics for fingerprints",
        "results": RESULTS, "notes": notes, "vectors": vectors,
        "indistinguishable": _indistinguishable(changes, list(images)),
    }
    return section, store.members


def flagged_pins(manifest: dict) -> dict[str, str]:
    """{vector id + array name: SHA-256} of a manifest's flagged vectors (spec's pins)."""
    section = manifest.get("flagged") or {}
    return {f"{v['id']}:{name}": a["sha256"] for v in section.get("vectors", ())
            for name, a in sorted(v["arrays"].items())}


# -- matching and diagnosis ----------------------------------------------------------------------
def match_kind(step_kind: str, dtype) -> str:
    """The tolerance a vector is matched with: its array's, but float64's for a float vector
    of an exact step (the continuous edge responses of ``continuous-*``)."""
    return "float64" if step_kind == "exact" and np.dtype(dtype).kind == "f" else step_kind


#: A binary candidate map that is not an alternative's exactly still matches it when it is at
#: least this many times closer to it (pixels apart) than to refseg's map: OpenCV's Canny,
#: on gradients rounded to int16, moves a few pixels of a chain of hundreds.
NEAR_FACTOR = 4


def vector_matches(entry: dict, members: dict, value, kind: str,
                   from_golden: int | None = None) -> int | None:
    """Whether a candidate array is within tolerance ``kind`` of a flagged vector's array (see
    the section's ``match``): None if not, else the elements apart (0: a match within the
    tolerance; more: a binary map :data:`NEAR_FACTOR` times closer to the vector than to
    refseg's, which is ``from_golden`` elements away)."""
    value = np.asarray(value)
    if list(value.shape) != list(entry["shape"]) or value.dtype.kind not in "biuf":
        return None
    kind = match_kind(kind, entry["dtype"])
    if entry["storage"] == "full":
        apart = difference(value, members[entry["member"]], kind)[0]
        near = (kind == "exact" and from_golden is not None
                and apart * NEAR_FACTOR <= from_golden)
        return apart if apart == 0 or near else None
    rtol = TOLERANCES[kind]["rtol"]
    scale = entry["stats"]["max_abs"] or 1.0
    index = members[entry["sample"]["index"]].astype(np.int64)
    sampled = value.reshape(-1)[index].astype(np.float64)
    if np.any(np.abs(sampled - members[entry["sample"]["value"]]) > rtol * scale):
        return None
    golden = members[entry["blocks"]["member"]]
    limit = rtol * np.maximum(golden[:, 1], scale)
    blocks = block_sums(value, entry["blocks"]["length"])
    ok = blocks.shape == golden.shape and np.all(np.abs(blocks - golden) <= limit[:, None])
    return 0 if ok else None


def ancestors(name: str, entries: dict) -> list[str]:
    """Every array ``name`` is computed from, transitively (the manifest's
    ``computed_from``), in pipeline order."""
    order = {n: i for i, n in enumerate(entries)}
    seen, todo = set(), list(entries[name]["computed_from"])
    while todo:
        source = todo.pop()
        if source in entries and source not in seen:
            seen.add(source)
            todo += entries[source]["computed_from"]
    return sorted(seen, key=order.__getitem__)


def alternative_ancestors(name: str, entries: dict, reads: dict) -> list[str]:
    """Every array ``name`` is computed from under an alternative: :func:`ancestors`, except
    for a step the alternative's note lists under ``reads`` (``{step: [steps]}``), which is
    computed from those steps of its image (and what they are computed from)."""
    parts = name.split("/", 2)
    if len(parts) < 3 or parts[2] not in reads:
        return ancestors(name, entries)
    order = {n: i for i, n in enumerate(entries)}
    sources = [f"{parts[0]}/{parts[1]}/{step}" for step in reads[parts[2]]]
    seen = {s for s in sources if s in entries}
    for source in list(seen):
        seen.update(ancestors(source, entries))
    return sorted(seen, key=order.__getitem__)


def follows_own_rule(name: str, values: dict) -> bool:
    """Whether a candidate's binary map is the one the manifest's rule gives on the
    candidate's own arrays: then a map that agrees with, or is near, an alternative's
    (another Canny) is not that alternative, since the candidate applies refseg's rule and
    its difference comes from the arrays the map is decided from."""
    from refseg.golden.rounding import candidate_map
    parts = name.split("/")
    if len(parts) < 4 or parts[2] != "edges":
        return False
    own = candidate_map("/".join(parts[2:]), "/".join(parts[:2]), values)
    value = values.get(name)
    return (own is not None and value is not None and not isinstance(value, Exception)
            and np.array_equal(own, np.asarray(value)))


def diagnose(vectors, notes: dict, members: dict, rows, values: dict, entries: dict,
             unclaimed: bool = False) -> list:
    """The alternatives a candidate matches, root cause first.

    An alternative matches an image when the first of its arrays that the candidate gives
    fails the bundle and matches the alternative's (:func:`vector_matches`), and no array that
    one is computed from fails: every failing array upstream of it is one the alternative
    leaves as refseg's, so the candidate contradicts the alternative there and the agreement
    downstream is another cause's effect. A step the alternative's note lists under ``reads``
    is computed from the arrays named there instead of its ``computed_from``
    (:func:`alternative_ancestors`). A binary map that is the map the manifest's rule gives
    on the candidate's own arrays (:func:`follows_own_rule`) matches no alternative.

    Parameters
    ----------
    vectors : list of dict
        Flagged vectors (the manifest's ``flagged.vectors``).
    notes : dict
        ``flagged.notes``.
    members : dict of str to ndarray
        The arrays the vectors name.
    rows : list of CheckRow
        The check's rows (status, root cause).
    values : dict of str to ndarray
        The candidate's arrays.
    entries : dict
        The manifest's array entries, in pipeline order (their tolerances, ``computed_from``).
    unclaimed : bool
        Also return the agreements downstream of a failing array (``verdict`` "not
        claimed", with ``contradicted_by``: the failing upstream root causes).

    Returns
    -------
    list of dict
        Per matched (alternative, image): ``verdict`` ("matches"), ``array`` (the earliest
        failing array of the alternative's, where it matches), ``reading``, ``alternative``,
        ``result``, ``image``, ``does``, ``apart`` and ``from_golden`` (elements from the
        alternative's array and from refseg's; ``apart`` is 0 for a match within the
        tolerance), ``root_cause`` (always True for a match), ``also_matches`` (later
        failing arrays that match too) and ``differs_at`` (arrays the alternative changes
        where the candidate does not follow it), ordered by the array's place in the
        pipeline.
    """
    order = {name: i for i, name in enumerate(entries)}
    status = {r.name: r for r in rows}
    found = []
    own_rule: dict = {}
    for vector in vectors:
        names = sorted((n for n in vector["arrays"] if n in status), key=order.__getitem__)
        supplied = [n for n in names if _supplied(values, n)]
        failing = [n for n in supplied if status[n].status == "fail"]
        if not failing or failing[0] != supplied[0]:
            continue  # the candidate does not follow the alternative at its first step

        def apart(name):
            if "apart" in vector:  # matched as the vector was computed (diagnose_image)
                return vector["apart"][name]
            kind = entries[name]["tolerance"]["name"]
            return vector_matches(vector["arrays"][name], members, values[name], kind,
                                  status[name].count)

        first = apart(failing[0])
        if first is None:
            continue
        if failing[0] not in own_rule:
            own_rule[failing[0]] = follows_own_rule(failing[0], values)
        if own_rule[failing[0]]:
            continue
        reads = notes[vector["flags"][1]].get("reads") or {}
        upstream = [n for n in alternative_ancestors(failing[0], entries, reads)
                    if n in status and status[n].status == "fail"]
        if upstream and not unclaimed:
            continue
        also = [n for n in failing[1:] if apart(n) is not None]
        reading, name = vector["flags"]
        entry = {"verdict": "not claimed" if upstream else "matches", "array": failing[0],
                 "reading": reading, "alternative": name, "result": vector["result"],
                 "image": vector["image"], "does": notes[name]["does"], "apart": first,
                 "from_golden": status[failing[0]].count, "root_cause": not upstream,
                 "also_matches": also,
                 "differs_at": [n for n in supplied if n not in also and n != failing[0]]}
        if not upstream and status[failing[0]].follows:
            # a failure the pipeline puts below another that this alternative does not read
            image, step = failing[0].split("/", 2)[1:]
            entry["own_sources"] = [f"claim1/{image}/{s}" for s in reads.get(step, ())]
        if upstream:
            entry["contradicted_by"] = status[failing[0]].follows or upstream
        found.append(entry)
    # of the alternatives matching one array, the closest (a sparse map is near several), and
    # of those the ones the candidate follows furthest (continuous-literal and -graded share
    # their edge maps and part at the vote)
    def rank(d):
        return d["apart"], len(d["differs_at"])

    closest = {}
    for d in found:
        key = d["array"], d["verdict"]
        closest[key] = min(closest.get(key, rank(d)), rank(d))
    found = [d for d in found if rank(d) == closest[d["array"], d["verdict"]]]
    found.sort(key=lambda d: (not d["root_cause"], order[d["array"]]))
    return found


def _supplied(values, name: str) -> bool:
    """Whether the candidate gives ``name`` as an array (not missing, not unreadable)."""
    if hasattr(values, "supplies"):  # a file read one array at a time: asked once per name
        return values.supplies(name)
    return not isinstance(values.get(name), (Exception, type(None)))


def _base_step(base, step: str):
    """refseg's array of ``step``, advancing ``base`` (:func:`~refseg.claim1.alternatives.
    variant_steps` of refseg's readings) past the steps before it."""
    for name, array in base:
        if name == step:
            return array
    raise ValueError(f"refseg's readings give no step {step!r}")


def changed_steps(rgb, variant):
    """Yield ``(step, array)`` for each step of :data:`STEPS` where ``variant`` changes
    refseg's array beyond the step's tolerance (or its dtype), in pipeline order: the
    variant's steps and refseg's computed side by side, one step of each held at a time."""
    base = alternatives.variant_steps(rgb)
    if set(variant.changes()) <= set(alternatives.VOTE_FIELDS):
        # the variant's steps up to the edge maps are refseg's, bit for bit: computed once,
        # refseg's maps kept (a byte per pixel each) for the variant's vote
        edges = {}
        for step, array in base:
            if step.startswith("edges/"):
                edges[step.split("/")[1]] = array
            if step == f"edges/{OPERATORS[-1]}":
                break
        steps = alternatives.vote_steps(edges, variant)
        del edges
    else:
        steps = alternatives.variant_steps(rgb, variant)
    try:
        for step, array in steps:
            reference = _base_step(base, step)
            count, _ = difference(array, reference, step_tolerance(step))
            same = not count and array.dtype == reference.dtype
            del reference
            if not same:
                yield step, array
            del array
    finally:
        steps.close()
        base.close()


def whole_entry(member: str, array) -> dict:
    """A flagged vector's entry of an array held whole, under ``member``."""
    return {"storage": "full", "member": member, "shape": list(array.shape),
            "dtype": array.dtype.str}


def image_vector(alt, image: str, arrays: dict, **more) -> dict:
    """The flagged vector of alternative ``alt`` on ``image``: its ``arrays`` entries (and
    ``more`` fields, such as ``apart``)."""
    return {"id": f"{alt.name}/{image}", "image": image, "result": result_of(alt.name)[0],
            "flags": [alt.reading, alt.name], "arrays": arrays, **more}


def alternative_notes() -> dict:
    """``flagged.notes`` as :func:`diagnose` reads them, without a bundle: what each
    alternative does, and the steps it reads (:data:`READS`)."""
    return {alt.name: {"does": alt.text, **({"reads": READS[alt.name]}
                                            if alt.name in READS else {})}
            for alt in FLAGGED}


def diagnose_image(image: str, rgb, rows, values, entries: dict) -> list:
    """:func:`diagnose` of the image's flagged vectors for a folder comparison (which carries
    no bundle), without holding any alternative's arrays: each array an alternative changes is matched with the candidate's
    as it is computed (:func:`vector_matches`, only where the candidate fails, the only
    arrays :func:`diagnose` matches) and dropped, and an alternative is given up at the first
    step it changes that the candidate gives when :func:`diagnose` would pass it over there
    (the candidate passes that step, does not match it, or fails an array it is computed
    from)."""
    status = {r.name: r for r in rows}
    notes = alternative_notes()
    vectors = []
    for alt in FLAGGED:
        described, matched, first = {}, {}, None
        changes = changed_steps(rgb, alt.variant)
        for step, array in changes:
            name = f"claim1/{image}/{step}"
            entry = described[name] = whole_entry(name, array)
            row = status.get(name)
            given = row is not None and _supplied(values, name)
            if given and first is None:
                first = name
                upstream = alternative_ancestors(name, entries, READS.get(alt.name, {}))
                if row.status != "fail" or any(n in status and status[n].status == "fail"
                                               for n in upstream):
                    changes.close()
                    break
            if given and row.status == "fail":
                matched[name] = vector_matches(entry, {name: array}, values[name],
                                               entries[name]["tolerance"]["name"], row.count)
            del array
            if name == first and matched[name] is None:
                changes.close()
                break
        else:
            if first is not None:
                vectors.append(image_vector(alt, image, described, apart=matched))
    return diagnose(vectors, notes, {}, rows, values, entries)
