"""The workspace itself fails: read-only, a full disk (simulated), replay files with garbage lines."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from tests.faults.agent_process import Fault
from tests.faults.harness import (
    assert_one_line_error,
    check_nothing_paid_twice,
    ksearch,
    llm_rows,
    rows,
    run_args,
    run_row,
)
from tests.faults.llm_server import loopback_llm, scripted
from tests.helpers.scripts import fenced, init_plan, row_kernel

pytestmark = pytest.mark.slow

PLAN = init_plan([("a", 0.9)])
REPLIES = {"plan:0": PLAN, "write:c1:1": fenced(row_kernel(1))}
READ_ONLY = {"KSEARCH_TEST_DROP_FILE_CAPS": "1"}
"""The agent runs without CAP_DAC_OVERRIDE, so that file modes bind root too (see agent_process.py)."""


def _tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _set_writable(folder: Path, writable: bool) -> None:
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~bits)


def test_a_read_only_workspace_can_be_read_and_refuses_writes_with_one_line(tmp_path):
    ws = tmp_path / "ws"
    with loopback_llm(scripted(REPLIES)) as server:
        code, output = ksearch(ws, *run_args("done", server, "--max-tokens", "1000"), cwd=tmp_path)
        assert code == 3, output[-3000:]  # ended by its token budget: no kernel passed
        before = _tree_digest(ws)
        _set_writable(ws, False)
        try:
            code, output = ksearch(ws, "runs", cwd=tmp_path, env=READ_ONLY)
            assert code == 0, output[-3000:]
            assert "done" in output.split()
            code, output = ksearch(ws, *run_args("new", server), cwd=tmp_path, env=READ_ONLY)
            assert code == 1, output[-3000:]
            assert_one_line_error(output, "read-only", "--workspace")
            assert server.count("plan:0") == 1  # the refused run asked nothing
        finally:
            _set_writable(ws, True)
    assert _tree_digest(ws) == before
    assert [r["id"] for r in rows(ws, "select id from runs")] == ["done"]


def test_a_full_disk_stops_the_run_with_one_line_and_resume_pays_only_for_what_was_lost(tmp_path):
    ws = tmp_path / "ws"
    full_after_write = Fault("node.end", "write_kernel", action="disk-full")  # the coder's reply is stored by then
    with loopback_llm(scripted(REPLIES)) as server:
        code, output = ksearch(ws, *run_args("d", server), cwd=tmp_path, fault=full_after_write)
        assert code == 1, output[-3000:]
        assert_one_line_error(output, "the disk is full", "nothing already stored is lost", "ksearch resume d")
        assert "write:c1:1" in llm_rows(ws, "d")
        assert run_row(ws, "d")["status"] in ("running", "interrupted")  # recording 'interrupted' needs space too
        check_nothing_paid_twice(ws, "d", server)

        code, output = ksearch(ws, "resume", "d", cwd=tmp_path)  # space is back
        assert code == 0, output[-3000:]
        accounting = check_nothing_paid_twice(ws, "d", server)
        assert server.count("write:c1:1") == 1  # its reply was stored before the disk filled up
    assert run_row(ws, "d")["status"] == "finished"
    assert accounting.evaluations == 1


GARBAGE = {
    "a line that is not JSON": '{"reply": "x"}\nthis is not json\n',
    "a JSON line that is not an object": '{"reply": "x"}\n[1, 2, 3]\n',
    "an entry without a reply": '{"reply": "x"}\n{"call_key": "plan:0:0"}\n',
    "a line cut off (the recorder crashed)": '{"reply": "x"}\n{"reply": "abc',
    "bytes that are not UTF-8": b'{"reply": "x"}\n\xff\xfe\x00garbage\n',
}


@pytest.mark.parametrize("content", GARBAGE.values(), ids=GARBAGE.keys())
def test_a_replay_file_with_a_garbage_line_names_the_line_and_starts_nothing(tmp_path, content):
    script = tmp_path / "script.jsonl"
    script.write_bytes(content if isinstance(content, bytes) else content.encode())
    ws = tmp_path / "ws"
    code, output = ksearch(
        ws, "run", "softmax", "--model", f"replay:{script}", "--device", "cpu", "--run-id", "g", cwd=tmp_path
    )
    assert code == 1, output[-3000:]
    assert_one_line_error(output, f"{script}:2")
    assert not (ws / "ksearch.db").exists() or rows(ws, "select id from runs") == []
    assert os.path.getsize(script) == len(content if isinstance(content, bytes) else content.encode())
