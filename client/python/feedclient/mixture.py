"""Mixtures for feedclient.Loader: one stream over several datasets.

    Loader({"web": 0.6, "code": 0.3, "books": 0.1}, 32,
           pipeline=..., samples_per_epoch=None)

Each row of a batch comes from one source, the next row going to the
source furthest below its share (weight / sum of weights) of the rows so
far, so the shares hold exactly up to rounding; each batch has an int32
field "source", the row's source index in the order the mapping gives.
A source that runs out starts its next epoch, reshuffled; a mixture's
epoch holds its sources' epochs together (samples_per_epoch= overrides).
A value may be a weight or a Source, for Mosaic Streaming's caps on the
source's own epoch: Source(weight, repeat=2.0) (every sample twice),
Source(weight, choose=N) (N samples). The daemon blends (one stream, one
set of slots, whatever the number of sources); this module only turns
the mapping into feed_stream_opts.mixture. state_dict() carries every
source's position, and a Loader made with other weights continues each
source from there under the new shares.
"""

import ctypes
import math
from typing import Any, Mapping, NamedTuple, Optional

from . import _lib
from .errors import InvalidArgument


class Source(NamedTuple):
    """A mixture's source: its weight, and Mosaic's repeat / choose caps
    on its own epoch (repeat x its samples, or choose samples)."""
    weight: float
    repeat: Optional[float] = None
    choose: Optional[int] = None


def _number(what: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise InvalidArgument(f"{what}={v!r}: a finite number >= 0 is required")
    return float(v)


class Mixture:
    """The sources of a Loader's mixture, as feed_stream_opts wants them
    (the ctypes array and the bytes it points at live as long as this)."""

    def __init__(self, sources: Mapping[str, Any], samples_per_epoch: Optional[int]):
        if not sources or len(sources) > _lib.FEED_MIXTURE_MAX:
            raise InvalidArgument(f"dataset: a mixture of 1 to {_lib.FEED_MIXTURE_MAX} "
                                  f"sources (name: weight) is required, got {len(sources)}")
        self.names = []
        self._names_b = []
        self._arr = (_lib.MixtureSource * len(sources))()
        for i, (name, v) in enumerate(sources.items()):
            if not isinstance(name, str) or not name or "/" in name:
                raise InvalidArgument(f"dataset: mixture source {name!r}: a dataset name "
                                      f"feedd serves is required")
            src = v if isinstance(v, Source) else Source(v)
            self.names.append(name)
            self._names_b.append(name.encode())
            a = self._arr[i]
            a.dataset = self._names_b[-1]
            a.weight = _number(f"dataset[{name!r}] weight", src.weight)
            a.repeat = _number(f"dataset[{name!r}] repeat", src.repeat or 0)
            if src.choose is not None and (isinstance(src.choose, bool) or
                                           not isinstance(src.choose, int) or src.choose < 1):
                raise InvalidArgument(f"dataset[{name!r}] choose={src.choose!r}: a sample "
                                      f"count >= 1 is required")
            a.choose = src.choose or 0
        if not any(self._arr[i].weight > 0 for i in range(len(sources))):
            raise InvalidArgument("dataset: a mixture needs a weight above 0")
        if samples_per_epoch is not None and (isinstance(samples_per_epoch, bool) or
                                              not isinstance(samples_per_epoch, int) or
                                              not 1 <= samples_per_epoch < 2**62):
            raise InvalidArgument(f"samples_per_epoch={samples_per_epoch!r}: rows of the "
                                  f"mixture's epoch (an int >= 1), or None")
        self._spe = samples_per_epoch or 0
        self.label = "mixture(" + ", ".join(self.names) + ")"

    def apply(self, o: "_lib.StreamOpts") -> None:
        """Sets the mixture's fields of o (its dataset unset)."""
        o.dataset = None
        o.mixture = ctypes.cast(self._arr, ctypes.POINTER(_lib.MixtureSource))
        o.nmixture = len(self._arr)
        o.samples_per_epoch = self._spe
