"""A stand-in for the receiver's MQTT client: ``poll`` hands out scripted reads, then empty
ones, recording the timeouts it was given. For unit tests of the receiver's read-on rules."""

from __future__ import annotations

from dataclasses import dataclass

from connector.mqtt.driver import Read


@dataclass
class OpenExchanges:
    """The part of the session the receiver's rules consult."""

    open_pubrecs: int = 0


class ScriptedReads:
    def __init__(self, *reads: Read, connected: bool = True, open_pubrecs: int = 0) -> None:
        self.session = OpenExchanges(open_pubrecs)
        self.reads = list(reads)
        self.connected = connected
        self.timeouts: list[float | None] = []

    def poll(self, timeout: float | None = None) -> Read:
        self.timeouts.append(timeout)
        return self.reads.pop(0) if self.reads else Read()
