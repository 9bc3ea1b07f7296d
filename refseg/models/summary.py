"""A model summary: every layer with its op, output shape, parameters, multiply-accumulates and
the patent paragraphs it comes from, and the totals (``refseg model summary``)."""
from __future__ import annotations

from dataclasses import dataclass

from refseg.models.graph import INPUT

INFRASTRUCTURE = "the network's layer table (reporting)"


@dataclass(frozen=True)
class SummaryRow:
    name: str
    part: str
    op: str
    inputs: tuple[str, ...]
    output_shape: tuple[int, int, int]
    parameters: int
    trainable: int
    macs: int
    paragraphs: str


def summarize(model, input_hw) -> list[SummaryRow]:
    """One row per layer of ``model`` for one image of (H, W) = ``input_hw``.

    Parameters
    ----------
    model : refseg.models.Model
    input_hw : (int, int)

    Returns
    -------
    list of SummaryRow
        Parameters count every array (weights and moving statistics, as Keras counts them);
        trainable counts those an optimizer updates; macs are multiply-accumulates per image of
        the convolutions (0 for the other layers).
    """
    h, w = input_hw
    shapes = model.graph.shapes((h, w, 3))
    rows = []
    for name, node in model.graph.nodes.items():
        layer = node.layer
        trainable = sum(p.data.size for p in layer.params.values() if p.requires_grad)
        rows.append(SummaryRow(name, node.part, layer.keras_type, node.inputs, shapes[name],
                               layer.parameter_count(), trainable,
                               layer.macs(*(shapes[s] for s in node.inputs)), node.paragraphs))
    return rows


def format_summary(model, input_hw, part: str | None = None) -> str:
    """The summary as a text table (the layers of ``part`` only, when given) with totals per
    part and overall."""
    rows = summarize(model, input_hw)
    head = (f"{'layer':<28} {'op':<20} {'output':<16} {'params':>11} {'MACs':>14}  "
            f"{'reads':<38} paragraphs")
    lines = [f"{model.name}, input {input_hw[0]}x{input_hw[1]}x3 ({INPUT})", head,
             "-" * len(head)]
    for r in rows:
        if part not in (None, r.part):
            continue
        shape = "x".join(str(v) for v in r.output_shape)
        lines.append(f"{r.name:<28} {r.op:<20} {shape:<16} {r.parameters:>11,} {r.macs:>14,}  "
                     f"{','.join(r.inputs):<38} {r.paragraphs}")
    lines.append("-" * len(head))
    parts = sorted({r.part for r in rows}, key=[r.part for r in rows].index)
    for name in parts + [None]:
        chosen = [r for r in rows if name in (None, r.part)]
        label = name or "total"
        lines.append(f"{label:<12} layers {len(chosen):>4}  parameters "
                     f"{sum(r.parameters for r in chosen):>12,}  trainable "
                     f"{sum(r.trainable for r in chosen):>12,}  multiply-accumulates "
                     f"{sum(r.macs for r in chosen):>15,}")
    return "\n".join(lines)

