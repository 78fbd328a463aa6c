"""Where evaluations run: behind one small interface (``Executor``), this machine's devices (``local``) or a Dask
cluster (``dask``, optional: ``pip install 'ksearch[dask]'``). The search submits ``EvalRequest``s and gets
``Evaluation``s; it never knows which."""

from ksearch.tools.executors.base import Busy, Executor
from ksearch.tools.executors.dask import DaskExecutor
from ksearch.tools.executors.local import LocalExecutor

__all__ = ["Busy", "DaskExecutor", "Executor", "LocalExecutor"]
