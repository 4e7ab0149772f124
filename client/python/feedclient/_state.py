"""feedclient._state: a Loader's position as a dict (state_dict) and
continuing from one (load_state_dict). The position is the C library's
resume token (feed_stream_resume_token) with the epoch it belongs to; the
daemon checks the token when it is loaded. Runs on the Loader's thread
with its lock taken, as every Loader call does."""

import ctypes
from typing import Any, Dict

from . import _lib
from ._lib import lib
from .errors import FeedError, InvalidArgument


class _Resumable:
    """The Loader's state_dict and load_state_dict (a base of Loader)."""

    def state_dict(self) -> Dict[str, Any]:
        """The position: the next batch not yet returned, and its epoch.

        A dict {"feedclient": 1, "dataset": str, "epoch": int, "token": bytes
        or None} (picklable, torch.save-able). Taken during an iteration, it
        is the position after the last batch that iteration returned;
        between iterations, the start of the epoch the next one gives. The
        token is the C library's resume token (feed_stream_resume_token):
        it also names the dataset version, pipeline, seed, batch size and
        order, which the daemon checks when it is loaded. Does not block;
        takes the same thread as the iteration."""
        self._enter()
        try:
            if self._resume is not None:
                epoch, token = self._resume
            elif self._iter_epoch is not None:
                # transform= ran ahead: the position is that of the first
                # batch not yet given to the loop
                pend = self._pending
                epoch = self._iter_epoch
                token = pend[0][3] if pend else self._token()
            else:
                epoch = self._epoch_next
                token = self._token() if self._cur_start == epoch else None
            return {"feedclient": 1, "dataset": self._dataset, "epoch": epoch, "token": token}
        finally:
            self._lock.release()

    def _token(self):
        buf = ctypes.create_string_buffer(_lib.FEED_RESUME_MAX)
        n = ctypes.c_size_t()
        r = lib.feed_stream_resume_token(self._box[0].st, buf, len(buf), ctypes.byref(n))
        if r < 0:
            raise FeedError(f"resume token: {_lib.strerror(r)}", r, _lib.strerror(r))
        return buf.raw[:n.value]

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues where state_dict() was taken: the next iteration gives
        the rest of that epoch (from the batch not yet returned then, none
        if it was the last), the ones after it whole epochs. Works in a new
        process and with another world_size or rank (the same global
        position). Opens the stream now, so a refusal raises here:
        ResumeRefused naming what differs, InvalidArgument for a dict that
        is not a Loader's state. Blocks up to 10 s while the daemon opens
        the stream."""
        if not isinstance(state, dict) or state.get("feedclient") != 1 or \
                not isinstance(state.get("epoch"), int) or \
                not isinstance(state.get("token"), (bytes, type(None))):
            raise InvalidArgument("load_state_dict: not a feedclient.Loader state_dict")
        # a mixture's state goes to a mixture of other weights or sources
        # too: the daemon carries each source's position over by version
        if state.get("dataset") != self._dataset and not (
                self._mixture is not None and str(state.get("dataset")).startswith("mixture(")):
            raise InvalidArgument(f"load_state_dict: the state is of dataset "
                                  f"{state.get('dataset')!r}, this Loader reads "
                                  f"{self._dataset!r}")
        epoch, token = state["epoch"], state["token"]
        if self._group is not None:
            raise InvalidArgument(f"load_state_dict: the Loader is in group {self._group!r}, "
                                  f"which starts its members where it is")
        self._enter()
        try:
            if token is not None:
                self._open(0, token)    # a refusal leaves the Loader as it was
            self._gen += 1
            self._iter_epoch = None
            self._epoch_next = epoch
            self._resume = (epoch, token) if token is not None else None
        finally:
            self._lock.release()
