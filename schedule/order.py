"""Which loop order reads memory with unit stride: a question the auto schedule asks
and the default nest (stage.py) asks too, kept apart from both so that neither imports
the other."""
import tex.symbolic as sym

from tex.errors import ScheduleError
from tex.expr import Access, affine_terms, walk as walk_expr


def unit_stride_score(accesses, index):
    """How many of `accesses` have `index` in their last dimension with step one."""
    score = 0
    for node in accesses:
        coeffs, _ = affine_terms(node.index[-1], node.tensor.name)
        score += abs(coeffs.get(index, 0)) == 1
    return score


def prefers_reduction_outside(defn):
    """Should the last output index run inside the reduction loops (better unit stride)?
    Only the reads that move with both loops count: a read of one of them alone (the
    row's mean mu[i] in sum over j of (X[i, j] - mu[i])**2) and the result are loop
    invariant in the other order, and counting them put a softmax's row sums in column
    order (512 x 512: 2.2 ns an element against numpy's 0.9)."""
    red = defn.reduction
    if red is None or not defn.indices:
        return False
    last, reduced = defn.indices[-1], red.over[-1]

    def uses(node, x):
        return any(x in sym.sympify(ix).free_symbols for ix in node.index)
    both = [n for n in walk_expr(red.body) if isinstance(n, Access) and n.index and
            uses(n, last) and uses(n, reduced)]
    return unit_stride_score(both, last) > unit_stride_score(both, reduced)


def stream_reads(stage, block):
    """The auto schedule's loop order for a reduction stage (a handle, schedule/
    handles.py) whose reads stream with an output index inside the reduction loops
    (index_inside_reduction). An index other than the output's last runs in blocks of
    `block` inside the reductions: the block's partial results stay in a local
    accumulator, written to the output's strided column once per block (`ijb->bi`, 64
    x 128 x 256 float32 over a row-major X, Emerald Rapids, 2 threads: in output order,
    each element of X a strided read, 15.7 ms; the column accumulated in memory 12 ms;
    in blocks 0.45 ms, numpy 0.40). An order the legality rules refuse is left as is."""
    d = stage.definition
    inside = index_inside_reduction(d)
    if inside is None:
        return
    others = [x for x in d.indices if x is not inside]
    try:
        if inside is d.indices[-1]:
            stage.reorder(*others, *d.reduction.over, inside)
            return
        outer, inner = stage.split(inside, block)
        stage.reorder(*others, outer, *d.reduction.over, inner)
    except ScheduleError:
        pass


def index_inside_reduction(defn):
    """The output index to run inside the reduction loops, or None: the last one when
    prefers_reduction_outside, else another output index that the reads moving with the
    innermost reduction step by one where neither the last index nor the reduction does
    (`ijb->bi` over a row-major X[i, j, b])."""
    if prefers_reduction_outside(defn):
        return defn.indices[-1]
    red = defn.reduction
    if red is None or len(defn.indices) < 2:
        return None
    reduced = red.over[-1]
    reads = [n for n in walk_expr(red.body) if isinstance(n, Access) and n.index and
             reduced in set().union(*(sym.sympify(ix).free_symbols for ix in n.index))]
    if unit_stride_score(reads, defn.indices[-1]) or unit_stride_score(reads, reduced):
        return None
    scores = {x: unit_stride_score(reads, x) for x in defn.indices[:-1]}
    best = max(scores, key=scores.get)
    return best if scores[best] else None
