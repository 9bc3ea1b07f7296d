"""Refseg's own candidate for a bundle (the self-check): ``refseg golden candidate DIR OUT.npz``
writes what this refseg computes for every array of a bundle, whole, so that ``refseg golden
check DIR OUT.npz`` shows the bundle and the installed refseg agree before an outside
implementation is checked.
"""
from __future__ import annotations

from pathlib import Path

from refseg import publish
from refseg.golden.format import chosen_parts, part_of, read_bundle
from refseg.golden.own import READ_FUNCTION

INFRASTRUCTURE = "golden files: refseg's own candidate"


def own_candidate(folder, out, parts=None) -> tuple[int, list[str]]:
    """Write refseg's own candidate for a bundle: every array of its manifest (or of its
    ``parts``), whole, as this refseg computes it (the bundle's own images read from the
    bundle).

    Parameters
    ----------
    folder : str or Path
        The bundle.
    out : str or Path
        The ``.npz`` to write (atomically).
    parts : sequence of str or None
        Only the arrays of these parts (:data:`~refseg.golden.format.PARTS`); None: all.
        InputError, before any work, on a name that is not a part.

    Returns
    -------
    count : int
        Arrays written.
    missing : list of str
        Names of the manifest this refseg does not compute (another version wrote it).
    """
    from refseg.golden.produce import build_bundle

    parts = chosen_parts(parts)
    manifest, stored = read_bundle(folder)
    extra = {name.split("/", 1)[1]: (stored[name], manifest["inputs"].get(
                 name.split("/", 1)[1], {}))
             for name, entry in manifest["arrays"].items()
             if name.startswith("input/") and entry["function"] == READ_FUNCTION}
    _, arrays, kept = build_bundle(keep=("*",), extra=extra, parts=parts)
    candidate, missing = {}, []
    for name in manifest["arrays"]:
        if part_of(name) not in parts:
            continue
        value = kept.get(name, arrays.get(name))
        if value is None:
            missing.append(name)
        else:
            candidate[name] = value
    publish.write_npz(Path(out), compressed=True, **candidate)
    return len(candidate), missing
