"""Bad samples are visible (issue 31 item 8): with on_error="skip" the
Loader warns once per epoch (SkippedSamplesWarning) with the count of
samples that failed and their files, which feedd now sends with each
batch (feed_batch_failed: the failed sample's index at each replaced
position). Runs on test_feedclient_bad_samples.py's ImageFolder of good
and broken files.
"""

import warnings

import pytest

import feedclient
from test_feedclient_bad_samples import bad_set, loader  # noqa: F401  (fixture)


def test_skip_warns_once_per_epoch_naming_the_files(bad_set):  # noqa: F811
    with loader(bad_set, 1) as ld:
        for epoch in range(2):
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                n = sum(len(b.indices) for b in ld)
            skips = [w for w in got if issubclass(w.category, feedclient.SkippedSamplesWarning)]
            assert n == bad_set.n
            assert len(skips) == 1, [str(w.message) for w in got]
            msg = str(skips[0].message)
            k = len(bad_set.bad)
            assert f"{k} samples of epoch {epoch} of dataset 'bad' failed" in msg, msg
            for i in bad_set.bad:
                assert f"{bad_set.names[i]} (sample {i})" in msg, msg


def test_no_warning_without_failures(bad_set):  # noqa: F811
    with feedclient.Loader("bad", 2, socket=bad_set.daemons[1].sock, shuffle=False,
                           on_error="skip", max_bad=10,
                           pipeline="decode | random_resized_crop(size=8)") as ld:
        it = iter(ld)
        with warnings.catch_warnings():
            warnings.simplefilter("error", feedclient.SkippedSamplesWarning)
            first = next(it)   # the first files of the tree are good
        assert not first.replaced
