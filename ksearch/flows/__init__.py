"""Flows: what each command does end to end, as library calls the CLI, the MCP server and tests share.

``run`` (start, resume, replay), ``evaluate`` (one kernel file through the evaluator), ``baselines`` (reference
timings for speedups), ``sweep`` (a search per KernelBench problem), ``export`` (a run's best kernel in another
system's format), ``inspect`` (runs, a run's tree and rounds, tasks). Flows never print to a terminal.
"""
