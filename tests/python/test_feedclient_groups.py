"""feedclient.Loader(group=...) through a real feedd: two Loaders of one
group receive the same batches (a late joiner the rest of the group's
epoch, from where it is told it came in); a Loader asking the group for
another batch_size is refused naming it; a write into one member's batch
does not reach the other's."""

import numpy as np
import pytest

import feedclient


def test_group_members_get_the_same_batches(fc):
    kw = dict(socket=fc.sock, shuffle=True, seed=3, credits=2, group="pyg")
    with feedclient.Loader("small", 7, **kw) as a, feedclient.Loader("small", 7, **kw) as b:
        assert (a.first_epoch, a.first_batch) == (0, 0)
        # within the group's depth: twice the slots (credits + the one being fetched)
        assert b.first_epoch == 0 and b.first_batch <= 2 * 3
        got_a, got_b = {}, {}
        ia, ib = iter(a), iter(b)
        done_a = done_b = False
        while not (done_a and done_b):
            for it, got, name in ((ia, got_a, "a"), (ib, got_b, "b")):
                if (done_a if name == "a" else done_b):
                    continue
                try:
                    batch = next(it)
                except StopIteration:
                    if name == "a":
                        done_a = True
                    else:
                        done_b = True
                    continue
                assert batch.epoch == 0
                got[batch.index] = (batch.indices.copy(), batch["image"].copy())
                if name == "a":
                    batch["image"][...] = 0  # copy-on-write: b must not see it
                del batch
        assert sorted(got_a) == list(range(len(a)))
        assert sorted(got_b) == list(range(b.first_batch, len(a)))
        for i, (idx, img) in got_b.items():
            np.testing.assert_array_equal(idx, got_a[i][0])
            np.testing.assert_array_equal(img, got_a[i][1])
            np.testing.assert_array_equal(img, fc.src["small"]["image"][idx])


def test_group_mismatch_names_the_parameter(fc):
    with feedclient.Loader("small", 7, socket=fc.sock, group="pym"):
        with pytest.raises(feedclient.InvalidArgument) as e:
            feedclient.Loader("small", 8, socket=fc.sock, group="pym")
        assert "group 'pym': batch_size 8 differs from the group's 7" in str(e.value)


def test_group_set_epoch_refused(fc):
    with feedclient.Loader("small", 7, socket=fc.sock, group="pye") as a:
        with pytest.raises(feedclient.InvalidArgument, match="group 'pye'"):
            a.set_epoch(3)


def test_idle_member_detached_others_go_on(fc, feedd_factory, tmp_path):
    d = feedd_factory(tmp_path, "--dataset", f"small={fc.dir / 'small'}",
                      "--group-timeout-ms", 200)
    kw = dict(socket=d.sock, shuffle=True, seed=1, credits=2, group="pyd")
    src = fc.src["small"]["image"]
    with feedclient.Loader("small", 10, **kw) as b:
        ib = iter(b)
        held = next(ib)  # b holds a batch, and the group's others unread, then idles
        with feedclient.Loader("small", 10, **kw) as a:
            # a joins behind b's slots: it gets batches once b is detached
            n = sum(1 for _ in a)
            assert a.first_batch > 0 and n == len(a) - a.first_batch
        with pytest.raises(feedclient.Detached) as e:
            next(ib)
        assert "group 'pyd': detached after releasing nothing for 200 ms" in str(e.value)
        assert isinstance(e.value, feedclient.StreamStopped)
        # what it held stayed intact
        np.testing.assert_array_equal(held["image"], src[held.indices])
    assert "detached after releasing nothing" in d.log_text()
