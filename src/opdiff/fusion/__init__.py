"""Find the fusion at fault: fusion off (golden) against on (target), then bisect the engine's switches.

Drives capture, compare and diagnose (a layer at the level of demo and shell; only the CLI imports it).
See docs/fusion.md.
"""
