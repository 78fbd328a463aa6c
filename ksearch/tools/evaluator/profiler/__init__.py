"""The per-kernel profile of a candidate's calls: what the profiling process runs (the worker's program started as
``--role profiler``), and the worker too when it profiles itself after its timing. Imports neither the parent, the
worker nor the checker (tests/test_layering.py).
"""
