"""A demo or run folder as the reports read it: ``demo.json``, ``scores.json``, each run's
``config.json``, ``metrics.jsonl`` and ``pruned.json``, and the claim-1 outputs of the first
images, each checked as it is read (:mod:`refseg.run.records`); and the machine a report is
made on.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from refseg.errors import InputError
from refseg.images import read_image
from refseg.run import records


class Source:
    """What a demo or run folder holds, read once and checked.

    Attributes
    ----------
    folder, shown : Path
        The folder, and the folder as the pages name it (where a staged demo will be).
    kind : {"demo", "run"}
    record : dict
        ``demo.json`` ({} without one).
    scores : list of dict
        ``scores.json``'s rows, the patent's network first ([] for a run).
    runs : list of dict
        Per run: name, path, config, history, pruned, has_weights, weight_bytes,
        train_seconds.
    welds : list of dict
        The first two claim-1 images of a demo: stem, arrays, report, input, label.
    """

    def __init__(self, folder: Path, shown: Path):
        self.folder, self.shown = folder, shown
        if (folder / "runs").is_dir() and (folder / "scores.json").is_file():
            self.kind = "demo"
        elif (folder / "config.json").is_file() and (folder / "metrics.jsonl").is_file():
            self.kind = "run"
        else:
            raise InputError(f"{folder}: not a folder of refseg demo (scores.json and runs/) "
                             "or of refseg train (config.json and metrics.jsonl)")
        self.record = records.check_demo_record(folder / "demo.json", _json(
            folder / "demo.json")) if (folder / "demo.json").is_file() else {}
        self.scores = records.check_scores(folder / "scores.json", _json(
            folder / "scores.json"), folder / "runs") if self.kind == "demo" else []
        if self.kind == "demo":
            recorded = {r["name"]: r for r in self.record.get("runs", [])}
            names = [r["run"] for r in self.scores]
            self.runs = [self._run(folder / "runs" / n, n, recorded.get(n, {})) for n in names]
        else:
            self.runs = [self._run(folder, folder.name, {})]
        self.welds = self._welds() if self.kind == "demo" else []

    def _run(self, path: Path, name: str, recorded: dict) -> dict:
        config = _config(path / "config.json") if (path / "config.json").is_file() else {}
        history = records.read_history(path / "metrics.jsonl") \
            if (path / "metrics.jsonl").is_file() else []
        pruned = _json(path / "pruned.json") if (path / "pruned.json").is_file() else None
        if pruned is not None and (not isinstance(pruned, dict) or not isinstance(
                pruned.get("bytes"), int) or pruned["bytes"] < 0):
            raise InputError(f"{path / 'pruned.json'}: an object with a byte count expected")
        has_weights = (path / "checkpoint.npz").is_file()
        size = sum((path / f).stat().st_size for f in ("checkpoint.npz", "backbones.npz")
                   if (path / f).is_file())
        return {"name": name, "path": path, "config": config, "history": history,
                "pruned": pruned, "has_weights": has_weights,
                "weight_bytes": size if has_weights else (pruned or {}).get("bytes"),
                "train_seconds": recorded.get("train_seconds")}

    def _welds(self) -> list[dict]:
        stems = self.record.get("claim1_images") or sorted(
            p.name for p in (self.folder / "claim1").iterdir() if p.is_dir()) \
            if (self.folder / "claim1").is_dir() else []
        welds = []
        for stem in stems[:2]:
            where = self.folder / "claim1" / stem
            if not (where / "features.npz").is_file():
                continue
            with np.load(where / "features.npz", allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            weld = {"stem": stem, "arrays": arrays, "report": _json(where / "report.json")}
            for key, sub in (("input", "images"), ("label", "labels")):
                found = sorted((self.folder / "data" / sub).glob(f"{stem}.*"))
                weld[key] = read_image(found[0], raise_hint=None).pixels if found else None
            welds.append(weld)
        return welds

    @property
    def input_hw(self):
        hw = self.record.get("settings", {}).get("input_hw") or \
            (self.runs[0]["config"].get("input_hw") if self.runs else None)
        return tuple(hw) if hw else None


def _json(path: Path):
    return records.read_json(path)


def _config(path: Path) -> dict:
    """A run's settings as recorded, after checking them as ``TrainConfig`` does."""
    records.read_run_config(path)
    return _json(path)
