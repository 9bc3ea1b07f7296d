"""Golden-file bundles: refseg's outputs, with their tolerances, for cross-checking other
implementations of the method.

:mod:`~refseg.golden.format` says what a bundle is (names, storage, tolerances, hashes),
:mod:`~refseg.golden.schema` its manifest's JSON Schema and validation,
:mod:`~refseg.golden.produce` computes one (claim 1 in :mod:`~refseg.golden.claim1_arrays`, the
network in :mod:`~refseg.golden.network_arrays`, the ops in :mod:`~refseg.golden.ops_arrays`, on
the images of :mod:`~refseg.golden.bundle_images`, described by
:mod:`~refseg.golden.descriptions`) and :mod:`~refseg.golden.write` writes it,
:mod:`~refseg.golden.flagged` its flagged vectors of the alternative readings and the diagnosis
by them,
:mod:`~refseg.golden.check` compares a candidate with one, :mod:`~refseg.golden.candidate`
writes refseg's own candidate, :mod:`~refseg.golden.own` reads the user's images,
:mod:`~refseg.golden.scale` compares folders of per-image files; :mod:`~refseg.golden.accepted`
reads accepted differences, and :mod:`~refseg.golden.outputs` writes a check's or a comparison's
JSON, JUnit XML (:mod:`~refseg.golden.junit`) and failure page
(:mod:`~refseg.golden.failure_page`).
"""
from refseg.golden import schema
from refseg.golden.check import CheckReport, CheckRow, check_bundle
from refseg.golden.format import (ARRAYS, FORMAT, FORMAT_MINOR, FORMAT_VERSION, MANIFEST, PARTS,
                                  READINGS, TOLERANCES, WEIGHTS, array_sha256, pinned_elements,
                                  read_bundle, read_weights, weights_sha256)
from refseg.golden.produce import build_bundle
from refseg.golden.write import WriteResult, export_weights, write_bundle

__all__ = ["ARRAYS", "FORMAT", "FORMAT_MINOR", "FORMAT_VERSION", "MANIFEST", "PARTS",
           "READINGS", "TOLERANCES", "WEIGHTS", "CheckReport", "CheckRow", "WriteResult",
           "array_sha256", "build_bundle", "check_bundle", "export_weights", "pinned_elements",
           "read_bundle", "read_weights", "schema", "weights_sha256", "write_bundle"]
