"""Where evaluations run: behind one small interface (``Executor``), this machine's devices (``local``) or a Dask
cluster (``dask``, optional). The search submits ``EvalRequest``s and gets ``Evaluation``s; it never knows which."""

from ksearch.tools.executors.base import Executor
from ksearch.tools.executors.local import LocalExecutor

__all__ = ["Executor", "LocalExecutor"]
