"""The shape of the code base: no module imports one that imports it back (at the top or
inside a function), and no module grows past MAX_LINES lines (tinygrad's size budget).
Prints the module sizes and the layer graph when run with -s."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = {"tex": "tex", "schedule": "tex.scheduler", "backends": "tex.backends"}
MAX_LINES = 700
OVERSIZED = {}         # module -> why it may be larger


def modules():
    """{module name: path} of tex's own modules."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package] + parts)] = path
    return out


def imports(mods):
    """{module: the tex modules it imports}; the package `tex` itself (its re-exports,
    the public namespace that late imports go through) is not an edge."""
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = m.split(".")
                if node.level:
                    keep = len(base) - node.level + (path.name == "__init__.py")
                    target = ".".join(base[:keep] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[m] |= {t for t in names if t in mods and t != m and t != "tex"
                         and not m.startswith(t + ".")}
    return graph


def cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    found = cycles(imports(modules()))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_layers_import_downward():
    """DESIGN.md: backends may import the scheduler and the DSL, the scheduler may import
    the DSL, never the reverse (the DSL reaches the compiler through `import tex`)."""
    rank = {"tex.backends": 2, "tex.scheduler": 1}

    def layer(m):
        return next((r for p, r in rank.items() if m.startswith(p)), 0)
    # the command line and the benchmarks drive the whole stack from above it
    # (and the interactive warm-up loads the stack's modules ahead of the first call)
    top = {"tex", "tex.cli", "tex.bench", "tex.einsum", "tex.tuner", "tex.tune_worker",
           "tex.warmup"}
    bad = [(m, t) for m, ts in imports(modules()).items() for t in ts
           if m not in top and not m.startswith("tex.bench.") and layer(t) > layer(m)]
    assert not bad, f"imports against the layers: {bad}"


def test_module_sizes():
    sizes = {m: len(p.read_text().splitlines()) for m, p in modules().items()}
    print("\n" + "\n".join(f"{n:5d} {m}" for m, n in sorted(sizes.items(), key=lambda t: -t[1])))
    big = {m: n for m, n in sizes.items() if n > MAX_LINES and m not in OVERSIZED}
    assert not big, f"modules over {MAX_LINES} lines (split them along a seam): {big}"
