"""What more than one of the evaluator's processes runs: seeds and input digests, the staging buffer, the sandbox's
process helpers, kernel resources, the harness's own profiling. Imports none of the process packages
(tests/test_layering.py).
"""
