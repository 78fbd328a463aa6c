"""ksearch: LLM-in-the-loop GPU kernel search with a world model of optimisation hypotheses."""

__version__ = "0.1.0"
