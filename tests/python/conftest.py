"""Shared pytest fixtures for tests/python.

ctest runs these with FEED_BIN (the build's bin directory) and FEED_SRC (the
source tree) in the environment; run by hand, they fall back to
<source>/build/bin.
"""

import os
import pathlib

import pytest

SRC = pathlib.Path(os.environ.get("FEED_SRC", pathlib.Path(__file__).resolve().parents[2]))
BIN = pathlib.Path(os.environ.get("FEED_BIN", SRC / "build" / "bin"))


@pytest.fixture(scope="session")
def feed_bin():
    """The build's bin directory."""
    return BIN


@pytest.fixture(scope="session")
def feedpack(feed_bin):
    """Path (str) of the feedpack binary."""
    path = feed_bin / "feedpack"
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path}: not built (set FEED_BIN to the build's bin directory)")
    return str(path)
