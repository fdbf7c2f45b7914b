"""`s.auto()`: the built-in heuristics (also what `tex.compile(out)` uses).

Per stage, assuming row-major inputs (the common layout; other layouts still run
correctly, only slower):
1. Loop order. The innermost loop should walk the last (unit-stride) dimension of as
   many accesses as possible. If the last output index does that better than the
   innermost reduction index, it moves inside the reductions (the accumulator becomes
   the output row: matmul runs in i, k, j order and LLVM vectorizes j).
2. Threads. The outermost output loop is marked parallel; the generated code runs it
   on one thread when the work is too small to pay for waking the others.
"""
from tex.errors import ScheduleError
from tex.expr import Access, affine_terms, walk as walk_expr


def _unit_stride_score(defn, index):
    """How many accesses (the output included) have `index` in their last dimension."""
    score = 1 if defn.indices and defn.indices[-1] is index else 0
    for node in walk_expr(defn.expr):
        if isinstance(node, Access) and node.index:
            coeffs, _ = affine_terms(node.index[-1], node.tensor.name)
            score += abs(coeffs.get(index, 0)) == 1
    return score


def prefers_reduction_outside(defn):
    """Should the last output index run inside the reduction loops (better unit stride)?"""
    red = defn.reduction
    return bool(red is not None and defn.indices and
                _unit_stride_score(defn, defn.indices[-1]) > _unit_stride_score(defn, red.over[-1]))


def auto_schedule(sched):
    for stage in sched.stages:
        d = stage.definition
        if prefers_reduction_outside(d):
            last = d.indices[-1]
            order = [x for x in d.indices if x is not last] + list(d.reduction.over) + [last]
            try:
                stage.reorder(*order)
            except ScheduleError:          # an order the legality rules refuse: keep default
                pass
        state = stage.state
        if state.axes and not state.axes[0].reduction:
            stage.parallel(stage.loops[0])
    return sched
