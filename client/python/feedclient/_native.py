"""feedclient._native: the optional C extension feedclient._fastiter
(next() with a batch ready, client/python/src/fastiter.c), or None.

It is built by CMake beside libfeedclient (build/lib/_fastiter.abi3.so;
installed beside the library) and carried in the wheel inside this
package; it is looked for in this package, then beside the libfeedclient
that feedclient._lib loaded. Without it (built where Python's headers were
missing, or FEEDCLIENT_PURE=1 in the environment) every path is the Python
one, with the same results: only next()'s cost differs. It is the limited
API's (abi3), for CPython 3.11 and later."""

import importlib.machinery
import importlib.util
import os
import sys

from . import _lib

NAME = "_fastiter.abi3.so"


def _load():
    if os.environ.get("FEEDCLIENT_PURE", "") not in ("", "0"):
        return None, "FEEDCLIENT_PURE is set"
    if sys.implementation.name != "cpython" or sys.version_info < (3, 11):
        return None, f"{sys.implementation.name} {sys.version_info[:2]} is not CPython >= 3.11"
    here = os.path.dirname(os.path.abspath(__file__))
    tried = []
    for d in (here, os.path.dirname(_lib.path)):
        p = os.path.join(d, NAME)
        if not os.path.exists(p):
            tried.append(f"{p}: does not exist")
            continue
        try:
            loader = importlib.machinery.ExtensionFileLoader("feedclient._fastiter", p)
            spec = importlib.util.spec_from_file_location("feedclient._fastiter", p,
                                                          loader=loader)
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
        except ImportError as e:
            tried.append(f"{p}: {e}")
            continue
        sys.modules["feedclient._fastiter"] = mod
        return mod, p
    return None, "; ".join(tried)


# the module, and its path (or why there is none)
fastiter, where = _load()
