"""Schedules: the primitives applied to a program's loop nest, kept as a replayable list."""
from tex.program import as_program

from .lower import lower


class Schedule:
    """The loop nest of a program and the primitives applied to it."""

    def __init__(self, program):
        self.program = as_program(program)
        self.lowered = lower(self.program)
        self.history = []

    def kernel(self, fast_math=True):
        return self.lowered.kernel

    def __str__(self):
        from .printer import format_nest
        return format_nest(self.lowered.kernel)


def schedule(out):
    return Schedule(out)


def default_schedule(program):
    return Schedule(program)
