"""The kinds of network input, the vocabulary of R-dataset (``spec/readings.md``).

A leaf module (standard library only): ``refseg.run.config`` checks a run's input kind against
it before any heavy import, and ``refseg.data.inputs`` builds each kind.

Claim 1 step 2 and [0075] form the first data set from the "feature regions" (特征区域) of the
training images with their labels; [0121] says the image "containing the feature regions"
drops much useless information; [0264] calls the data set "edge-extraction images with their
labels". A region of an image can be read as the map, as the image's pixels inside the map, or
as both; each kind below is one of those readings, and "gray" is the plain image [0121] and
[0264] compare against.
"""
from __future__ import annotations

#: The binary feature map itself (refseg's reading of R-dataset): 2f - 1 in all three channels.
FEATURE = "feature"
#: The plain grayscale image, the comparison input of [0121] and [0264].
GRAY = "gray"
#: The gray image's pixels on the feature map, black elsewhere ("the image's pixels inside the
#: feature regions", [0121]).
MASKED_GRAY = "masked-gray"
#: As :data:`MASKED_GRAY`, the map first dilated by :data:`MASK_RADIUS`: the region of the image
#: each feature pixel was decided from.
MASKED_GRAY_DILATED = "masked-gray-dilated"
#: The gray image in the first and third channels, the feature map in the second: both the
#: image and its feature regions, the gray input with one channel replaced.
GRAY_AND_FEATURE = "gray-and-feature"

#: Every input kind a run can train on, refseg's reading first.
INPUT_KINDS = (FEATURE, GRAY, MASKED_GRAY, MASKED_GRAY_DILATED, GRAY_AND_FEATURE)
#: The kinds built from the claim-1 feature map (an alternative claim-1 reading applies to
#: them); the others are the plain image.
FEATURE_KINDS = (FEATURE, MASKED_GRAY, MASKED_GRAY_DILATED, GRAY_AND_FEATURE)
#: Radius (pixels, at the image's own resolution; a (2r + 1)-square) by which
#: :data:`MASKED_GRAY_DILATED` dilates the feature map: each feature pixel is decided from the
#: 5x5 neighbourhood that the 3x3 Gaussian ([0081], [0208]) followed by a 3x3 operator reads.
MASK_RADIUS = 2
#: One line per kind, for tables and help texts.
DESCRIPTIONS = {
    FEATURE: "the feature map (0/1) in three channels (refseg's reading)",
    GRAY: "the gray image",
    MASKED_GRAY: "the gray image on the feature map, black elsewhere",
    MASKED_GRAY_DILATED: f"the gray image on the feature map dilated by {MASK_RADIUS} pixels "
                         f"({2 * MASK_RADIUS + 1}x{2 * MASK_RADIUS + 1}), black elsewhere",
    GRAY_AND_FEATURE: "channels gray, feature map, gray",
}
