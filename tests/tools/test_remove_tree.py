"""sandbox.remove_tree: a folder a candidate wrote is removed whatever its depth, and removing never raises."""

from __future__ import annotations

import os
from pathlib import Path

from ksearch.tools.evaluator.shared.sandbox import remove_tree


def _nest(root: Path, depth: int) -> None:
    """``root/d/d/.../d`` ``depth`` levels deep, made one level at a time through descriptors (paths that deep are
    longer than the system accepts)."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            deeper = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as leaf:
            leaf.write("planted")
    finally:
        os.close(fd)


def test_a_tree_deeper_than_the_interpreter_recurses_is_removed(tmp_path: Path) -> None:
    root = tmp_path / "candidate"
    _nest(root, 2500)
    assert remove_tree(root) is True
    assert not root.exists() and list(tmp_path.iterdir()) == []


def test_missing_paths_links_and_files_are_handled_without_raising(tmp_path: Path) -> None:
    assert remove_tree(tmp_path / "missing") is True
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "file").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(kept, target_is_directory=True)
    assert remove_tree(link) is True  # the link goes, never what it points to
    assert (kept / "file").read_text() == "x"
    plain = tmp_path / "plain"
    plain.write_text("x")
    assert remove_tree(plain) is True and not plain.exists()
