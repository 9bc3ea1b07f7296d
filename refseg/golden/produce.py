"""Producing a golden bundle in memory: the inputs, claim 1 on each, the network, the autograd
ops, the flagged vectors of the alternative readings, and the manifest describing them all.

The computation of each part is in its own module (:mod:`~refseg.golden.claim1_arrays`,
:mod:`~refseg.golden.network_arrays`, :mod:`~refseg.golden.ops_arrays`,
:mod:`~refseg.golden.flagged`); what the manifest says about the arrays is in
:mod:`~refseg.golden.descriptions`; writing the bundle is :mod:`~refseg.golden.write`.

References: claims 1-4; [0075]-[0119], [0122]-[0197], [0242]-[0255].
"""
from __future__ import annotations

import platform
import sysconfig

import numpy as np

from refseg._version import __version__
from refseg.autograd.seam import reference_ops
from refseg.errors import InputError
from refseg.golden.bundle_images import (PHOTOS, WELD_FUNCTION, WELD_SEEDS, shipped_photos,
                                         synthetic_welds)
from refseg.golden.claim1_arrays import add_claim1, add_input
from refseg.golden.descriptions import MANIFEST_NOTES
from refseg.golden.edge_cases import edge_case_images
from refseg.golden.rounding import RULE as ROUNDING_RULE
from refseg.golden.flagged import flagged_section
from refseg.golden.format import (ARRAYS, FORMAT, FORMAT_MINOR, FORMAT_VERSION, HASH_RULE, PARTS,
                                  READINGS, TOLERANCES, BundleBuilder)
from refseg.golden.network_arrays import ADAM_STEPS, NET_HW, add_network
from refseg.golden.ops_arrays import add_ops
from refseg.golden.schema import SCHEMA, schema

INFRASTRUCTURE = "golden files: producing a bundle"

__all__ = ["PHOTOS", "WELD_SEEDS", "NET_HW", "ADAM_STEPS", "build_bundle"]

#: The function an image given by the user is read with.
READ_IMAGE = "refseg.images.read_image"
#: Where the shipped photographs come from (not a refseg function).
PHOTO_SOURCE = "skimage.data"
#: The function drawing the edge-case images.
EDGE_CASE_FUNCTION = "refseg.golden.edge_cases.edge_case_images"


def _versions() -> dict:
    import PIL

    return {"refseg": __version__, "numpy": np.__version__,
            "python": platform.python_version(), "pillow": PIL.__version__,
            "compiler": sysconfig.get_config_var("CC"), "machine": platform.machine(),
            "system": platform.system()}



def _images(extra: dict | None):
    """The bundle's images {name: rgb}, their provenance and the function each came from:
    the photographs, the welds, the edge cases, then the user's images of ``extra``; and the
    welds."""
    photos, provenance = shipped_photos()
    welds, weld_provenance = synthetic_welds()
    edges, edge_provenance = edge_case_images()
    provenance.update(weld_provenance)
    provenance.update(edge_provenance)
    images = {**photos, **{name: s.rgb for name, s in welds.items()}, **edges}
    functions = {name: PHOTO_SOURCE if name in photos else
                 EDGE_CASE_FUNCTION if name in edges else WELD_FUNCTION for name in images}
    for name, (rgb, record) in (extra or {}).items():
        if name in images:
            raise InputError(f"{record.get('file', name)}: the image name {name!r} is one of "
                             "the bundle's own images; rename the file")
        images[name], provenance[name] = rgb, record
        functions[name] = READ_IMAGE
    return images, provenance, functions, welds


def _manifest(bundle: BundleBuilder, provenance: dict, network: dict,
              flagged_table) -> dict:
    cited = sorted({r for e in bundle.entries.values() for r in e["readings"]})
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "format_minor": FORMAT_MINOR,
        "schema": f"{SCHEMA}: the JSON Schema of this manifest ({schema()['$id']})",
        "arrays_file": ARRAYS, "versions": _versions(), "hash_rule": HASH_RULE,
        "readings_file": (f"{READINGS}: the text of the spec readings the entries cite "
                          f"({', '.join(cited)})"),
        "parts": MANIFEST_NOTES["parts"], "entry_fields": MANIFEST_NOTES["entry_fields"],
        "tolerance_rules": {**MANIFEST_NOTES["tolerance_rules"], "rounding": ROUNDING_RULE},
        "tolerances": TOLERANCES,
        "candidate": MANIFEST_NOTES["candidate"],
        "inputs": provenance, "network": network,
        "arrays": dict(bundle.entries),
        "flagged": flagged_table,
    }


def build_bundle(keep=(), extra: dict | None = None,
                 parts=PARTS) -> tuple[dict, dict, dict]:
    """Compute every golden array and the manifest, in memory.

    Parameters
    ----------
    keep : sequence of str
        Shell patterns: copies of the matching arrays stored as slices are returned whole
        (for checking refseg against its own bundle).
    extra : dict or None
        More images, {name: ((rows, cols, 3) uint8 array, provenance dict)}: their claim-1
        arrays and flagged vectors join those of the bundle's own images.
    parts : collection of str
        The parts (:data:`~refseg.golden.format.PARTS`) to compute; the inputs are always
        there. A bundle is written with all of them; a candidate of some parts needs only
        theirs (the network and its training are two thirds of the time), and the manifest
        then describes only what was computed.

    Returns
    -------
    manifest : dict
        Without ``files`` and ``arrays_file_sha256``, which
        :func:`refseg.golden.write.write_bundle` adds.
    arrays : dict of str to ndarray
        The members of ``arrays.npz``.
    kept : dict of str to ndarray
        The whole arrays named by ``keep`` that the bundle stores as slices.

    Raises
    ------
    InputError
        A shipped photograph does not match its recorded SHA-256.

    Notes
    -----
    1. Inputs: three photographs (crops of ``skimage.data`` images, :data:`PHOTOS`), the
       synthetic welds of :data:`WELD_SEEDS` and the small edge-case images of
       :mod:`~refseg.golden.edge_cases`, each with a note of what it exercises.
    2. Claim 1 on each: every intermediate of :func:`refseg.claim1.features.extract`, with
       every parameter of its step.
    3. The network at :data:`NET_HW`: seeded weights (their SHA-256; the weights themselves
       with ``--with-weights``), every layer's settings, the feature maps before and after
       the resize, the ten taps, every decoder layer, the prediction, the loss, the decoder
       gradients, Adam after :data:`ADAM_STEPS` steps.
    4. Each autograd op on small float64 tensors: inputs, output, gradients.
    5. The flagged vectors of every alternative reading on every image
       (:func:`refseg.golden.flagged.flagged_section`).

    Entries are in pipeline order; each names the arrays it is computed from. Steps 3 and 4
    take the reference route (``refseg.autograd.seam.reference_ops``) whatever the caller
    installed.

    References
    ----------
    Claims 1-4; [0075]-[0119], [0122]-[0197], [0242]-[0255].
    """
    images, provenance, functions, welds = _images(extra)
    bundle = BundleBuilder(keep=tuple(keep))
    for name, rgb in images.items():
        add_input(bundle, name, rgb, functions[name], provenance[name])
        if "claim1" in parts:
            add_claim1(bundle, name, rgb)
    flagged_table, network = {}, {}
    if "claim1" in parts:
        flagged_table, flagged_members = flagged_section(images)
        bundle.arrays.update(flagged_members)
    # the reference route even inside a block that installed a faster one: its products sum
    # in a fixed order, so the bytes follow neither the thread count nor the CPU
    with reference_ops():
        if "net" in parts:
            network = add_network(bundle, welds)
        if "ops" in parts:
            add_ops(bundle)
    return _manifest(bundle, provenance, network, flagged_table), bundle.arrays, bundle.kept
