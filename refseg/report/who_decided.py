"""Who decided each pixel of a claim-1 feature map: the combination of operators whose weights
carried the vote.

A pixel's final weight is F = Σ w_i X_i − 1.5 with X_i = 2 where operator i marks it and 1
elsewhere; since the weights sum to 1, F = Σ_{i marks it} w_i − 0.5, so the pixel is a feature
pixel exactly when the weights of the operators marking it sum to at least 0.5
([0104]-[0118]). Which operators those are is the pixel's *combination* (one of 15); an
operator of weight 0.5 or more decides alone, and operators that found an edge can be outvoted
(their weights summing to less than 0.5).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refseg.claim1.features import FeatureResult
from refseg.claim1.operators import OPERATORS

INFRASTRUCTURE = "the claim-1 walkthrough"

#: A colour for each combination, by its code Σ 2^i over the operators marking the pixel
#: (i in :data:`OPERATORS` order); code 0 (no operator) is black.
COMBINATION_COLOURS = np.array([
    (0, 0, 0),                                        # none
    (228, 26, 28), (55, 126, 184), (152, 78, 163),    # C, S, C+S
    (77, 175, 74), (255, 127, 0), (141, 160, 203),    # P, C+P, S+P
    (231, 41, 138), (255, 255, 51), (166, 86, 40),    # C+S+P, L, C+L
    (229, 196, 148), (255, 217, 47), (179, 222, 105),  # S+L, C+S+L, P+L
    (102, 194, 165), (166, 216, 84), (255, 255, 255)],  # C+P+L, S+P+L, all four
    dtype=np.uint8)
#: The colour of pixels some operator marked but the vote dropped.
OUTVOTED_COLOUR = (80, 80, 80)


@dataclass(frozen=True)
class Combination:
    """One combination of operators marking pixels of an image."""

    code: int
    operators: tuple[str, ...]
    weight: float  # Σ w_i over the operators
    kept: int  # its feature pixels
    outvoted: int  # its pixels the vote dropped
    share: float  # kept / all feature pixels
    colour: tuple[int, int, int]  # on the map: its own, or the dropped pixels' grey


@dataclass(frozen=True)
class DecisionShares:
    """Every combination present in an image, feature pixels first (most first)."""

    rows: tuple[Combination, ...]
    feature_pixels: int
    weights: dict
    single_map: str | None  # the operator whose edge map equals the feature map, if any

    def sentences(self, names: dict) -> list[str]:
        """What the table says, in words."""
        out = []
        for row in self.rows:
            if len(row.operators) == 1 and row.kept:
                op = row.operators[0]
                out.append(f"{names[op]} decides alone: its weight {self.weights[op]:.4f} is at "
                           f"least 0.5, so every pixel it marks is a feature pixel whatever the "
                           f"others say; {row.share:.1%} of the feature pixels are marked by "
                           f"{names[op]} only.")
        if self.single_map and self.feature_pixels:
            out.append(f"The feature map is exactly {names[self.single_map]}'s edge map: the "
                       "other three operators change nothing.")
        dropped = max((r for r in self.rows if r.outvoted), key=lambda r: r.outvoted,
                      default=None)
        if dropped is not None:
            who = " + ".join(names[op] for op in dropped.operators)
            out.append(f"The largest group of dropped pixels: {dropped.outvoted} marked by {who} "
                       f"only, whose weights sum to {dropped.weight:.4f} < 0.5.")
        if not self.feature_pixels:
            out.append("No pixel reaches 0.5: the feature map is empty.")
        return out


def _codes(result: FeatureResult) -> np.ndarray:
    codes = np.zeros(result.feature_map.shape, np.uint8)
    for i, op in enumerate(OPERATORS):
        codes |= (result.edges[op].astype(np.uint8) & 1) << i
    return codes


def decision_shares(result: FeatureResult) -> DecisionShares:
    """Each combination of operators present in the image, with its weight sum, its feature
    pixels, its share of the feature pixels and its outvoted pixels."""
    codes = _codes(result)
    kept = np.bincount(codes[result.feature_map == 1].ravel(), minlength=16)
    dropped = np.bincount(codes[result.feature_map == 0].ravel(), minlength=16)
    total = int(result.feature_map.sum())
    rows = []
    for code in range(1, 16):
        if kept[code] or dropped[code]:
            ops = tuple(op for i, op in enumerate(OPERATORS) if code >> i & 1)
            rows.append(Combination(code, ops, sum(result.weights[op] for op in ops),
                                    int(kept[code]), int(dropped[code]),
                                    kept[code] / total if total else 0.0,
                                    tuple(int(v) for v in COMBINATION_COLOURS[code])
                                    if kept[code] else OUTVOTED_COLOUR))
    rows.sort(key=lambda r: (-r.kept, -r.outvoted))
    single = next((op for op in OPERATORS
                   if np.array_equal(result.edges[op], result.feature_map)), None)
    return DecisionShares(tuple(rows), total, dict(result.weights), single)


def decision_map(result: FeatureResult) -> np.ndarray:
    """RGB (M, N, 3) uint8: each feature pixel in its combination's colour, pixels the vote
    dropped dark grey, pixels no operator marked black."""
    codes = _codes(result)
    out = COMBINATION_COLOURS[codes]
    out[(result.feature_map == 0) & (codes > 0)] = OUTVOTED_COLOUR
    return out
