"""The staging buffer's CUDA IPC handle (``shared.cuda_ipc``): what the parent hands a worker round-trips, anything
else is refused before the driver sees it, and on a GPU a second process writes into the checker's buffer through it
with no file of ``/dev/shm`` involved (a candidate's ``/dev/shm`` is its own)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ksearch.tools.evaluator.shared.cuda_ipc import HANDLE_BYTES, PROBE_BYTES, ExportedBuffer


def test_a_handle_round_trips_and_a_malformed_one_is_refused() -> None:
    exported = ExportedBuffer(handle=bytes(range(HANDLE_BYTES)), offset=512, probe=b"p" * PROBE_BYTES)
    assert ExportedBuffer.decode(exported.encode()) == exported
    handle, probe = "00" * HANDLE_BYTES, "11" * PROBE_BYTES
    for text in (
        "",
        f"cuipc1:00:0:{probe}",
        f"other:{handle}:0:{probe}",
        f"cuipc1:{handle}:-1:{probe}",
        f"cuipc1:{handle}:0",
        f"cuipc1:{handle}:0:11",
    ):
        with pytest.raises(ValueError):
            ExportedBuffer.decode(text)


def test_staged_outputs_never_cover_the_buffers_header_where_the_probe_lies() -> None:
    torch = pytest.importorskip("torch")
    from ksearch.tools.evaluator.shared.staging import HEADER, StagingOwner, StagingWriter, layout

    assert HEADER >= PROBE_BYTES and layout([3, 5])[0][0] == HEADER
    owner = StagingOwner("cpu")
    try:
        handle = owner.ensure(1 << 16)
        owner.buffer[:HEADER] = 0
        writer = StagingWriter(handle)
        offsets = writer.stage([torch.full((100,), 7.0), torch.ones(3, dtype=torch.float64)])
        assert min(offsets) >= HEADER and not owner.buffer[:HEADER].any()
        assert torch.equal(owner.tensor(offsets[0], [100], "torch.float32"), torch.full((100,), 7.0))
        with pytest.raises(ValueError, match="outside the buffer"):
            owner.tensor(0, [4], "torch.float32")
        writer.close()
    finally:
        owner.release()


@pytest.mark.gpu
def test_another_process_writes_into_the_checkers_buffer_through_the_handle() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from ksearch.tools.evaluator.shared.staging import StagingOwner

    owner = StagingOwner("cuda")
    handle = owner.ensure(1 << 20)
    assert handle.kind == "cuda_ipc"
    code = textwrap.dedent(
        f"""
        import torch
        from ksearch.contracts.exchange import StagingHandle
        from ksearch.tools.evaluator.shared.staging import StagingWriter

        torch.cuda.set_device(0)
        writer = StagingWriter(StagingHandle.model_validate_json({handle.model_dump_json()!r}))
        offsets = writer.stage([torch.full((1000,), 7.0, device="cuda")])
        torch.cuda.synchronize()
        print(offsets[0])
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    staged = owner.tensor(int(proc.stdout.split()[-1]), [1000], "torch.float32")
    assert torch.equal(staged, torch.full((1000,), 7.0, device="cuda"))
    # The session's next worker opens the same buffer after the first staged into it: the probe bytes are intact
    # (outputs staged over them made every later evaluation of a session fall back to host memory, 2026-12-07).
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr

    wrong = handle.model_copy(update={"ipc": handle.ipc[: -2 * PROBE_BYTES] + "00" * PROBE_BYTES})
    proc = subprocess.run(
        [sys.executable, "-c", code.replace(handle.model_dump_json(), wrong.model_dump_json())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "does not hold the checker's bytes" in proc.stderr, proc.stderr


def _open_in_another_process(handle_json: str, *, spoil: bool = False) -> subprocess.CompletedProcess[str]:
    """A second process opens the buffer (``spoil``: then writes zeros over its header, as a candidate could)."""
    code = textwrap.dedent(
        f"""
        import torch
        from ksearch.contracts.exchange import StagingHandle
        from ksearch.tools.evaluator.shared.staging import StagingWriter

        torch.cuda.set_device(0)
        writer = StagingWriter(StagingHandle.model_validate_json({handle_json!r}))
        if {spoil!r}:
            writer.buffer[:16].zero_()
        torch.cuda.synchronize()
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_header_a_worker_wrote_over_is_renewed_for_the_next_evaluation() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from ksearch.tools.evaluator.shared.staging import StagingOwner

    owner = StagingOwner("cuda")
    handle = owner.ensure(1 << 20)
    assert _open_in_another_process(handle.model_dump_json(), spoil=True).returncode == 0
    spoilt = _open_in_another_process(handle.model_dump_json())
    assert spoilt.returncode != 0 and "does not hold the checker's bytes" in spoilt.stderr, spoilt.stderr
    renewed = owner.renew_header()
    assert renewed is not None and renewed.generation == handle.generation and renewed.ipc != handle.ipc
    opened = _open_in_another_process(renewed.model_dump_json())
    assert opened.returncode == 0, opened.stderr


def test_renewing_the_header_of_a_host_memory_buffer_changes_nothing() -> None:
    pytest.importorskip("torch")
    from ksearch.tools.evaluator.shared.staging import StagingOwner

    owner = StagingOwner("cpu")
    try:
        handle = owner.ensure(1 << 16)
        assert owner.renew_header() == handle
    finally:
        owner.release()


def test_a_full_device_is_an_out_of_memory_error_not_host_memory_for_good(monkeypatch) -> None:
    """An allocation that fails for room (a 6.4 GB KernelBench input set handed over) raises for the caller's
    out-of-memory handling; only a failure of CUDA IPC itself moves the session to host memory."""
    torch = pytest.importorskip("torch")
    from ksearch.tools.evaluator.shared.staging import StagingOwner

    owner = StagingOwner("cuda:0")
    assert owner.use_ipc

    def full(size: int) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(owner, "_allocate_ipc", full)
    with pytest.raises(torch.OutOfMemoryError):
        owner.ensure(1 << 20)
    assert owner.use_ipc and owner.handle is None

    def refused(size: int) -> None:
        raise RuntimeError("cuIpcGetMemHandle failed")

    monkeypatch.setattr(owner, "_allocate_ipc", refused)
    try:
        handle = owner.ensure(1 << 20)
        assert handle.kind == "shm" and not owner.use_ipc
    finally:
        owner.release()
