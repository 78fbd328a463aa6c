"""``python -m ksearch.cli``: the same as the ``ksearch`` command."""

from ksearch.cli import main

main()
