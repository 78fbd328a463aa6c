"""The trusted checker: the process that computes the reference and judges the candidate's outputs
(``python -P -m ksearch.tools.evaluator.checker.main``). It never imports the candidate, nor the parent's or the
worker's code (tests/test_layering.py).
"""
