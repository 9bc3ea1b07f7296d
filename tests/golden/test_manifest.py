"""The manifest's JSON Schema and the validation of every field before use: bundles conform
to the schema (checked with the jsonschema library, independently of refseg's own
validator), and a malformed manifest, whatever it holds, ends in one line
`refseg: error: <file>: <problem>` with exit status 2 and no traceback."""
import json
import os

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refseg import cli, golden
from refseg.golden import schema

IMAGE = "claim1/coffee"


@pytest.fixture
def light(golden_bundle, tmp_path):
    """A copy of the session bundle whose manifest can be rewritten: the other files linked,
    weights.npz left out."""
    folder = tmp_path / "light"
    folder.mkdir()
    for name in ("arrays.npz", "readings.md", "manifest.schema.json"):
        os.symlink(golden_bundle[0] / name, folder / name)
    text = (golden_bundle[0] / "manifest.json").read_text(encoding="utf-8")
    candidate = tmp_path / "candidate.npz"
    np.savez(candidate, **{f"{IMAGE}/gray": np.zeros((160, 224))})
    return folder, text, candidate


def _run(argv, capsys):
    status = cli.main(argv)
    captured = capsys.readouterr()
    return status, captured.err


@pytest.mark.infrastructure
def test_every_bundle_conforms_to_its_shipped_schema(golden_bundle):
    folder, manifest = golden_bundle[:2]
    shipped = json.loads((folder / "manifest.schema.json").read_text(encoding="utf-8"))
    assert shipped == schema.schema()
    assert shipped["$id"].endswith(f":{golden.FORMAT_VERSION}")
    assert shipped["properties"]["format_version"]["const"] == golden.FORMAT_VERSION
    jsonschema.Draft202012Validator.check_schema(shipped)
    jsonschema.Draft202012Validator(shipped).validate(manifest)
    assert schema.validate(manifest, shipped) is None


def _tampered(text, change):
    manifest = json.loads(text)
    change(manifest, manifest["arrays"][f"{IMAGE}/gray"], manifest["arrays"][
        "net/grad/x1/kernel"])
    return json.dumps(manifest)


@pytest.mark.infrastructure
@pytest.mark.parametrize("change, message", [
    (lambda m, e, s: s["stats"].update(max_abs=float("nan")), "NaN is not a number JSON allows"),
    (lambda m, e, s: s["stats"].update(l2=float("inf")), "Infinity is not a number"),
    (lambda m, e, s: s["stats"].update(sum=-float("inf")), "-Infinity is not a number"),
    (lambda m, e, s: e["tolerance"].update(rtol=2e-9), "is not one of the format's"),
    (lambda m, e, s: e["tolerance"].update(name="float32", rule="relmax", rtol=1e-4),
     "is not one of the format's"),
    (lambda m, e, s: e.update(claim=["claim1.step2.gray"]), "claim must be string, got ["),
    (lambda m, e, s: e.update(computed_from=[["input/coffee"]]),
     "computed_from[0] must be string"),
    (lambda m, e, s: m["flagged"]["vectors"][0].update(flags="R-gray"),
     "flags must be array"),
    (lambda m, e, s: m["network"].update(input_hw=[32]), "input_hw has 1 items"),
    (lambda m, e, s: m["flagged"]["vectors"][0]["arrays"].update(
        {"claim1/nowhere/gray": m["flagged"]["vectors"][0]["arrays"][
            next(iter(m["flagged"]["vectors"][0]["arrays"]))]}), "not an array of the manifest"),
])
def test_a_manifest_refused_before_use(light, capsys, change, message):
    folder, text, candidate = light
    (folder / "manifest.json").write_text(_tampered(text, change), encoding="utf-8")
    status, err = _run(["golden", "check", str(folder), str(candidate)], capsys)
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"refseg: error: {folder / 'manifest.json'}: ") and message in err


@pytest.mark.infrastructure
def test_an_overflowing_number_and_deep_brackets_are_refused(light, capsys):
    folder, text, candidate = light
    for bad, message in ((text.replace('"max_abs": ', '"max_abs": 1e999, "x": ', 1),
                          "number 1e999 is out of range"),
                         ('{"format": "refseg-golden", "x": ' + "[" * 100000 + "]" * 100000
                          + "}", "nested deeper than a manifest")):
        (folder / "manifest.json").write_text(bad, encoding="utf-8")
        status, err = _run(["golden", "check", str(folder), str(candidate)], capsys)
        assert status == 2 and err.count("\n") == 1 and message in err, err


@pytest.mark.infrastructure
def test_golden_weights_refuses_a_manifest_without_the_network_size(light, capsys, tmp_path):
    folder, text, _ = light
    (folder / "manifest.json").write_text(_tampered(text, lambda m, e, s: m["network"].pop(
        "input_hw")), encoding="utf-8")
    out = tmp_path / "w.npz"
    status, err = _run(["golden", "weights", str(folder), str(out)], capsys)
    assert status == 2 and err.count("\n") == 1 and "network has no 'input_hw'" in err
    assert not out.exists()


#: JSON values, NaN and infinities included (Python's json writes them, so they reach the
#: reader as the tokens NaN and Infinity).
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats()
    | st.text(max_size=12) | st.sampled_from(["claim1/coffee/gray", "R-gray", "exact",
                                             "summary", "0" * 64]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6)


def _paths(value, prefix=()):
    """Every path into a manifest that a fuzzed change may hit (arrays: a few entries)."""
    yield prefix
    if isinstance(value, dict):
        keys = list(value)
        if prefix == ("arrays",):
            keys = [f"{IMAGE}/gray", f"{IMAGE}/edges/canny", "net/grad/x1/kernel"]
        elif prefix == ("flagged", "notes"):
            keys = keys[:2]
        for key in keys:
            yield from _paths(value[key], prefix + (key,))
    elif isinstance(value, list):
        for i in range(min(len(value), 2)):
            yield from _paths(value[i], prefix + (i,))


@pytest.mark.infrastructure
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_manifests_fail_in_one_line_through_the_cli(light, capsys, data):
    """A manifest with one field replaced by any JSON value, or removed: `golden check`
    either runs (0 or 1) or ends with one `refseg: error:` line naming the bundle (2); never
    a traceback."""
    folder, text, candidate = light
    manifest = json.loads(text)
    paths = [p for p in _paths(manifest) if p and p[0] not in ("versions", "inputs")]
    path = data.draw(st.sampled_from(paths))
    parent = manifest
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(_VALUES)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    status = cli.main(["golden", "check", str(folder), str(candidate), "--select",
                       f"{IMAGE}/*"])
    err = capsys.readouterr().err
    if status == 2:
        assert err.count("\n") == 1 and err.startswith("refseg: error: "), err
        assert str(folder) in err
    else:
        assert status in (0, 1) and "Traceback" not in err


@pytest.mark.infrastructure
def test_the_validator_agrees_with_jsonschema_on_small_documents():
    """refseg's subset validator and the jsonschema library accept and refuse the same
    values of the schema's definitions (the runtime validates without the library)."""
    full = schema.schema()
    cases = {"sha256": ["0" * 64, "0" * 63, 5, "G" * 64],
             "name": ["claim1/a/gray", "a//b", "", ["x"], "a b"],
             "shape": [[1, 2], [-1], [1.5], "3", [0] * 9],
             "dtype": ["<f8", "|u1", "f8", "<c16"],
             "stats": [{"sum": 1, "abs_sum": 1, "l2": 1, "max_abs": 1},
                       {"sum": 1, "abs_sum": -1, "l2": 1, "max_abs": 1},
                       {"sum": "1", "abs_sum": 1, "l2": 1, "max_abs": 1}, {}]}
    for name, values in cases.items():
        node = {"$ref": f"#/$defs/{name}", "$defs": full["$defs"]}
        for value in values:
            ours = schema.validate(value, node) is None
            theirs = jsonschema.Draft202012Validator(node).is_valid(value)
            assert ours == theirs, (name, value)
