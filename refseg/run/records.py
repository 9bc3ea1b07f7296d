"""The JSON records of run and demo folders, read and checked against their schemas (types and
ranges) before anything uses them: a damaged or hand-edited file ends with one line naming it,
never with a traceback halfway through a report.

The records: a run's ``metrics.jsonl`` (one object per epoch), a demo's ``scores.json`` (one
object per run) and ``demo.json``; a run's ``config.json`` is ``TrainConfig``'s to check. And
``machine``: the machine a record was made on.
"""
from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path

import numpy as np

from refseg.backend import cpu_model
from refseg.cite import infrastructure
from refseg.errors import InputError, kind_of, reason
from refseg.jsontext import bracket_depth
from refseg.run.config import TrainConfig

INFRASTRUCTURE = "reading the records of run and demo folders"

#: Every epoch's entry in ``metrics.jsonl``: these numbers, finite.
EPOCH_NUMBERS = ("train_loss", "train_pixel_accuracy", "val_loss", "val_pixel_accuracy",
                 "val_miou", "seconds")
#: Every row of ``scores.json``: these numbers, finite (or null where a class is absent).
SCORE_NUMBERS = ("pixel_accuracy", "mean_iou", "seconds_per_image")
#: Fractions in [0, 1].
_FRACTIONS = ("train_pixel_accuracy", "val_pixel_accuracy", "val_miou", "pixel_accuracy",
              "mean_iou")
#: Nesting deeper than this is not a record refseg wrote (and would exhaust the parser).
MAX_DEPTH = 32


def read_json(path: Path, what: str = "JSON"):
    """The value of a JSON file; InputError naming it when it cannot be read or parsed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot be read as {what} ({exc})") from None
    return parse_json(text, path, what)


def parse_json(text: str, path, what: str = "JSON"):
    """``text`` parsed, refusing NaN/Infinity literals and absurd nesting."""
    if bracket_depth(text) > MAX_DEPTH:
        raise InputError(f"{path}: nested more than {MAX_DEPTH} levels deep; not {what} "
                         "refseg wrote")

    def refuse(constant):
        raise ValueError(f"{constant} is not a number JSON allows")
    try:
        return json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not {what} ({exc})") from None


def _number(value, path, where: str, fraction: bool = False, none_ok: bool = False):
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value):
        raise InputError(f"{path}: {where} must be a finite number, got {json.dumps(value)}")
    if fraction and not 0 <= value <= 1:
        raise InputError(f"{path}: {where} must lie in [0, 1], got {value}")
    if value < 0:
        raise InputError(f"{path}: {where} must not be negative, got {value}")
    return value


def read_history(path: Path) -> list[dict]:
    """A run's ``metrics.jsonl``: one object per line, epochs 1, 2, ... in order, each with the
    numbers of :data:`EPOCH_NUMBERS`."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot be read ({exc})") from None
    history = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        entry = parse_json(line, f"{path}: line {number}", "a JSON object")
        if not isinstance(entry, dict):
            raise InputError(f"{path}: line {number}: an object expected, got "
                             f"{kind_of(entry)}")
        epoch = entry.get("epoch")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch != len(history) + 1:
            raise InputError(f"{path}: line {number}: epoch {len(history) + 1} expected, got "
                             f"{json.dumps(epoch)}")
        for name in EPOCH_NUMBERS:
            _number(entry.get(name), path, f"line {number}: {name}", name in _FRACTIONS)
        history.append(entry)
    return history


def check_scores(path: Path, rows, runs: Path) -> list[dict]:
    """A demo's ``scores.json``: a non-empty list of objects, each naming a run folder under
    ``runs`` and holding the numbers of :data:`SCORE_NUMBERS` and ``class_iou``."""
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{path}: a non-empty list of score rows expected, got "
                         f"{json.dumps(rows)[:40]}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InputError(f"{path}: row {i}: an object expected, got {kind_of(row)}")
        name = row.get("run")
        if not isinstance(name, str) or not name or name in (".", "..") or "/" in name \
                or "\\" in name or "\0" in name:
            raise InputError(f"{path}: row {i}: run must name a folder of {runs}, got "
                             f"{json.dumps(name)}")
        for key in SCORE_NUMBERS:
            _number(row.get(key), path, f"row {i}: {key}", key in _FRACTIONS)
        ious = row.get("class_iou")
        if not isinstance(ious, list):
            raise InputError(f"{path}: row {i}: class_iou must be a list")
        for value in ious:
            _number(value, path, f"row {i}: class_iou", True, none_ok=True)
    return rows


def check_demo_record(path: Path, record) -> dict:
    """A demo's ``demo.json``: an object whose ``runs`` (if any) is a list of objects with a
    ``name``, whose ``settings`` (if any) is an object and ``claim1_images`` a list of names."""
    if not isinstance(record, dict):
        raise InputError(f"{path}: an object expected, got {kind_of(record)}")
    runs = record.get("runs", [])
    if not isinstance(runs, list) or not all(
            isinstance(r, dict) and isinstance(r.get("name"), str) for r in runs):
        raise InputError(f"{path}: runs must be a list of objects with a name")
    if not isinstance(record.get("settings", {}), dict):
        raise InputError(f"{path}: settings must be an object")
    hw = record.get("settings", {}).get("input_hw")
    if hw is not None and (not isinstance(hw, list) or len(hw) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 100_000 for v in hw)):
        raise InputError(f"{path}: settings.input_hw must be two positive integers")
    images = record.get("claim1_images")
    if images is not None and (not isinstance(images, list) or not all(
            isinstance(s, str) and s and "/" not in s and s not in (".", "..")
            for s in images)):
        raise InputError(f"{path}: claim1_images must be a list of folder names")
    return record


def read_run_config(path: Path) -> TrainConfig:
    """A run's ``config.json`` as :class:`~refseg.run.config.TrainConfig`, its types and ranges
    checked; InputError naming the file otherwise."""
    data = read_json(path, "the settings of a refseg run")
    try:
        config = TrainConfig.from_json(data)
        config.check()
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(f"{path}: not the settings of a refseg run "
                         f"({reason(exc)})") from None
    return config


@infrastructure("the record of the machine a report was made on")
def machine() -> dict:
    """The machine, as a report's header states it: CPU model, cores, system, Python, NumPy."""
    cpu = cpu_model() or platform.processor() or platform.machine()
    return {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__}
