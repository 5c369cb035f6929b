"""The diagnosis sweep: opdiff measures its own accuracy on many architectures x fault classes x levels.

archs (the architecture catalog), catalog (faults and benign changes, planted by plain torch code), oracle
(proof of each claim by plain forward hooks), case (one case end to end), grade, tables, runner (parallel,
resumable). Driven by bench/diagnosis_sweep.py; docs/diagnose.md ("Sweep") has the figures.
"""
