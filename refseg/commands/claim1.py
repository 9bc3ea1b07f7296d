"""``refseg edges``: claim-1 feature extraction of image files, every intermediate written out."""
from __future__ import annotations

from pathlib import Path

from refseg.claim1.parameters import DEFAULT_SIGMA, KEEP
from refseg.commands.verb import Verb, add_max_pixels
from refseg.vocabulary import EDGES_MEMORY

INFRASTRUCTURE = "the command line: claim 1's verb"


def _edges_arguments(parser):
    parser.add_argument("images", nargs="+", type=Path,
                        help="image files (any format Pillow reads)")
    parser.add_argument("--out", type=Path, required=True,
                        help="output folder (one subfolder each)")
    parser.add_argument("--sigma", type=float, default=None,
                        help=f"Gaussian sigma (default {DEFAULT_SIGMA})")
    add_max_pixels(parser, EDGES_MEMORY)
    parser.add_argument("--arrays", choices=KEEP, default=KEEP[0],
                        help="what features.npz keeps: every intermediate (default) or the "
                             "binary maps and the weights only")


def _edges(args) -> str:
    from refseg.claim1.outputs import write_edge_outputs

    written = write_edge_outputs(args.images, args.out, args.sigma, max_pixels=args.max_pixels,
                                 arrays=args.arrays)
    return "\n".join(str(folder) for folder in written)


EDGES = Verb(("edges",), "claim-1 feature extraction of images", _edges_arguments, _edges)
