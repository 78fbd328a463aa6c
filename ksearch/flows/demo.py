"""The offline demo: six rounds of the built-in softmax task on the CPU, driven by a scripted reply file that ships
inside the package (``ksearch/examples/softmax-demo.jsonl``), so that ``ksearch demo`` runs from an installed wheel
in any folder. The replies were written by hand and say so; they are not a real model's output."""

from __future__ import annotations

from pathlib import Path

REPLIES = Path(__file__).resolve().parents[1] / "examples" / "softmax-demo.jsonl"
"""The scripted replies, by call key (a checkout also has them as examples/softmax-demo.jsonl)."""
TASK = "softmax"
DEVICE = "cpu"
ROUNDS = 6
STAGNATION_WINDOW = 2
