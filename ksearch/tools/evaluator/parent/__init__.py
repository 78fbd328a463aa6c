"""The agent-side parent: runs in the caller's process (the agent, a CLI command, an executor's worker).

It starts the other processes, relays between the candidate's worker and the trusted checker, holds every timed
window against its own clock (``ledger``) and assembles the ``Evaluation``. Candidate code never runs here.
"""
