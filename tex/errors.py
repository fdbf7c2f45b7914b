"""The exceptions of tex's public contract (API.md section 6)."""


class ShapeError(ValueError):
    """A shape or size is wrong: rank, extent, a mismatch between tensors, an `out=`."""


class ScheduleError(Exception):
    """A schedule primitive was refused; the message names the primitive, the loop and why."""
