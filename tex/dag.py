"""The small directed graph a program is (tex used only this much of networkx, whose
import alone cost ~110 ms of every process's first compile): nodes in insertion order,
edges, successors, an induced subgraph, and networkx's lexicographic topological sort
(the same order: smallest (key, insertion rank) first among the nodes ready)."""
import heapq


class DiGraph:
    """Nodes are hashable objects; `nodes` and `successors` keep insertion order."""

    def __init__(self):
        self._succ, self._pred = {}, {}

    def add_node(self, n):
        if n not in self._succ:
            self._succ[n], self._pred[n] = {}, {}

    def add_edge(self, a, b):
        self.add_node(a)
        self.add_node(b)
        self._succ[a][b] = None
        self._pred[b][a] = None

    @property
    def nodes(self):
        return tuple(self._succ)

    def __iter__(self):
        return iter(self._succ)

    def __contains__(self, n):
        return n in self._succ

    def __len__(self):
        return len(self._succ)

    def successors(self, n):
        return iter(self._succ[n])

    def predecessors(self, n):
        return iter(self._pred[n])

    def subgraph(self, nodes):
        """The graph induced by `nodes` (a copy, in this graph's order)."""
        keep = set(nodes)
        g = DiGraph()
        for n in self._succ:
            if n in keep:
                g.add_node(n)
        for a in g._succ:
            for b in self._succ[a]:
                if b in keep:
                    g.add_edge(a, b)
        return g


def topological_order(g, key):
    """networkx.lexicographical_topological_sort(g, key=key) as a list; ValueError if
    `g` has a cycle."""
    rank = {n: k for k, n in enumerate(g)}
    indegree = {n: len(g._pred[n]) for n in g if g._pred[n]}
    ready = [(key(n), rank[n], n) for n in g if not g._pred[n]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, _, n = heapq.heappop(ready)
        for child in g._succ[n]:
            indegree[child] -= 1
            if not indegree[child]:
                del indegree[child]
                heapq.heappush(ready, (key(child), rank[child], child))
        out.append(n)
    if indegree:
        raise ValueError("the graph has a cycle")
    return out


def is_acyclic(g):
    try:
        topological_order(g, key=lambda n: 0)
    except ValueError:
        return False
    return True
