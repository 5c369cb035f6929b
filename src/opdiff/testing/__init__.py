"""Fixtures shared by the tests, the benches and the demo: small seeded models (zoo), faults, synthetic dumps.

zoo and faults need torch and transformers (imported when used); synthetic needs numpy only.
"""
