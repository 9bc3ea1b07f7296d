"""The verbs of the network's files and layers: ``weights convert``, ``weights inspect`` and
``model summary``."""
from __future__ import annotations

from pathlib import Path

from refseg.commands.verb import Verb, add_force, input_size, size_text
from refseg.models.parts import BACKBONE_INPUT_HW, BRANCHES

INFRASTRUCTURE = "the command line: the weight-file and model verbs"
#: The parts ``model summary --part`` can list alone: each backbone and the decoder.
SUMMARY_PARTS = (*BRANCHES, "decoder")


def _weights_convert_arguments(parser):
    parser.add_argument("source", type=Path, help="Keras HDF5 weight or model file")
    parser.add_argument("destination", type=Path, help="the .npz weight file to write")
    add_force(parser)


def _weights_convert(args) -> str:
    from refseg.models import h5

    return h5.convert_h5(args.source, args.destination, force=args.force).text()


def _weights_inspect_arguments(parser):
    parser.add_argument("path", type=Path, help="an .npz weight file")


def _weights_inspect(args) -> str:
    from refseg.models import weights

    return weights.inspect_npz(args.path).text()


def _model_summary_arguments(parser):
    parser.add_argument("--input-size", default=size_text(BACKBONE_INPUT_HW),
                        help="HxW, multiples of 32")
    parser.add_argument("--part", choices=SUMMARY_PARTS, default=None,
                        help="only the layers of one part (totals still cover all)")


def _model_summary(args) -> str:
    from refseg.models import ResMobileNet
    from refseg.models.summary import format_summary

    size = input_size(args.input_size)
    return format_summary(ResMobileNet(size), size, args.part)


WEIGHTS_CONVERT = Verb(("weights", "convert"), "Keras HDF5 weights (.h5, .weights.h5) to .npz",
                       _weights_convert_arguments, _weights_convert)
WEIGHTS_INSPECT = Verb(("weights", "inspect"), "keys, shapes and dtypes of an .npz weight file",
                       _weights_inspect_arguments, _weights_inspect)
MODEL_SUMMARY = Verb(("model", "summary"), "every layer: op, output shape, parameters, MACs, "
                                           "paragraphs; totals",
                     _model_summary_arguments, _model_summary)
