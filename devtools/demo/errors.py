"""The demo's failure: what went wrong and where to look."""


class DemoFailed(Exception):
    """The demo could not complete; the message says what went wrong and where to look."""
