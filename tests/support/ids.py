"""Names no other test shares: client ids, topic parts, tags."""

from __future__ import annotations

import uuid


def unique_id(prefix: str) -> str:
    """``prefix`` and 12 random hex digits: a client id (at most 23 characters with a prefix of
    up to 11, valid for MQTT 3.1) or a topic part no other test uses."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"
