"""Claim 1: grayscale, Gaussian, the four edge operators, the CV weights and vote, the feature image."""
