"""The LLM layer: the client the search calls (idempotent, budgeted, retried, recorded), usage and budget, provider
error classification, reply parsing, model construction (providers, replay, interactive) and the call recorders.

It sits below the search and above the tools: nothing here imports the agent, the nodes, the flows or the CLI.
"""
