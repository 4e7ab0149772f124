"""feedclient.errors: the exceptions of the package.

Every failure of a call that reaches libfeedclient or feedd raises a
FeedError (or a subclass a caller may catch on its own). Each carries the
negative errno-style code of the C library (.code), the C library's name
for it (.reason, feed_strerror()) and the detail in the daemon's or the
library's own words (.detail, feed_errmsg()), which names the dataset,
socket, field, limit, shard or block concerned. str(e) is the detail
followed by what to do where there is something to say.

Imports nothing of the package, so the loader of the C library can raise
LibraryNotFound before anything else exists.
"""

import errno as _errno
from typing import Optional


class FeedError(Exception):
    """A failure reported by libfeedclient or feedd.

    Attributes: code (negative errno-style int, 0 when the failure was seen
    in Python only), reason (the C library's words for the code, "" when
    code is 0), detail (the daemon's or the library's message naming what
    failed).
    """

    def __init__(self, detail: str, code: int = 0, reason: str = "") -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.detail, self.code, self.reason))


class LibraryNotFound(FeedError, ImportError):
    """libfeedclient.so could not be loaded; the message lists each path tried."""


class DaemonNotRunning(FeedError):
    """Nothing answers on the socket (no feedd there, or a stale socket).

    .socket is the path tried (None when the C library chose it from
    $FEEDD_SOCKET or its default; the message names it then)."""

    def __init__(self, detail: str, code: int = 0, reason: str = "",
                 socket: Optional[str] = None) -> None:
        super().__init__(detail, code, reason)
        self.socket = socket

    def __reduce__(self):
        return (type(self), (self.detail, self.code, self.reason, self.socket))


class SkippedSamplesWarning(UserWarning):
    """Loader(on_error="skip"): once per epoch, how many samples failed and
    were replaced, naming their files (dataset paths, or sample indices)."""


class UnknownDataset(FeedError):
    """The daemon serves no dataset of that name (or it failed to open there)."""


class AccessDenied(FeedError):
    """The daemon refuses this user the dataset, or the socket refuses the connection."""


class InvalidArgument(FeedError, ValueError):
    """An option the library or the daemon refuses; the message names it."""


class BadPipeline(InvalidArgument):
    """The daemon refuses the pipeline; the message names the op and the key."""


class ResumeRefused(InvalidArgument):
    """The daemon refuses a resume token: dataset version, pipeline, seed,
    batch size or order differ from those it was taken with (named), or it
    is not a token at all."""


class LimitReached(FeedError):
    """A per-user limit of the daemon (connections, streams, credits, slot
    memory, named in the message) or shared memory ran short."""


class CreditsExhausted(FeedError):
    """More batches are alive than the Loader's credits allow (a batch, or
    an array or tensor viewing one, holds its slot; a list of them or an
    autograd graph over them keeps them alive); .held says how many. A
    plain loop needs credits >= 1, a loop that keeps k batches credits >=
    k. Drop them (torch.no_grad() for evaluation), or raise credits."""

    def __init__(self, detail: str, code: int = 0, reason: str = "", held: int = 0) -> None:
        super().__init__(detail, code, reason)
        self.held = held

    def __reduce__(self):
        return (type(self), (self.detail, self.code, self.reason, self.held))


class DaemonGone(FeedError):
    """feedd went away and did not come back within the Loader's reconnect_s."""


class StreamStopped(FeedError):
    """The daemon stopped the stream, e.g. on a corrupt shard (the message
    names shard and block); the stream delivers nothing more."""


class Detached(StreamStopped):
    """The Loader's group detached it: it released no batch for feedd's
    group timeout (the message names the group and the timeout). The
    batches it holds stay valid; the other members went on without it."""


class Timeout(FeedError, TimeoutError):
    """No batch came within the Loader's timeout= (the message names the
    dataset, the wait and what `feedctl status` shows about the stream).
    The Loader stays usable: the next call waits again."""


class TransformError(FeedError):
    """The Loader's transform= raised on a batch; .epoch and .index say
    which (the original exception is the __cause__). The iteration goes on
    with the next batch if the loop continues."""

    def __init__(self, detail: str, code: int = 0, reason: str = "", epoch: int = 0,
                 index: int = 0) -> None:
        super().__init__(detail, code, reason)
        self.epoch = epoch
        self.index = index

    def __reduce__(self):
        return (type(self), (self.detail, self.code, self.reason, self.epoch, self.index))


class LoaderClosed(FeedError):
    """The Loader was used after close()."""


class ConcurrentUse(FeedError):
    """The Loader was used from two threads at once (one thread at a time
    may iterate it, close it or take its state)."""


_BY_CODE = {
    -_errno.ENOENT: UnknownDataset,
    -_errno.EACCES: AccessDenied,
    -_errno.EPERM: AccessDenied,
    -_errno.EINVAL: InvalidArgument,
    -_errno.ESTALE: ResumeRefused,
    -_errno.EUSERS: LimitReached,
    -_errno.ENOSPC: LimitReached,
    -_errno.ENOBUFS: CreditsExhausted,
    -_errno.ECONNRESET: DaemonGone,
    -_errno.EPIPE: DaemonGone,
    -_errno.ENOLINK: Detached,   # FEED_EDETACHED
}


def class_for(code: int, detail: str) -> type:
    """The exception class for a C error code and its detail."""
    if code in (-_errno.EINVAL, -_errno.ESTALE) and "resume token" in detail:
        return ResumeRefused
    if code == -_errno.EINVAL and "pipeline" in detail:
        return BadPipeline
    return _BY_CODE.get(code, FeedError)


class GpuUnavailable(FeedError):
    """Loader(device="cuda") where libfeedclient's GPU path is not usable:
    no NVIDIA driver, one too old for the kernels, no device, or a build
    without the kernels; the message is feed_gpu_query()'s reason
    (feedclient.gpu_info() gives it too). device="cpu" works everywhere."""
