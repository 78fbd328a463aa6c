"""GpuPool: exclusive, fair, exception-safe leases; --gpus parsing against fake device lists (no CUDA needed)."""

from __future__ import annotations

import threading
import time

import pytest

from ksearch.errors import UserError
from ksearch.tools.gpu_pool import GpuPool, parse_spec

H100 = "NVIDIA H100 80GB HBM3"


def test_no_device_is_leased_twice_at_once() -> None:
    pool = GpuPool(["cuda:0", "cuda:1"])
    holders: dict[str, int] = {"cuda:0": 0, "cuda:1": 0}
    peak = {"total": 0}
    lock = threading.Lock()
    errors: list[str] = []

    def work() -> None:
        for _ in range(5):
            with pool.lease() as device:
                with lock:
                    holders[device] += 1
                    if holders[device] > 1:
                        errors.append(f"{device} shared")
                    peak["total"] = max(peak["total"], sum(holders.values()))
                time.sleep(0.002)
                with lock:
                    holders[device] -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert peak["total"] == 2  # both devices were used at once
    assert pool.free == 2


def test_leases_are_first_come_first_served() -> None:
    pool = GpuPool(["cuda:0"])
    order: list[int] = []
    first = pool.acquire()
    waiters = []
    for i in range(4):
        t = threading.Thread(target=lambda i=i: (order.append(i) if pool.acquire() else None, pool.release("cuda:0")))
        t.start()
        waiters.append(t)
        while len(pool._waiting) < i + 1:  # noqa: SLF001 - wait until thread i is queued before starting the next
            time.sleep(0.001)
    pool.release(first)
    for t in waiters:
        t.join(timeout=5)
    assert order == [0, 1, 2, 3]


def test_a_lease_is_released_when_the_block_raises() -> None:
    pool = GpuPool(["cuda:3"])
    with pytest.raises(RuntimeError):
        with pool.lease() as device:
            assert device == "cuda:3" and pool.free == 0
            raise RuntimeError("evaluation blew up")
    assert pool.free == 1
    with pool.lease(timeout=0.1) as device:
        assert device == "cuda:3"


def test_acquire_times_out_when_all_devices_are_busy() -> None:
    pool = GpuPool(["cuda:0"])
    with pool.lease():
        with pytest.raises(TimeoutError):
            pool.acquire(timeout=0.05)
    assert pool.free == 1


def test_release_checks_ownership() -> None:
    pool = GpuPool(["cuda:0"])
    with pytest.raises(ValueError):
        pool.release("cuda:0")  # not leased
    with pytest.raises(ValueError):
        GpuPool([])
    with pytest.raises(ValueError):
        GpuPool(["cuda:0", "cuda:0"])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("all", [0, 1, 2, 3]), ("2", [0, 1]), ("0,1,3", [0, 1, 3]), ("3,", [3]), ("cuda:2", [2]), (" ALL ", [0, 1, 2, 3])],
)
def test_spec_parsing(spec: str, expected: list[int]) -> None:
    assert parse_spec(spec, [H100] * 4) == expected
    assert GpuPool.from_spec(spec, names=[H100] * 4).devices == [f"cuda:{i}" for i in expected]


@pytest.mark.parametrize("spec", ["5", "0", "0,7", "a,b", "1,1", "cuda:9"])
def test_bad_specs_are_user_errors(spec: str) -> None:
    with pytest.raises(UserError):
        parse_spec(spec, [H100] * 4)


def test_no_gpus_and_mixed_models_are_refused() -> None:
    with pytest.raises(UserError, match="none"):
        parse_spec("all", [])
    with pytest.raises(UserError, match="mixes GPU models"):
        parse_spec("all", [H100, "NVIDIA A100-SXM4-80GB"])
    assert parse_spec("cuda:1", [H100, "NVIDIA A100-SXM4-80GB"]) == [1]  # one GPU of either model is fine


@pytest.mark.gpu
def test_from_spec_probes_the_real_gpus_in_a_subprocess() -> None:
    import torch

    pool = GpuPool.from_spec("all")
    assert len(pool) == torch.cuda.device_count()
    with pool.lease() as device:
        assert device.startswith("cuda:")


def test_a_count_of_zero_says_how_to_name_one_gpu_by_index() -> None:
    """``--gpus 0`` reads as a count (a common slip for GPU 0): the hint says how to name a GPU by its index."""
    with pytest.raises(UserError) as raised:
        parse_spec("0", [H100] * 2)
    assert "cuda:0" in (raised.value.hint or "")
