"""Which loop order reads memory with unit stride: a question the auto schedule asks
and the default nest (stage.py) asks too, kept apart from both so that neither imports
the other."""
import sympy as sp

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
        return any(x in sp.sympify(ix).free_symbols for ix in node.index)
    both = [n for n in walk_expr(red.body) if isinstance(n, Access) and n.index and
            uses(n, last) and uses(n, reduced)]
    return unit_stride_score(both, last) > unit_stride_score(both, reduced)
