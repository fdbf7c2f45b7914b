"""Lowering: a Program becomes its default (unscheduled) loop nest.

Each definition becomes one Stage (schedule/stage.py lowers it). An elementwise
definition is a perfect nest over its output indices with one Store. A reduction keeps
a scalar accumulator:

    for i in 0..M:
      acc = identity
      for k in 0..K:
        acc = combine(acc, body)
      C[i] = acc
"""
from dataclasses import dataclass

from tex.program import Program, as_program

from .ir import Buffer, Kernel, Scope
from .stage import identity

__all__ = ["Lowered", "buffers_for", "identity", "lower"]


@dataclass(frozen=True, eq=False)
class Lowered:
    kernel: Kernel
    program: Program
    buffers: dict           # tensor -> Buffer


def buffers_for(program):
    """One Buffer per input and definition: inputs, outputs, and temporaries between."""
    buffers = {t: Buffer(t.name, t.shape, t.dtype, Scope.INPUT) for t in program.inputs}
    for d in program.definitions:
        scope = Scope.OUTPUT if d in program.outputs else Scope.TEMP
        buffers[d] = Buffer(d.name, d.shape, d.dtype, scope)
    return buffers


def lower(outputs, fast_math=True):
    """Program (or output definitions) -> Lowered default loop nest."""
    from .schedule import Schedule
    sched = Schedule(as_program(outputs), fast_math)
    return Lowered(sched.kernel(), sched.program, sched._buffers())
