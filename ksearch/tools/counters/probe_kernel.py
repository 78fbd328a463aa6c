"""A trusted one-kernel program ncu profiles to find which containment it can profile through (``collect.probe_rungs``):
one tiny kernel inside the NVTX range of shape 0, as a counters worker's call would be."""

from __future__ import annotations

import argparse
import sys

from ksearch.tools.counters.ncu_csv import RANGE_PREFIX


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    x = torch.ones(256, device=args.device)
    torch.cuda.synchronize(args.device)
    torch.cuda.nvtx.range_push(f"{RANGE_PREFIX}0")
    x.add_(1)
    torch.cuda.synchronize(args.device)
    torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
