"""The innermost-reduction strategies (seeds/004) as pure functions of a stage's state,
written with the primitives: each returns the new state and the step records that made
it, so that a refused strategy changes nothing.

- "inner_reduction": split the reduction loop by the vector width W and vectorize the
  inner part: a horizontal reduction after every vector.
- "vector_accumulator": split it by W*U, privatize and vectorize the inner part: U
  vector accumulators run through the loop, one horizontal reduction at the end.
- "inner_parallel": split the innermost output loop by W and move its inner part inside
  the reduction loops, vectorized: each lane owns a row, no horizontal reduction at all.
"""
from tex.errors import ScheduleError
from tex.expr import Access, walk as walk_expr

from . import primitives as P
from .ir import LoopKind
from .steps import Privatize, Reorder, SetKind, Split
from .target import target

STRATEGIES = ("inner_parallel", "inner_reduction", "vector_accumulator")


def reduction_strategy(state, name, tail="peel", accumulators=None):
    """(state, steps) of strategy `name` applied to `state`; `tail` is the vector loops'
    tail ("peel" or "mask"), `accumulators` the vector_accumulator's U (default: four
    registers' worth of accumulators, at least one vector)."""
    d = state.definition
    stage, red = d.name, d.reduction
    if red is None:
        raise ScheduleError(f"reduction_strategy: stage {stage} has no reduction")
    if name not in STRATEGIES:
        raise ScheduleError(f"reduction_strategy: {name!r} is not one of "
                            f"{', '.join(map(repr, STRATEGIES))}")
    tails = ("peel", "mask")
    if tail not in tails:
        raise ScheduleError(f"reduction_strategy: tail={tail!r} is not one of "
                            f"{', '.join(map(repr, tails))}")
    width, default_accumulators = _lanes_and_accumulators(d)
    steps = []

    def split(state, var, factor):
        state, outer, inner = P.split(state, var, factor, P.Tail.PEEL)
        steps.append(Split(stage, var.name, factor, P.Tail.PEEL.value))
        return state, outer, inner

    def vectorize(state, var):
        state = P.set_kind(state, var, LoopKind.VECTOR, tail)
        steps.append(SetKind(stage, var.name, LoopKind.VECTOR.value, state.axis(var).tail.value))
        return state

    if name == "inner_parallel":
        outputs = [a for a in state.axes if not a.reduction]
        if not outputs:
            raise ScheduleError(f"reduction_strategy: stage {stage} has no output loop to "
                                "spread over the vector lanes")
        state, _, inner = split(state, outputs[-1].var, width)
        order = [a.var for a in state.axes if a.var is not inner] + [inner]
        state = P.reorder(state, order)
        steps.append(Reorder(stage, tuple(v.name for v in order)))
        return vectorize(state, inner), steps
    innermost = [a for a in state.axes if a.reduction][-1]
    if state.axes[-1] is not innermost:
        raise ScheduleError(f"reduction_strategy: the innermost loop of stage {stage} is not "
                            f"the reduction loop {innermost.name}")
    if name == "inner_reduction":
        state, _, inner = split(state, innermost.var, width)
        return vectorize(state, inner), steps
    if accumulators is None:
        accumulators = default_accumulators
    if isinstance(accumulators, bool) or not isinstance(accumulators, int) or accumulators < 1:
        raise ScheduleError(f"reduction_strategy: accumulators= must be an integer >= 1, "
                            f"got {accumulators!r}")
    state, _, inner = split(state, innermost.var, width * accumulators)
    state = P.privatize(state, inner)
    steps.append(Privatize(stage, inner.name))
    return vectorize(state, inner), steps


def _lanes_and_accumulators(d):
    """The vector width W of definition `d`'s reduction (lanes of its narrowest load) and
    the vector accumulator's default U (four registers' worth, at least one vector)."""
    red = d.reduction
    loads = [a.tensor.dtype for a in walk_expr(red.body) if isinstance(a, Access)]
    narrow = min(loads, key=lambda dt: dt.itemsize) if loads else red.dtype
    return target().lanes(narrow), max(1, 4 * narrow.itemsize // red.dtype.itemsize)


def accumulator_span(d):
    """W x U: the elements of the reduction loop one pass of the vector accumulator's
    main loop takes, with the default U (a shorter loop runs only its tail)."""
    width, accumulators = _lanes_and_accumulators(d)
    return width * accumulators
