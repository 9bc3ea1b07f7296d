"""Golden-file bundles: refseg's outputs, with their tolerances, for cross-checking other
implementations of the method.

:mod:`~refseg.golden.format` says what a bundle is (names, storage, tolerances, hashes),
:mod:`~refseg.golden.produce` computes and writes one, :mod:`~refseg.golden.check` compares a
candidate with one.
"""
from refseg.golden.check import CheckReport, CheckRow, check_bundle
from refseg.golden.format import (ARRAYS, FORMAT, FORMAT_VERSION, MANIFEST, PARTS, READINGS,
                                  TOLERANCES, WEIGHTS, array_sha256, pinned_elements,
                                  read_bundle, read_weights, weights_sha256)
from refseg.golden.produce import WriteResult, build_bundle, export_weights, write_bundle

__all__ = ["ARRAYS", "FORMAT", "FORMAT_VERSION", "MANIFEST", "PARTS", "READINGS", "TOLERANCES",
           "WEIGHTS", "CheckReport", "CheckRow", "WriteResult", "array_sha256", "build_bundle",
           "check_bundle", "export_weights", "pinned_elements", "read_bundle", "read_weights",
           "weights_sha256", "write_bundle"]
