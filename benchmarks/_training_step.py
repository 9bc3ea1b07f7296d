"""The training steps bench_ops.py measures, each in a fresh child process of that script
(``run_train_child``): the decoder's step on random taps at 224x224 (``RefsegTrainer``,
``TorchTrainer``), the step the demo trains (``DemoTrainer``: the decoder on cached backbone
taps at the demo's input size, refseg's own ``training_step`` against the same decoder in
torch), and the whole network's (``RefsegNetTrainer``, ``TorchNetTrainer``: ``refseg train
--train-backbone``); time per step and peak RSS, and their report tables.
"""
from __future__ import annotations

import collections
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import _decoder_layers as layers
from _common import OtherLoad, Report, proc_status_mb, reset_peak_rss, verdict, wait_until_quiet
from _decoder_layers import ADDS, LAYERS, ORDER, TAPS, refseg_layer, torch_layer
from refseg import autograd as ag
from refseg.engine.training import threads as refseg_threads
from refseg.autograd.optim import Adam as RefsegAdam
from refseg.models.parts import CLASSES
from refseg.engine.training.threads import bits_independent_of_load

#: the script whose --train-child option runs train_child
SCRIPT = Path(__file__).resolve().parent / "bench_ops.py"


# --- the decoder training step -------------------------------------------------------------

def decoder_inputs(batch: int, seed: int = 3) -> tuple[dict, np.ndarray]:
    """Random NHWC taps (non-negative, as after a relu) and integer labels (N, 224, 224)."""
    rng = np.random.default_rng(seed)
    taps = {name: rng.random((batch, *shape), dtype=np.float32) for name, shape in TAPS.items()}
    size = LAYERS["prediction"].out_size
    return taps, rng.integers(0, CLASSES, size=(batch, size, size))


def decoder_weights(seed: int = 4) -> dict:
    """name -> (kernel, bias), Keras layouts, He-scaled so activations stay O(1)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for layer in LAYERS.values():
        scale = np.sqrt(2.0 / (layer.k * layer.k * layer.cin))
        weights[layer.name] = ((scale * rng.standard_normal(layer.kernel_shape()))
                               .astype(np.float32), np.zeros(layer.cout, np.float32))
    return weights


def parameter_count() -> int:
    return sum(layer.k * layer.k * layer.cin * layer.cout + layer.cout
               for layer in LAYERS.values())


class RefsegTrainer:
    """One decoder training step in refseg: forward, loss, backward, update."""

    def __init__(self, batch: int, learning_rate: float = 1e-3):
        self.taps, self.labels = decoder_inputs(batch)
        self.params = {}
        for name, (kernel, bias) in decoder_weights().items():
            self.params[name] = (ag.Tensor(kernel, requires_grad=True, name=f"{name}/kernel"),
                                 ag.Tensor(bias, requires_grad=True, name=f"{name}/bias"))
        flat = [t for pair in self.params.values() for t in pair]
        self.optimizer = RefsegAdam(flat, learning_rate=learning_rate)

    def step(self) -> float:
        values = {name: ag.Tensor(array) for name, array in self.taps.items()}  # frozen
        for name in ORDER:
            if name in ADDS:
                a, b = ADDS[name]
                values[name] = ag.add(values[a], values[b])
                continue
            layer = LAYERS[name]
            y = refseg_layer(layer)(values[layer.src], *self.params[name])
            values[name] = ag.softmax(y) if name == "prediction" else ag.relu(y)
        loss = ag.categorical_crossentropy(values["prediction"], self.labels)
        del values  # the graph lives on through `loss` only, and is freed by backward
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return float(loss.data)


class TorchTrainer:
    """The same step in torch (NCHW or channels_last), with layers.torch.optim.Adam."""

    def __init__(self, batch: int, channels_last: bool, learning_rate: float = 1e-3):
        fmt = layers.torch.channels_last if channels_last else layers.torch.contiguous_format
        taps, labels = decoder_inputs(batch)
        self.taps = {k: layers.torch.from_numpy(v.transpose(0, 3, 1, 2)).contiguous(memory_format=fmt)
                     for k, v in taps.items()}
        self.labels = layers.torch.from_numpy(labels)
        self.params = {}
        for name, (kernel, bias) in decoder_weights().items():
            w = layers.torch.from_numpy(kernel.transpose(3, 2, 0, 1)).contiguous(memory_format=fmt)
            self.params[name] = (w.requires_grad_(), layers.torch.from_numpy(bias).requires_grad_())
        flat = [t for pair in self.params.values() for t in pair]
        self.optimizer = layers.torch.optim.Adam(flat, lr=learning_rate, eps=1e-7)

    def step(self) -> float:
        values = dict(self.taps)
        for name in ORDER:
            if name in ADDS:
                a, b = ADDS[name]
                values[name] = values[a] + values[b]
                continue
            layer = LAYERS[name]
            y = torch_layer(layer)(values[layer.src], *self.params[name])
            values[name] = layers.torch.softmax(y, dim=1) if name == "prediction" else layers.torch.relu(y)
        # refseg's loss: mean over pixels of -log(clip(p, 1e-7, 1 - 1e-7)) at the true class
        p = values["prediction"].clamp(1e-7, 1 - 1e-7)
        loss = -layers.torch.log(p.gather(1, self.labels[:, None])).mean()
        del values, p
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


# --- the whole-network training step (refseg train --train-backbone) ----------------------

def net_config():
    """The training settings the step is taken from: ``refseg train``'s defaults (batch 8 at
    64x224, both backbones, Adam at 1e-3)."""
    from refseg.run.config import TrainConfig

    return TrainConfig(train_backbone=True)


def net_inputs(batch: int, hw, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Random NHWC images in [-1, 1] (the network's input range) and integer labels."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (batch, *hw, 3)).astype(np.float32)
    return x, rng.integers(0, CLASSES, size=(batch, *hw))


class RefsegStep:
    """refseg/run/training.py's ``training_step`` on a model and its source (images, or cached
    taps by name), Adam over the model's trainable parameters at the training defaults."""

    def __init__(self, model, source, labels):
        from refseg.run.training import training_step

        self.model, self.source, self.labels = model, source, labels
        self.model.set_training(True)
        self.index = np.arange(len(labels))
        self.training_step = training_step
        params = self.model.trainable_parameters()
        self.parameters = sum(p.data.size for p in params)
        self.optimizer = RefsegAdam(params, learning_rate=net_config().learning_rate)

    def step(self) -> float:
        # training's own step, sized to the load, its products cut for the process's thread
        # count, as refseg.run.training.train runs it
        with bits_independent_of_load():
            p, loss = self.training_step(self.model, self.optimizer, self.source, self.index,
                                         self.labels)
        del p
        return float(loss.data)


class RefsegNetTrainer(RefsegStep):
    """One step of ``refseg train --train-backbone`` (refseg/run/training.py, _train_epoch):
    both backbones unfrozen, training mode (batch norm on batch statistics), forward,
    per-pixel cross-entropy, backward, Adam. The data set and claim-1 extraction are not
    part of the step: the images are random."""

    def __init__(self, batch: int):
        from refseg.models import ResMobileNet

        config = net_config()
        model = ResMobileNet(config.input_hw, branches=config.branches, seed=config.seed)
        for branch in config.branches:
            model.freeze(branch, frozen=False)
        super().__init__(model, *net_inputs(batch, config.input_hw))


class TorchNetTrainer:
    """The same step in torch: ``_torch_net.TorchResMobileNet`` with refseg's initial
    weights, trainable, in training mode; refseg's loss; torch.optim.Adam (epsilon 1e-7, as
    refseg's)."""

    def __init__(self, batch: int, channels_last: bool):
        from _torch_net import TorchResMobileNet

        from refseg.models import ResMobileNet

        config = net_config()
        model = ResMobileNet(config.input_hw, branches=config.branches, seed=config.seed)
        self.net = TorchResMobileNet(model.weights(), channels_last=channels_last,
                                     trainable=True).train()
        del model
        gc.collect()
        x, labels = net_inputs(batch, config.input_hw)
        tx = layers.torch.from_numpy(x).permute(0, 3, 1, 2)  # channels_last: a view of NHWC
        self.x = tx if channels_last else tx.contiguous()
        self.labels = layers.torch.from_numpy(labels)
        params = list(self.net.parameters())
        self.parameters = sum(p.numel() for p in params)
        self.optimizer = layers.torch.optim.Adam(params, lr=config.learning_rate, eps=1e-7)

    def step(self) -> float:
        p = self.net(self.x).clamp(1e-7, 1 - 1e-7)
        loss = -layers.torch.log(p.gather(1, self.labels[:, None])).mean()
        del p
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


# --- the demo's step: the decoder on cached taps (refseg demo, refseg train) ----------------

DEMO_IMPLS = ("refseg-demo", "torch-demo", "torch-demo-cl")


def demo_setup(batch: int):
    """(model, taps, labels) of the demo's step: ``refseg train``'s defaults (input size, seed,
    both branches, frozen backbones), the taps of random images computed once by refseg's
    frozen backbones (as training caches them), random labels."""
    from refseg.models import ResMobileNet

    config = net_config()
    model = ResMobileNet(config.input_hw, branches=config.branches, seed=config.seed)
    x, labels = net_inputs(batch, config.input_hw)
    return model, model.taps(x), labels


class RefsegDemoTrainer(RefsegStep):
    """One step of the demo's training: refseg/run/training.py's ``training_step`` on cached
    taps (the decoder alone trainable, Adam), inside ``bits_independent_of_load`` as training
    runs it."""

    def __init__(self, batch: int):
        super().__init__(*demo_setup(batch))


class TorchDemoTrainer:
    """The same step in torch: the decoder of ``refseg.models.decoder.DECODER`` with refseg's
    initial weights (Keras layouts transposed to torch's), on the same taps, refseg's loss,
    torch.optim.Adam (epsilon 1e-7, as refseg's)."""

    def __init__(self, batch: int, channels_last: bool):
        from refseg.models.parts import DECODER

        torch = layers.torch
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        model, taps, labels = demo_setup(batch)
        weights = model.weights()
        self.rows = DECODER
        self.taps = {k: torch.from_numpy(v.transpose(0, 3, 1, 2).copy())
                     .contiguous(memory_format=fmt) for k, v in taps.items()}
        self.params = {}
        for row in DECODER:
            if row.op != "add":
                # Conv2D (kh, kw, in, out) and Conv2DTranspose (kh, kw, out, in) alike
                kernel = weights[f"{row.name}/kernel"].transpose(3, 2, 0, 1).copy()
                self.params[row.name] = (
                    torch.from_numpy(kernel).contiguous(memory_format=fmt).requires_grad_(),
                    torch.from_numpy(weights[f"{row.name}/bias"].copy()).requires_grad_())
        del model, taps, weights
        gc.collect()
        self.labels = torch.from_numpy(labels)
        flat = [t for pair in self.params.values() for t in pair]
        self.parameters = sum(t.numel() for t in flat)
        self.optimizer = torch.optim.Adam(flat, lr=net_config().learning_rate, eps=1e-7)

    def _layer(self, row, x):
        f = layers.torch.nn.functional
        kernel, bias = self.params[row.name]
        if row.op == "conv":
            return f.conv2d(x, kernel, bias, padding=1)
        if row.stride == 1:
            return f.conv_transpose2d(x, kernel, bias, padding=1)
        # Keras "same" at stride 2: the full result cropped to 2H x 2W from the top left
        return f.conv_transpose2d(x, kernel, bias, stride=2)[:, :, :2 * x.shape[2],
                                                             :2 * x.shape[3]]

    def step(self) -> float:
        torch = layers.torch
        values = dict(self.taps)
        for row in self.rows:
            if row.op == "add":
                values[row.name] = values[row.sources[0]] + values[row.sources[1]]
                continue
            y = self._layer(row, values[row.sources[0]])
            values[row.name] = torch.softmax(y, dim=1) if row.activation == "softmax" \
                else torch.relu(y)
        p = values["prediction"].clamp(1e-7, 1 - 1e-7)
        loss = -torch.log(p.gather(1, self.labels[:, None])).mean()
        del values, p
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


def _trainer(impl: str, batch: int):
    """The trainer of one implementation name (see train_child)."""
    if impl in ("torch-net", "torch-net-cl"):
        return TorchNetTrainer(batch, channels_last=impl == "torch-net-cl")
    if impl in ("torch-demo", "torch-demo-cl"):
        return TorchDemoTrainer(batch, channels_last=impl == "torch-demo-cl")
    if impl == "refseg-net":
        return RefsegNetTrainer(batch)
    if impl == "refseg-demo":
        return RefsegDemoTrainer(batch)
    if impl.startswith("torch"):
        return TorchTrainer(batch, channels_last=impl == "torch-cl")
    return RefsegTrainer(batch)


def train_child(impl: str, batch: int, steps: int, threads: int) -> dict:
    """Runs in a fresh process: RSS around `steps` training steps, as a dict (printed as
    JSON to the parent). impl: refseg, torch, torch-cl (the decoder's step on random taps),
    refseg-demo, torch-demo, torch-demo-cl (the demo's step on cached taps) or refseg-net,
    torch-net, torch-net-cl (the whole network's)."""
    if impl.startswith("torch"):
        layers.load_torch(threads)
    trainer = _trainer(impl, batch)
    result = {"impl": impl, "batch": batch, "threads": threads,
              "rss_before_mb": proc_status_mb("VmRSS")}
    if hasattr(trainer, "parameters"):
        result["parameters"] = trainer.parameters
    checkpoints = {1, 10, 25, 50, steps}
    can_reset = reset_peak_rss()
    rss, losses, times, step_threads, peak_first = {}, [], [], [], None
    load = OtherLoad()
    for i in range(1, steps + 1):
        if i == 2 and can_reset:  # step 1 allocates the optimiser's lazily made state
            reset_peak_rss()
            steady_before = proc_status_mb("VmRSS")
        sized_before = refseg_threads.SIZINGS.copy()
        start = time.perf_counter()
        losses.append(trainer.step())
        times.append(time.perf_counter() - start)
        step_threads.append(sized_threads(sized_before))
        if i == 1:
            peak_first = proc_status_mb("VmHWM")
        if i in checkpoints:
            rss[i] = proc_status_mb("VmRSS")
    result.update(
        peak_reset=can_reset, rss_mb=rss, losses=[losses[0], losses[-1]],
        other_cores=load.cores(),
        step_ms=[1e3 * t for t in times], step_threads=step_threads,
        peak_step1_mb=peak_first - result["rss_before_mb"],
        vmhwm_mb=proc_status_mb("VmHWM"), maxrss_mb=resource.getrusage(
            resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    if can_reset and steps >= 2:
        result["peak_steady_mb"] = result["vmhwm_mb"] - steady_before
    if impl == "refseg":
        import tracemalloc

        tracemalloc.start()  # NumPy reports its data buffers to tracemalloc (since 1.13)
        live = tracemalloc.get_traced_memory()[0]
        trainer.step()
        result["tracemalloc_peak_mb"] = (tracemalloc.get_traced_memory()[1] - live) / 2 ** 20
        tracemalloc.stop()
    return result


def sized_threads(before) -> int | None:
    """The thread count of the one load-sized run (``refseg.engine.training.threads.SIZINGS``) since the
    counts were ``before``: a refseg training step's; None for torch's steps."""
    runs = refseg_threads.SIZINGS - before
    if sum(runs.values()) != 1:
        return None
    ((_ceiling, threads),) = runs
    return threads


def run_train_child(impl: str, batch: int, steps: int, threads: int, row_loops: str,
                    wait_quiet: float = 0.0) -> dict:
    """train_child in a fresh process of this script, at ``threads`` threads and with the
    row loops ``row_loops``; its result, or the last line of its error."""
    wait_until_quiet(wait_quiet)
    cmd = [sys.executable, str(SCRIPT), "--threads", str(threads),
           "--row-loops", row_loops, "--train-child", impl, str(batch), str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"impl": impl, "batch": batch, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def training_lines(runs: list[dict]) -> list[str]:
    lines = ["| impl | batch | steps | step ms (median) | RSS before MiB | peak over step 1 "
             "MiB | peak over steps 2.. MiB | tracemalloc peak MiB | RSS after steps "
             "(MiB) | loss first / last | other load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['impl']} | {r['batch']} | failed: {r['error']} |")
            continue
        rss = ", ".join(f"{k}: {v:.0f}" for k, v in sorted(r["rss_mb"].items(),
                                                            key=lambda kv: int(kv[0])))
        steady = f"{r['peak_steady_mb']:.0f}" if "peak_steady_mb" in r else "-"
        tm = f"{r['tracemalloc_peak_mb']:.0f}" if "tracemalloc_peak_mb" in r else "-"
        lines.append(
            f"| {r['impl']} | {r['batch']} | {len(r['step_ms'])} | "
            f"{statistics.median(r['step_ms']):.0f} | {r['rss_before_mb']:.0f} | "
            f"{r['peak_step1_mb']:.0f} | {steady} | {tm} | {rss} | "
            f"{r['losses'][0]:.4f} / {r['losses'][1]:.4f} | {r['other_cores']:.2f} |")
    return lines


NET_IMPLS = ("refseg-net", "torch-net", "torch-net-cl")
#: first-step losses of refseg and torch (same weights, same data) must agree this closely
NET_LOSS_TOLERANCE = 1e-4


def steady_ms(run: dict) -> float:
    """Median step time without step 1 (which allocates Adam's state and the workspaces)."""
    steps = run["step_ms"]
    return statistics.median(steps[1:] if len(steps) > 1 else steps)


def peak_mb(run: dict) -> float:
    """The larger of the peaks over step 1 and over the steps after it (MiB above the RSS
    at the reset)."""
    return max(run["peak_step1_mb"], run.get("peak_steady_mb", 0.0))


#: the training steps' targets, both kinds: refseg's time per step at most this share of
#: torch's (the faster layout), and its peak memory no more than torch's
TARGET_STEP_RATIO = 0.8


def step_lines(runs: dict, threads: int, impls=NET_IMPLS) -> list[str]:
    """runs: condition -> list of train_child results of ``impls`` (refseg's, torch's NCHW
    and channels_last), and refseg's at 1 thread: the table, then one verdict per
    condition."""
    lines = ["| background load | impl | threads | steps | ms / step (median, steps 2..) | "
             "images / s | peak over step 1 MiB | peak over steps 2.. MiB | RSS before MiB | "
             "trainable parameters | loss step 1 / last step | other load |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    for condition, rs in runs.items():
        for r in rs:
            if "error" in r:
                lines.append(f"| {condition} | {r['impl']} | | failed: {r['error']} |")
                continue
            steady = f"{r['peak_steady_mb']:.0f}" if "peak_steady_mb" in r else "-"
            lines.append(
                f"| {condition} | {r['impl']} | {r['threads']} | {len(r['step_ms'])} | "
                f"{steady_ms(r):.0f} | {1e3 * r['batch'] / steady_ms(r):.1f} | "
                f"{r['peak_step1_mb']:.0f} | {steady} | {r['rss_before_mb']:.0f} | "
                f"{r.get('parameters', 0):,} | {r['losses'][0]:.6f} / {r['losses'][1]:.6f} | "
                f"{r['other_cores']:.2f} |")
        verdicts.append(step_verdict(condition, rs, threads, impls))
    return lines + [""] + verdicts


def step_ratios(rs: list, threads: int, impls=NET_IMPLS) -> dict | None:
    """From one condition's runs: refseg's time per step and peak memory over the faster
    torch layout's, the first-step loss gap, and the runs compared; None if a run failed."""
    ok = {(r["impl"], r["threads"]): r for r in rs if "error" not in r}
    ours = ok.get((impls[0], threads))
    torches = [ok[(name, threads)] for name in impls[1:] if (name, threads) in ok]
    if ours is None or not torches:
        return None
    best = min(torches, key=steady_ms)
    return {"ours": ours, "torch": best, "one": ok.get((impls[0], 1)),
            "time": steady_ms(ours) / steady_ms(best),
            "memory": peak_mb(ours) / max(peak_mb(best), 1e-9),
            "loss_gap": max(abs(ours["losses"][0] - t["losses"][0]) for t in torches),
            # after the updates, shown without a tolerance: Adam's first steps move each
            # weight by about the learning rate whatever the size of its gradient, so
            # rounding-sized gradient differences can move this loss more than the first
            "last_gap": max(abs(ours["losses"][1] - t["losses"][1]) for t in torches)}


def step_verdict(condition: str, rs: list, threads: int, impls=NET_IMPLS) -> str:
    r = step_ratios(rs, threads, impls)
    if r is None:
        return f"- {condition}: no ratio (a run failed)"
    ours, best = r["ours"], r["torch"]
    line = (f"- {condition}: refseg / torch ({best['impl']}, the faster layout) = "
            f"{r['time']:.2f} per step (target <= {TARGET_STEP_RATIO}: "
            f"{verdict(r['time'] <= TARGET_STEP_RATIO)}); peak memory "
            f"{peak_mb(ours):.0f} / {peak_mb(best):.0f} MiB = {r['memory']:.2f} "
            f"(target <= 1: {verdict(r['memory'] <= 1)}); first-step loss differs from "
            f"torch's by {r['loss_gap']:.1e} "
            f"({'ok' if r['loss_gap'] <= NET_LOSS_TOLERANCE else 'MISMATCH'}, tolerance "
            f"{NET_LOSS_TOLERANCE:g}), after step {len(ours['step_ms'])} by "
            f"{r['last_gap']:.1e}")
    if r["one"] is not None and threads > 1:
        line += f"; refseg T threads / 1 thread = {steady_ms(ours) / steady_ms(r['one']):.2f}"
    counts = collections.Counter(ours.get("step_threads", [])[1:])
    if counts:
        line += "; refseg's steps 2.. ran on " + ", ".join(
            f"{t} thread{'s' if t != 1 else ''} x{n}" for t, n in sorted(counts.items()))
    return line

def rss_verdict(run: dict) -> str:
    rss = {int(k): v for k, v in run["rss_mb"].items()}
    first = 10 if 10 in rss and max(rss) > 10 else min(rss)
    growth = rss[max(rss)] - rss[first]
    return (f"refseg batch {run['batch']}: RSS after step {first} -> step {max(rss)}: "
            f"{growth:+.1f} MiB ({'stable' if growth < 8 else 'GROWS'}; threshold 8 MiB)")



def decoder_step_section(args, report: Report) -> None:
    """The decoder training step's memory and time, each implementation in a fresh process;
    refseg's RSS check runs the longest."""
    report("## Decoder training step: memory and time", "",
           f"Decoder parameters: {parameter_count():,} "
           f"({parameter_count() * 4 / 2 ** 20:.1f} MiB float32; with gradient and two Adam "
           f"moments {4 * parameter_count() * 4 / 2 ** 20:.1f} MiB). Update: "
           "refseg.autograd.optim.Adam (lr 1e-3); torch: layers.torch.optim.Adam.", "")
    child = dict(threads=args.threads, row_loops=args.row_loops, wait_quiet=args.wait_quiet)
    runs = [run_train_child("refseg", 1, args.train_steps, **child)]
    runs += [run_train_child(impl, 1, min(args.train_steps, 10), **child)
             for impl in ("torch", "torch-cl")]
    for batch in args.batches:
        if batch != 1:
            runs += [run_train_child(impl, batch, 5, **child)
                     for impl in ("refseg", "torch", "torch-cl")]
    report(*training_lines(runs), "")
    if "error" not in runs[0]:
        report(rss_verdict(runs[0]), "")

