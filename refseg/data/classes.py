"""The classes of the weld data set, by id ([0263]): the names the label schema, the network's
softmax and the command line share.

A leaf (standard library only), so that the network's vocabulary (:mod:`refseg.models.parts`)
and the command line can name the classes without loading NumPy; the colours and the label
images are :mod:`refseg.data.labels`'.
"""
from __future__ import annotations

#: Class ids, by the order in which [0263] names the colours.
CONTOUR, INSIDE, OUTSIDE = 0, 1, 2
#: Names of the classes, indexed by class id.
CLASS_NAMES = ("contour", "inside", "outside")
#: Number of classes of the weld data set (and of the network's softmax, [0121]).
CLASS_COUNT = len(CLASS_NAMES)
