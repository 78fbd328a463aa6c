"""Containment of candidate processes: what keeps a kernel away from the secrets of the machine it runs on.

Kept light on purpose: ``launcher`` runs before every candidate worker, so nothing here imports more than the
standard library. ``policy`` (the parent's side) decides the layers; ``launcher`` (the child's side) applies them;
``landlock`` is the kernel interface of Landlock through ``ctypes``.
"""
