"""Limits and names that several floors share and the command line states before any heavy
import.

A leaf module (standard library only): the verbs give these as defaults and choices in their
help without loading NumPy, Pillow, the kernels or the network, and the modules acting on them
import them from here, so each is typed once.

- :data:`MAX_PIXELS`, :data:`MAX_PIXELS_CEILING`: the image size limit of :mod:`refseg.images`
  (``--max-pixels``), and :data:`EDGES_MEMORY`, :data:`EXPLAIN_MEMORY`: the memory per pixel
  that ``--max-pixels``' help and a refusal name;
- :data:`MAX_JOBS`: the most worker processes a verb starts (``--jobs``,
  :mod:`refseg.workers`, ``refseg.run.config.RANGES``);
- :data:`MIN_SIZE`: the smallest image side, which :mod:`refseg.images` checks on reading and
  claim 1's 3x3 operators need;
- :data:`ROUTES`, :data:`DEFAULT_ROUTE`: the routes of a prediction (``--route``);
- :data:`GOLDEN_PARTS`: the parts of a golden bundle, :data:`refseg.golden.format.PARTS`
  (``golden check --part``).
"""
from __future__ import annotations

#: The largest image (rows x cols) read unless a caller asks for more: ``refseg edges`` peaks
#: at about 70 bytes per pixel (0.42 GB for 3000x2000), 24 with ``--arrays maps``, so 40
#: megapixels (an industrial camera's frame) needs some 2.8 GB; a file's declared size is
#: checked before any pixel is decoded.
MAX_PIXELS = 40_000_000
#: The memory ``refseg edges`` needs per pixel of an image, for its ``--max-pixels`` help and
#: size refusal (docs/performance.md, "Claim 1's memory").
EDGES_MEMORY = "about 70 bytes of memory per pixel, 24 with --arrays maps"
#: The memory ``refseg explain claim1 --image`` needs per pixel (80 measured at 6 megapixels:
#: docs/performance.md, "The walkthrough's memory").
EXPLAIN_MEMORY = "about 90 bytes of memory per pixel"
#: The most that ``max_pixels`` may be raised to.
MAX_PIXELS_CEILING = 10 ** 10
#: The most worker processes any verb starts (``--jobs``): far beyond the cores of one
#: machine, low enough that a typo cannot fork thousands of processes.
MAX_JOBS = 1024
#: Smallest image side the 3x3 operators of claim 1 accept (R-border).
MIN_SIZE = 3
#: The two routes of a prediction: the engine's plan, or the reference's layer graph
#: (``refseg predict --route``, :func:`refseg.engine.predictor`).
ROUTES = ("engine", "reference")
#: The route ``refseg predict``, ``refseg evaluate`` and the demo's evaluation take.
DEFAULT_ROUTE = "engine"
#: The parts of a golden bundle, in pipeline order: claim 1's arrays, the network's, the
#: autograd ops'.
GOLDEN_PARTS = ("claim1", "net", "ops")


# The other light vocabularies live with their wings: input kinds in refseg.data.kinds,
# synthetic weld sizes in refseg.data.synthetic_options, branches, classes, the decoder's
# table and the backbones' input size in refseg.models.parts, claim 1's parameters in
# refseg.claim1.parameters.
