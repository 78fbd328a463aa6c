"""The containments ncu and the candidate may run in together, strongest first (pure: no I/O).

Nsight Compute runs inside the candidate's layers, not around them: the containment launcher applies the layers in a
process of one thread and then ``exec``s ncu, which starts the counters worker. (ncu around the launcher cannot work
where the user namespace is a layer: ncu's library starts threads in every process it profiles, the launcher's
included, and the kernel refuses a user namespace to a process of several threads.) ncu's front end talks to its
library in the candidate's process over a socket, so each rung says what it opens for that (``policy.Openings``);
an opening is asked for only beside the layer that keeps it inside the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass

from ksearch import settings
from ksearch.tools.containment.policy import Openings

SANDBOX_VARIABLE = settings.COUNTERS_SANDBOX.name
"""``auto`` (default): the strongest rung of ``ladder`` the probe finds ncu works in; ``off``: no layers (the
scrubbed environment and private folders only); a comma list: exactly those layers, with what ncu needs opened."""


@dataclass(frozen=True)
class Rung:
    """One containment ncu and the candidate may share: its layers, and what is opened for ncu inside them."""

    name: str
    layers: tuple[str, ...]
    openings: Openings = Openings()

    def describe(self) -> str:
        """The layers, and in words what is opened for ncu (the report's ``layers``)."""
        if not self.layers:
            return "none"
        opened = []
        if self.openings.network and "netns" in self.layers:
            opened.append("sockets in its own network namespace")
        elif self.openings.network:
            opened.append("TCP and abstract sockets to this machine")
        if self.openings.connect and "seccomp" in self.layers:
            opened.append("connect in the sandbox")
        return ",".join(self.layers) + (f" (open for ncu: {', '.join(opened)})" if opened else "")


def without(layers: tuple[str, ...], *dropped: str) -> tuple[str, ...]:
    return tuple(layer for layer in layers if layer not in dropped)


def openings_for(layers: tuple[str, ...], readable: tuple[str, ...] = ()) -> Openings:
    """What ncu needs opened in ``layers``: its sockets (inside the sandbox's own network namespace, or to the
    machine where there is none), the loopback of that namespace, ``connect`` where both namespaces leave no
    listener outside in reach, and the ``readable`` paths (its installation)."""
    own_network = "netns" in layers
    return Openings(
        network=True,
        loopback=own_network,
        connect=own_network and "mountns" in layers,
        readable=readable,
        tool=True,
    )


def ladder(machine: tuple[str, ...], readable: tuple[str, ...] = ()) -> list[Rung]:
    """From ``machine``'s layers (``policy.child_layers``), strongest first: all of them (sockets opened only inside
    the sandbox); without seccomp; without seccomp and the network namespace (TCP to the machine's ports open);
    without the mount namespace too. Never below userns, caps and Landlock's file rules unless the user says so."""
    no_seccomp = without(machine, "seccomp")
    no_network = without(no_seccomp, "netns")
    no_mounts = without(no_network, "mountns")
    rungs = [
        Rung("all layers", machine, openings_for(machine, readable)),
        Rung("without seccomp", no_seccomp, openings_for(no_seccomp, readable)),
        Rung("without seccomp or netns", no_network, openings_for(no_network, readable)),
        Rung("without seccomp, netns or mountns", no_mounts, openings_for(no_mounts, readable)),
    ]
    unique: list[Rung] = []
    for rung in rungs:
        if not any(r.layers == rung.layers for r in unique):
            unique.append(rung)
    return unique


def requested_rungs(value: str, readable: tuple[str, ...] = ()) -> list[Rung] | None:
    """The rungs ``KSEARCH_COUNTERS_SANDBOX``'s ``value`` allows (None: probe the default ladder)."""
    value = value.strip()
    if value in ("", "auto"):
        return None
    if value == "off":
        return [Rung("off", (), openings_for((), readable))]
    layers = tuple(v.strip() for v in value.split(",") if v.strip())
    return [Rung("as asked", layers, openings_for(layers, readable))]
