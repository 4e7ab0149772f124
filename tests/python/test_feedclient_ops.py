"""feedclient.ops() (issue 31 item 9): the pipeline ops the daemon accepts,
each with one line of description, from the daemon's own op table (the
ListOps request), so they are exactly what `feedd --list-ops` prints, in
its order."""

import subprocess

import pytest

import feedclient


def test_ops_match_feedd_list_ops(fc, feed_bin):
    res = subprocess.run([str(feed_bin / "feedd"), "--list-ops"], capture_output=True,
                         text=True, check=True)
    lines = res.stdout.splitlines()
    got = feedclient.ops(socket=fc.sock)
    assert [o.usage for o in got] == lines
    assert [o.name for o in got] == [line.split("(")[0] for line in lines]
    for o in got:
        assert isinstance(o, feedclient.Op)
        assert o.description and "\n" not in o.description, o.name
        assert o.description.isprintable() and len(o.description) < 160, o.name
    assert len({o.description for o in got}) == len(got)  # no line shared by two ops
    by = {o.name: o for o in got}
    assert "flips left-right" in by["hflip"].description
    assert "RandomResizedCrop" in by["random_resized_crop"].description


def test_ops_without_a_daemon_names_the_socket(tmp_path):
    sock = str(tmp_path / "none.sock")
    with pytest.raises(feedclient.DaemonNotRunning, match="none.sock"):
        feedclient.ops(socket=sock)
