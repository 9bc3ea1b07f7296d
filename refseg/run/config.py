"""The settings of a training run and of the demo, their ranges and their checks.

Nothing here imports the network, the kernels or SciPy, so that ``refseg train``, ``refseg
demo`` and ``refseg synth`` refuse an option out of range before the heavy imports (in about a
third of a second), and ``refseg.run.training``, ``refseg.run.demo`` and
``refseg.data.synthetic`` hold the work itself. The names a
run is configured with have their homes in leaf modules below: the decoder's branches in
:mod:`refseg.models.parts`, the kinds of network input in :mod:`refseg.data.kinds`, the sizes
and counts of a synthetic data set in :mod:`refseg.data.synthetic_options`.
"""
from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass

from refseg.data.kinds import FEATURE_KINDS, INPUT_KINDS
from refseg.data.synthetic_options import MAX_COUNT
from refseg.errors import InputError
from refseg.cite import infrastructure
from refseg.models.parts import BRANCHES
from refseg.vocabulary import MAX_JOBS

#: The ranges of the numeric settings, checked before anything is read or written: wide
#: enough for any run on one machine, narrow enough that a typo fails at once instead of
#: running for days or asking for terabytes.
RANGES = {"epochs": (1, 10_000), "batch_size": (1, 1024), "calibration_images": (1, 100_000),
          "seed": (0, 2 ** 32 - 1), "jobs": (1, MAX_JOBS)}
#: Largest side of the network input (the patent's welds are 550x156).
MAX_INPUT_SIDE = 4096
#: Adam's learning rate lies in (0, MAX_LEARNING_RATE].
MAX_LEARNING_RATE = 1.0


@infrastructure("argument validation")
def check_range(value, name: str) -> int:
    """``value`` as an int within :data:`RANGES` [name]; InputError otherwise."""
    low, high = RANGES[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name}: expected an integer from {low} to {high}, got {value!r}")
    if not low <= value <= high:
        raise InputError(f"{name}: expected an integer from {low} to {high}, got {value}")
    return int(value)


@infrastructure("argument validation")
def check_input_size(input_hw) -> tuple[int, int]:
    """Each side a positive multiple of 32, at most :data:`MAX_INPUT_SIDE`."""
    try:
        h, w = (int(v) for v in input_hw)
    except (TypeError, ValueError):
        raise InputError(f"input size: expected two integers, got {input_hw!r}") from None
    if min(h, w) < 32 or max(h, w) > MAX_INPUT_SIDE or h % 32 or w % 32:
        raise InputError(f"input size: each side must be a multiple of 32 from 32 to "
                         f"{MAX_INPUT_SIDE}, got {h}x{w}")
    return h, w


def _check_rate(rate, name: str) -> None:
    if not (isinstance(rate, (int, float)) and 0 < rate <= MAX_LEARNING_RATE):
        raise InputError(f"{name}: expected a number in (0, {MAX_LEARNING_RATE:g}], got {rate}")


@dataclass
class TrainConfig:
    """Settings of a training run (all recorded in ``config.json``)."""

    epochs: int = 10
    batch_size: int = 8
    input_hw: tuple[int, int] = (64, 224)
    input_kind: str = "feature"
    seed: int = 0
    learning_rate: float = 1e-3
    validation_fraction: float = 0.2
    branches: tuple[str, ...] = BRANCHES
    weights: str | None = None
    #: load what fits of ``weights`` instead of refusing a file that lacks a backbone weight or
    #: holds one of the wrong shape, dtype or value
    partial_weights: bool = False
    #: calibrate the random backbones' batch norm on training images (R-frozen)
    calibrate: bool = True
    #: calibrate the batch norm of loaded backbones too (by default loaded weights and
    #: statistics are used as loaded)
    recalibrate: bool = False
    calibration_images: int = 32
    #: train the backbones too (an extension, R-frozen: the patent freezes them)
    train_backbone: bool = False
    #: a run folder whose last checkpoint (backbones and decoder) this run starts from,
    #: instead of random backbones with calibrated batch norm (an extension, R-frozen); its
    #: input size may differ (the network is fully convolutional)
    init_from: str | None = None
    #: ``(epoch, rate)`` pairs: from that epoch on, Adam's learning rate is ``rate``
    #: (an extension, R-adam: the patent keeps 0.001 throughout)
    learning_rate_steps: tuple[tuple[int, float], ...] = ()
    #: for the feature input: an alternative to refseg's claim-1 readings whose feature image
    #: the run trains on (``refseg.claim1.alternatives``; the sensitivity audit's runs);
    #: None: refseg's readings
    feature_reading: str | None = None

    def learning_rate_at(self, epoch: int) -> float:
        """Adam's learning rate during ``epoch`` (1-based)."""
        rate = self.learning_rate
        for first, value in sorted(self.learning_rate_steps):
            if epoch >= first:
                rate = value
        return rate

    def check(self):
        if self.input_kind not in INPUT_KINDS:
            raise InputError(f"--input must be one of {INPUT_KINDS}, got {self.input_kind!r}")
        for name in ("epochs", "batch_size", "calibration_images", "seed"):
            check_range(getattr(self, name), name)
        check_input_size(self.input_hw)
        if not 0 < self.validation_fraction < 1:
            raise InputError(f"validation fraction must lie in (0, 1), got "
                             f"{self.validation_fraction}")
        _check_rate(self.learning_rate, "learning rate")
        if self.feature_reading is not None:
            if self.input_kind not in FEATURE_KINDS:
                raise InputError(f"feature_reading applies to the inputs built from the "
                                 f"feature map ({', '.join(FEATURE_KINDS)}) only")
            # SciPy's ndimage comes with the alternatives: only runs that name one import it
            from refseg.claim1.alternatives import alternative

            alternative(self.feature_reading)
        if self.partial_weights and self.weights is None:
            raise InputError("--partial-weights needs --weights")
        if self.init_from is not None and self.weights is not None:
            raise InputError("--init-from and --weights exclude each other (the run named "
                             "by --init-from has its own backbone weights)")
        epochs = [first for first, _ in self.learning_rate_steps]
        if len(set(epochs)) != len(epochs):
            raise InputError(f"learning-rate steps name an epoch twice: {epochs}")
        for first, rate in self.learning_rate_steps:
            if not 2 <= int(first) <= RANGES["epochs"][1]:
                raise InputError(f"learning-rate step {first}:{rate}: the epoch must be >= 2")
            _check_rate(rate, f"learning-rate step {first}:{rate}: the rate")

    def to_json(self) -> dict:
        out = asdict(self)
        out["input_hw"], out["branches"] = list(self.input_hw), list(self.branches)
        out["learning_rate_steps"] = [list(step) for step in sorted(self.learning_rate_steps)]
        return out

    @classmethod
    def from_json(cls, data: dict) -> "TrainConfig":
        data = dict(data)
        data["input_hw"], data["branches"] = tuple(data["input_hw"]), tuple(data["branches"])
        data["learning_rate_steps"] = tuple(
            (int(first), float(rate)) for first, rate in data.get("learning_rate_steps", ()))
        return cls(**data)


#: The runs of the demo: name, branches, input kind (the first is the patent's network).
RUNS = (("fusion-feature", BRANCHES, "feature"),
        ("fusion-gray", BRANCHES, "gray"),
        ("resnet50v2-feature", ("resnet50v2",), "feature"),
        ("mobilenetv2-feature", ("mobilenetv2",), "feature"))


@dataclass
class DemoSettings:
    """Settings of ``refseg demo`` (recorded in ``demo.json``): the training and test set
    sizes, the epochs, batch size and input size of every run, the seed, the processes that
    draw the welds and extract claim 1, and the runs (:data:`RUNS`); checked as they are
    made."""

    count: int = 160
    test_count: int = 40
    epochs: int = 8
    batch_size: int = 8
    input_hw: tuple[int, int] = (64, 224)
    seed: int = 0
    jobs: int | None = None
    runs: tuple = RUNS
    #: train the backbones too (an extension, R-frozen; the patent freezes them)
    train_backbone: bool = False
    #: keep the weights of every run (by default only the patent's network and the best run
    #: keep theirs: a fusion run's take 50-80 MB)
    keep_checkpoints: bool = False

    def __post_init__(self):
        if self.count < 5 or self.test_count < 1 or self.epochs < 1:
            raise InputError("demo: --count must be >= 5, --test-count and --epochs >= 1")
        for name, value in (("--count", self.count), ("--test-count", self.test_count)):
            if value > MAX_COUNT:
                raise InputError(f"demo: {name} must be at most {MAX_COUNT}, got {value}")
        check_range(self.epochs, "epochs")
        check_range(self.seed, "seed")
        if self.jobs is not None:
            check_range(self.jobs, "jobs")
        self.input_hw = check_input_size(self.input_hw)

    def command(self, out) -> str:
        """The ``refseg demo`` command line that runs these settings into ``out``."""
        defaults = DemoSettings()
        parts = ["refseg demo", f"--out {out}"]
        for name, flag in (("count", "--count"), ("test_count", "--test-count"),
                           ("epochs", "--epochs"), ("seed", "--seed"), ("jobs", "--jobs")):
            if getattr(self, name) != getattr(defaults, name):
                parts.append(f"{flag} {getattr(self, name)}")
        if self.input_hw != defaults.input_hw:
            parts.append(f"--input-size {self.input_hw[0]}x{self.input_hw[1]}")
        parts += [flag for flag, on in (("--train-backbone", self.train_backbone),
                                        ("--keep-checkpoints", self.keep_checkpoints)) if on]
        if self.runs != RUNS or self.batch_size != defaults.batch_size:
            # settings the command line does not offer (refseg.run.config.DemoSettings)
            parts.append(f"(from Python: batch {self.batch_size}, runs "
                         f"{', '.join(name for name, _, _ in self.runs)})")
        return " ".join(parts)
