"""Honest control: a PyTorch softmax whose every call takes about 5 ms (a host sleep, which the CPU timing path's
wall-clock events see as kernel time). Expected: PASSED, timed at about 5 ms."""

import time

import torch


def kernel(x: torch.Tensor) -> torch.Tensor:
    time.sleep(0.005)
    return torch.softmax(x.double(), dim=-1).float()
