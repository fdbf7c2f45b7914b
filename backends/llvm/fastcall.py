"""Kernels called as CPython builtin functions.

Each kernel's module has a METH_FASTCALL twin of its entry point (entry.py's `@k.fast`:
the arrays and integers as Python objects, the GIL released around the kernel, the
status returned as a Python int). Made into a builtin function here, it is what a call
path calls: a compiled dot product of 8 float32 elements cost 1.42 us a call through
ctypes (1.1 of it ctypes' own: converting each argument, libffi), 0.59 this way
(np.dot 0.63).
"""
import ctypes

FAST_SUFFIX = ".fast"   # the twin's symbol: the entry's name and this (entry.py)
METH_FASTCALL = 0x0080


class _MethodDef(ctypes.Structure):
    """CPython's PyMethodDef."""
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


# a prototype of tex's own (ctypes.pythonapi's function objects are shared: another
# library's restype/argtypes there would change tex's calls, and tex's would change theirs)
_new_function = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.py_object,
                                  ctypes.c_void_p)(("PyCFunction_NewEx", ctypes.pythonapi))


def caller(image, symbol):
    """The callable a call path runs the kernel `symbol` of `image` with, `f(*arrays,
    *ints) -> status`: its builtin fast entry (every kernel module has one)."""
    address = image.symbols[symbol + FAST_SUFFIX]
    method = _MethodDef(symbol.encode(), address, METH_FASTCALL, None)
    # the builtin's `self` (which its code ignores) keeps the method definition and
    # the image that holds its code alive as long as the builtin is
    return _new_function(ctypes.addressof(method), (method, image), None)
