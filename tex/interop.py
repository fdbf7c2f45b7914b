"""numpy's protocols on tex expressions: `np.exp(expr)`, `np.maximum(expr, 0)` and
`np.where(cond, a, b)` build tex expressions; what tex has no equivalent for is refused
with a message that names the tex function to use.

`Expr.__array_ufunc__` and `Expr.__array_function__` call `array_ufunc` and
`array_function` here (installed in `tex.expr.NUMPY_HANDLERS` when this module is
imported, which `import tex` does: the expression types sit below the library functions
these handlers build with). Operands follow `tex.expr.as_expr`: Python and numpy scalars
(and 0-d arrays) are constants; an array of data is refused (it is a tensor: declare it
with `tex.tensor` and pass it at call time).
"""
from . import expr as E
from . import library as L

# ufunc name -> the tex builder it is
_UFUNCS = {name: (lambda n: lambda *a: E.op(n, *a))(name) for name in E._UFUNC_NAMES}
_UFUNCS.update({
    "divide": _UFUNCS["true_divide"],
    "positive": lambda x: +E.as_expr(x),
    "fabs": E.abs,
    "square": lambda x: E.as_expr(x) * x,
})

# numpy names whose tex spelling differs (or needs an index): the message names it
_SPELLED = {
    "fmax": "tex.maximum (which propagates NaN; tex has no NaN-ignoring maximum)",
    "fmin": "tex.minimum (which propagates NaN; tex has no NaN-ignoring minimum)",
    "logaddexp": "tex.maximum(a, b) + tex.softplus(-tex.abs(a - b))",
    "reciprocal": "1 / x",
    "sum": "tex.sum(expr, over=index)", "add.reduce": "tex.sum(expr, over=index)",
    "prod": "tex.prod(expr, over=index)", "multiply.reduce": "tex.prod(expr, over=index)",
    "max": "tex.max(expr, over=index) for a reduction, tex.maximum(a, b) elementwise",
    "amax": "tex.max(expr, over=index)", "maximum.reduce": "tex.max(expr, over=index)",
    "min": "tex.min(expr, over=index) for a reduction, tex.minimum(a, b) elementwise",
    "amin": "tex.min(expr, over=index)", "minimum.reduce": "tex.min(expr, over=index)",
    "argmax": "tex.argmax(expr, over=index)", "argmin": "tex.argmin(expr, over=index)",
    "mean": "tex.mean(expr, over=index)", "var": "tex.var(expr, over=index, ddof=0)",
    "std": "tex.std(expr, over=index, ddof=0)", "dot": "tex.sum(A[i, k] * B[k, j], over=k)",
    "matmul": "tex.sum(A[i, k] * B[k, j], over=k)", "einsum": "tex.einsum on tex tensors",
    "tensordot": "tex.sum(... , over=indices)", "exp2": "tex.exp(x * math.log(2))",
    "log2": "tex.log(x) / math.log(2)", "log10": "tex.log(x) / math.log(10)",
    "around": "tex.round", "trunc": "tex.where(x < 0, tex.ceil(x), tex.floor(x))",
}


def _refuse(name, what="numpy."):
    hint = _SPELLED.get(name)
    if hint:
        return TypeError(f"{what}{name} on a tex expression: use {hint}")
    return TypeError(f"{what}{name} has no tex equivalent for tex expressions; tex's "
                     "elementwise functions are the operators and tex."
                     + ", tex.".join(sorted(_PUBLIC)))


_PUBLIC = ("abs", "ceil", "clip", "cos", "exp", "expm1", "floor", "isfinite", "isnan", "log",
           "log1p", "maximum", "minimum", "round", "rsqrt", "sigmoid", "sign", "silu", "sin",
           "softplus", "sqrt", "tanh", "where")


def array_ufunc(ufunc, method, inputs, kwargs):
    name = ufunc.__name__
    if method != "__call__":
        raise _refuse(f"{name}.{method}")
    if kwargs:
        raise TypeError(f"numpy.{name} on a tex expression: keyword arguments "
                        f"({', '.join(kwargs)}) have no meaning for an expression; "
                        "use tex.cast for a dtype")
    fn = _UFUNCS.get(name)
    if fn is None:
        raise _refuse(name)
    return fn(*inputs)


def array_function(func, args, kwargs):
    name = func.__name__
    if name == "where":
        if len(args) + len(kwargs) != 3:
            raise TypeError("numpy.where on a tex expression needs the three-argument "
                            "form: tex.where(cond, a, b)")
        return E.where(*args, **kwargs)
    if name == "clip":
        bounds = {"a_min": kwargs.pop("min", kwargs.pop("a_min", None)),
                  "a_max": kwargs.pop("max", kwargs.pop("a_max", None))}
        if kwargs:
            raise TypeError(f"numpy.clip on a tex expression: {', '.join(kwargs)} has no "
                            "meaning for an expression")
        return L.clip(*args, **{k: v for k, v in bounds.items() if v is not None})
    if name in ("round", "around"):
        return L.round(*args, **kwargs)
    raise _refuse(name)


E.NUMPY_HANDLERS.update(ufunc=array_ufunc, function=array_function)
