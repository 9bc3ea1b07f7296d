"""The verbs of the ``refseg`` command line: one :class:`~refseg.commands.verb.Verb` each, its
arguments beside its handler, gathered in :data:`VERBS`, the one list of commands.

``refseg.cli`` builds the parser from :data:`VERBS` and dispatches to the chosen verb's
handler. README.md's command table and docs/guide.md's command list are held to the parser by
``tests/test_cli_docs.py``. Nothing in refseg imports this package but the command line.
"""
from __future__ import annotations

from refseg.commands import claim1, golden, models, run, spec

INFRASTRUCTURE = "the command line: the table of verbs"

#: The help line of each family of verbs (``refseg golden check``: family "golden").
FAMILIES = {
    "weights": "convert and inspect backbone weight files",
    "model": "the fusion network of claims 2-4",
    "dataset": "data set folders (images/ and labels/)",
    "audit": "audits of refseg's own choices",
    "golden": "golden-file bundles for cross-checking other implementations",
}

#: Every verb, in the order of ``refseg --help``.
VERBS = (
    claim1.EDGES, run.DEMO, run.REPORT, spec.TRACE, spec.EXPLAIN,
    models.WEIGHTS_CONVERT, models.WEIGHTS_INSPECT, models.MODEL_SUMMARY,
    run.SYNTH, run.DATASET_CHECK, run.TRAIN, run.PREDICT, run.EVALUATE,
    spec.AUDIT_READINGS,
    golden.WRITE, golden.CANDIDATE, golden.CHECK, golden.REFERENCE, golden.COMPARE,
    golden.WEIGHTS,
)
