"""Audits of refseg's own choices: ``refseg audit readings`` measures how much claim 1's
outcome depends on each reading of the patent's missing formulas (``spec/sensitivity.md``)."""
