"""Claim 1, step 2: grayscale, Gaussian, the four edge operators, the coefficient-of-variation
weights and the vote, the feature-region image, and the files that show them."""
