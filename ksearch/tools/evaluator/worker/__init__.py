"""The candidate's worker: the process that imports and runs ONE untrusted candidate
(``python -P -m ksearch.tools.evaluator.worker.main``), also started as its compile scout, its resource probe and
its profiling process. Nothing computed here is trusted for a verdict.

Every module of this package is a harness module: the guard (``guard``) checks after each call of the candidate that
none of their bindings was replaced. Imports neither the parent nor the checker (tests/test_layering.py).
"""
