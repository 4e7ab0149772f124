"""feedclient: batches from feedd, the per-node data daemon, in Python.

    import feedclient
    with feedclient.Loader("fashion-mnist", 256,
                           pipeline="random_crop(size=28, pad=2) | hflip(p=0.5)",
                           as_torch=True) as loader:
        for epoch in range(10):
            loader.set_epoch(epoch)
            for batch in loader:          # one epoch
                x, y = batch["image"], batch["label"]

A thin layer over libfeedclient (ctypes, no compiled extension): batches
are numpy arrays or torch tensors viewing shared memory the daemon filled,
with no copy. See Loader, Batch, datasets() and the exceptions in
feedclient.errors. The C library is found through $FEEDCLIENT_LIB, then the
copy a wheel carries, the build tree of this checkout (build/lib), the one
cmake --install put beside this package, then the system loader.
"""

import sys

from ._lib import path as library_path
from ._lib import lib as _lib_handle
from .errors import (AccessDenied, BadPipeline, ConcurrentUse, CreditsExhausted, DaemonGone,
                     DaemonNotRunning, Detached, FeedError, GpuUnavailable, InvalidArgument,
                     LibraryNotFound, LimitReached, LoaderClosed, ResumeRefused,
                     SkippedSamplesWarning, StreamStopped, Timeout, TransformError,
                     UnknownDataset)
from .device import DeviceArray, gpu_info
from .loader import Batch, DatasetInfo, DatasetName, FieldInfo, Loader, datasets, status
from .torchvision import from_torchvision
from .mixture import Source
from .ops import Op, ops

if "torch" in sys.modules:  # torch.load(weights_only=True) of a saved Batch
    from ._batch import register_torch_safe
    register_torch_safe(sys.modules["torch"])

__version__ = "0.1.0"
library_version: str = _lib_handle.feed_version().decode()
"""The version of the libfeedclient loaded (feed_version())."""

__all__ = [
    "Loader", "Batch", "datasets", "DatasetInfo", "DatasetName", "FieldInfo", "FeedError",
    "LibraryNotFound",
    "DaemonNotRunning", "UnknownDataset", "AccessDenied", "InvalidArgument", "BadPipeline",
    "ResumeRefused", "LimitReached", "CreditsExhausted", "DaemonGone", "StreamStopped",
    "Detached", "LoaderClosed", "ConcurrentUse", "library_path", "library_version",
    "GpuUnavailable", "gpu_info", "status", "DeviceArray", "Timeout", "TransformError",
    "from_torchvision", "SkippedSamplesWarning", "Source", "ops", "Op",
]
