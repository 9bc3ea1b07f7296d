"""torch's best CPU inference of the fusion network, for bench_model.py: the anchors the engine
is held to beside torch's eager mode, and the run's one-line summary of the targets.

* **torch frozen**: ``torch.jit.trace`` of the channels_last eval network at the batch's shape,
  ``torch.jit.freeze`` (weights become constants, batch norms folded into the convolutions,
  oneDNN's weight-prepacked convolutions where torch has them) and
  ``torch.jit.optimize_for_inference``: PyTorch's documented route to its fastest CPU
  inference of a TorchScript model.
* **torch compile**: ``torch.compile`` (Inductor, C++ code generated and compiled for this CPU)
  of the same network, where it runs on the machine (a C++ compiler is needed); the first call
  compiles (minutes on 2 cores), so it is made before any timing.

The summary line: ``targets: b1_eager R b8_eager R b1_best R b8_best R b1_ceiling P%``, R =
refseg's (the engine's) median time over torch eager channels_last's, or over the faster of
frozen and compiled torch, in the quiet rounds of each batch size; P = batch 1's effective
GFLOP/s over the sgemm's of the same round (median over the rounds). Missing figures print as
``-``.
"""
from __future__ import annotations

import statistics

#: Names of the anchors in bench_model.py's tables.
FROZEN = "torch frozen"
COMPILED = "torch compile"
EAGER = "torch channels_last"


def frozen(torch, net, example):
    """The traced, frozen and inference-optimised ``net`` for inputs shaped as ``example``."""
    with torch.no_grad():
        traced = torch.jit.trace(net.eval(), example, check_trace=False)
        return torch.jit.optimize_for_inference(torch.jit.freeze(traced))


def compiled(torch, net):
    """``torch.compile(net)``, or None where this torch cannot compile (the reason printed
    by the caller when the first call fails)."""
    if not hasattr(torch, "compile"):
        return None
    try:
        return torch.compile(net.eval())
    except Exception:  # noqa: BLE001 -- any failure means: not on this machine
        return None


def anchor_calls(torch, net, inputs, use_compile: bool) -> dict:
    """name -> callable running each available anchor on the channels_last input ``inputs``;
    each is called once here (tracing, compiling), and an anchor that fails is left out."""
    calls = {}

    def under_inference(fn):
        def run():
            with torch.inference_mode():
                return fn(inputs)
        return run

    try:
        calls[FROZEN] = under_inference(frozen(torch, net, inputs))
        calls[FROZEN]()
    except Exception as exc:  # noqa: BLE001
        calls.pop(FROZEN, None)
        print(f"bench_model: torch frozen left out: {type(exc).__name__}: {exc}")
    if use_compile:
        model = compiled(torch, net)
        if model is not None:
            try:
                calls[COMPILED] = under_inference(model)
                calls[COMPILED]()
            except Exception as exc:  # noqa: BLE001
                calls.pop(COMPILED, None)
                print(f"bench_model: torch compile left out: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''}")
    return calls


def targets_summary(results: dict, paired_share) -> str:
    """The one summary line (module docstring) from bench_model.py's quiet results:
    ``results[("none", batch)] = (times, loads, torch name, Keras name)``;
    ``paired_share(times, batch)`` gives batch 1's round-by-round shares of the sgemm."""
    def ratio(batch, names):
        entry = results.get(("none", batch))
        if entry is None:
            return "-"
        times = entry[0]
        anchors = [statistics.median(times[n]) for n in names if n in times]
        if not anchors or "refseg" not in times:
            return "-"
        return f"{statistics.median(times['refseg']) / min(anchors):.2f}"

    share = "-"
    entry = results.get(("none", 1))
    if entry is not None:
        shares = paired_share(entry[0], 1)
        if shares:
            share = f"{100 * statistics.median(shares):.0f}%"
    return (f"targets: b1_eager {ratio(1, [EAGER])} b8_eager {ratio(8, [EAGER])} "
            f"b1_best {ratio(1, [FROZEN, COMPILED])} b8_best {ratio(8, [FROZEN, COMPILED])} "
            f"b1_ceiling {share}")
