"""A per-session cache of compiled test kernels, shared by the test modules."""
import tex

_KERNELS = {}


def compiled(key, build):
    """tex.compile(build()) once per key (kernels are reused across tests and examples)."""
    if key not in _KERNELS:
        _KERNELS[key] = tex.compile(build())
    return _KERNELS[key]
