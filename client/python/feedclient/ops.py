"""feedclient.ops(): the pipeline ops the daemon accepts, each with a line
saying what it does.

The daemon answers from its own op table (the ListOps request; the lines
`feedd --list-ops` prints), so the list is that daemon's, never a copy
kept here that could drift from it.
"""

import ctypes
from typing import List, NamedTuple, Optional

from . import _lib
from ._lib import lib
from ._conn import _connect, _error


class Op(NamedTuple):
    """One pipeline op: name ("hflip"), usage (its keys with their defaults,
    as `feedd --list-ops` prints it: "hflip(p=0.5, field)") and description
    (one line saying what it does)."""
    name: str
    usage: str
    description: str


def ops(socket: Optional[str] = None) -> List[Op]:
    """Every pipeline op the daemon on socket (None: $FEEDD_SOCKET, else
    /run/feedd/feedd.sock) accepts, in its own order, as Op(name, usage,
    description). Blocks until the daemon answers (at most 10 s). Any
    thread. Raises DaemonNotRunning (naming the socket), FeedError (a feedd
    too old to list them says so)."""
    conn = _connect(socket)
    try:
        lst = ctypes.POINTER(_lib.OpList)()
        r = lib.feed_list_ops(conn, ctypes.byref(lst))
        if r < 0:
            raise _error(conn, r)
        try:
            return [Op(o.name.decode(), o.usage.decode(), o.summary.decode())
                    for o in (lst.contents.ops[i] for i in range(lst.contents.count))]
        finally:
            lib.feed_op_list_free(lst)
    finally:
        lib.feed_disconnect(conn)
