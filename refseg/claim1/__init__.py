"""Claim 1: from the images to be trained to their feature regions."""
