"""Hardware counters of a candidate's kernels from Nsight Compute, collected by a trusted process.

- ``ncu_csv``: ncu's raw CSV page read into typed counters (pure);
- ``ncu_command``: the ncu command lines, where ncu is, and what its own log says went wrong (pure but ``find_ncu``);
- ``budget``: which shapes, how many launches, how long, and the run's share of GPU time they may take (pure);
- ``collect``: ncu started here (the trusted side) around a contained worker that calls the candidate once per
  chosen shape inside NVTX ranges; the numbers come from ncu's report, written where the candidate cannot write.

Diagnostics for the model: they never decide a verdict, a score or a promotion.
"""
