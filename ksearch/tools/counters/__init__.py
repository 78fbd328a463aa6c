"""Hardware counters of a candidate's kernels from Nsight Compute, collected by a trusted process.

- ``ncu_csv``: ncu's raw CSV page read into typed counters (pure);
- ``ncu_command``: the ncu command lines, where ncu and its installation are, and what its own log and the processes'
  stderr say went wrong (pure but ``find_ncu`` and ``installation``);
- ``budget``: which shapes, how many launches, how long, and the run's share of GPU time they may take (pure);
- ``rungs``: the containments ncu and the candidate may share, strongest first, and what each opens for ncu (pure);
- ``ncu_process``: ncu started inside the candidate's containment, and its report read back in a contained process;
- ``probe``: which rung this machine allows, from a trusted one-kernel program ncu profiles;
- ``collect``: one collection: a worker under ncu calls the candidate once per chosen shape inside NVTX ranges; the
  numbers come from ncu's report, never from the candidate's output.

Diagnostics for the model: they never decide a verdict, a score or a promotion.
"""
