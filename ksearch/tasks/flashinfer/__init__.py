"""FlashInfer-Bench (flashinfer-bench 0.1.2) definitions as ksearch tasks: ``flashinfer:<definition>``.

- ``definitions``: the four built-in definitions (JSON, loaded through ``flashinfer_bench.Definition``);
- ``workloads``: dataset loading (``TraceSet.from_path``) and workload synthesis from the axes;
- ``task``: ``FlashInferTask`` (configs, inputs, reference, flashinfer-bench tolerances, mean-speedup score);
- ``solution``: candidate <-> flashinfer-bench ``Solution`` JSON;
- ``baseline``: what the mean-speedup baseline runs (the reference as a candidate; ``ksearch.flows.baselines`` times
  it);
- ``solutions``: hand-written Triton solutions (text).

flashinfer-bench is imported lazily: ``import ksearch.tasks.flashinfer`` works without it, and building a task
without it raises a FlashInferError naming the install line.
"""

from __future__ import annotations

from ksearch.tasks.flashinfer.definitions import BUILTIN_DEFINITIONS, INSTALL_HINT, FlashInferError
from ksearch.tasks.flashinfer.task import PREFIX, FlashInferTask, canonical_name, parse_name

__all__ = [
    "BUILTIN_DEFINITIONS",
    "INSTALL_HINT",
    "PREFIX",
    "FlashInferError",
    "FlashInferTask",
    "canonical_name",
    "parse_name",
]
