"""The ``landlock`` layer's rules: what a candidate may read (the allow-list but the hidden paths), list and
write, turned into a Landlock ruleset (``landlock``) over this process and what it starts.

Standard library only: the launcher runs before every worker.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ksearch.tools.containment.syscalls import LayerError


def readable_roots(
    hidden: list[str],
    listdir: Callable[[str], list[str]] = os.listdir,
    is_link: Callable[[str], bool] = os.path.islink,
    roots: tuple[str, ...] | list[str] = ("/",),
) -> tuple[list[str], list[str]]:
    """(hierarchies to allow reading whole, folders to allow listing only) so that everything beneath ``roots`` (the
    allow-list; by default the whole file system) is readable except the files beneath ``hidden`` (absolute,
    resolved paths).

    Landlock only allows, so "all but X" is every sibling of every ancestor of X, read whole. The ancestors
    themselves may be listed (with everything beneath them, hidden folders included: names only, no contents), since
    Python's import system lists every folder on ``sys.path`` and the workspace often lies inside the project.
    Symbolic links are left out: a link is followed to its target, which is judged where it lies. A folder that
    cannot be listed is allowed whole."""
    hidden_set = {os.path.normpath(h) for h in hidden if h}
    listed: list[str] = []

    def beneath(path: str, root: str) -> bool:
        return path.startswith(root.rstrip("/") + "/")

    def visit(path: str) -> list[str]:
        if path in hidden_set:
            return []
        if not any(beneath(h, path) for h in hidden_set):
            return [path]
        try:
            names = sorted(listdir(path))
        except OSError:
            return [path]
        listed.append(path)
        found: list[str] = []
        for name in names:
            child = os.path.join(path, name)
            if not is_link(child):
                found.extend(visit(child))
        return found

    whole: list[str] = []
    for root in dict.fromkeys(os.path.normpath(r) for r in roots):
        whole.extend(visit(root))
    return whole, listed


def apply_landlock(
    hidden: list[str],
    writable: list[str],
    *,
    readable: list[str] | None = None,
    listable: list[str] | tuple[str, ...] = (),
    abstract_sockets: bool = True,
    network: bool = False,
) -> int:
    """Landlock over this process and what it starts: reads beneath ``readable`` (the allow-list; None: everywhere)
    but not beneath ``hidden``, listing ``listable`` folders (names only: Python lists every folder on its path),
    writes beneath ``writable``, and the network and scope rules of ``landlock.Ruleset`` (``network``: none for TCP
    and abstract sockets)."""
    from ksearch.tools.containment import landlock

    abi = landlock.abi_version()
    if abi < 1:
        raise LayerError("Landlock is not available in this kernel")
    try:
        ruleset = landlock.Ruleset(abi, abstract_sockets=abstract_sockets and not network, tcp=not network)
        whole, listed = readable_roots(hidden, roots=readable if readable is not None else ("/",))
        listed = [*listed, *listable]
        rules = [(root, landlock.READ) for root in whole] + [(folder, landlock.READ_DIR) for folder in listed]
        rules += [(folder, landlock.READ | landlock.write_rights(abi)) for folder in writable]
        for path, rights in rules:
            try:
                ruleset.allow(path, rights)
            except FileNotFoundError:
                continue  # gone since it was listed (another process's temporary folder): nothing to allow
        ruleset.restrict_self()
    except OSError as exc:
        raise LayerError(f"Landlock: {exc}") from None
    return abi
