"""Containment of candidate processes: what keeps a kernel away from the secrets of the machine it runs on.

Kept light on purpose: ``launcher`` runs before every candidate worker, so nothing here imports more than the
standard library. ``policy`` (the parent's side) decides the layers; ``launcher`` (the child's side) applies them,
each layer's steps in a module of their own (``rlimits``, ``namespaces``, ``mounts`` with ``fences``,
``capabilities``, ``landlock_rules``, ``seccomp``); ``landlock`` is the kernel interface of Landlock through ``ctypes``.
"""
