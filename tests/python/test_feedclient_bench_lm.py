"""bench/run's language-model rows: feedd reads the same corpus as the
Megatron-style row (the corpus's .bin/.idx through feedpack megatron).
Named test_feedclient_* as it loads libfeedclient (sanitizer builds run
those with their runtime preloaded)."""
import os
import sys

import numpy as np

import feedclient
from conftest import pack

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import lm_corpus  # noqa: E402

L = 64


def random_docs(seed, n=40):
    return lm_corpus.random_docs(seed, n, 3 * L)


def test_bench_lm_feedd_reads_the_megatron_corpus(tmp_path, feedpack, feedd_factory):
    """feedd's rows come from the same files: feedpack megatron of the
    corpus, read unshuffled with concat(seq_len=L), tile its token stream."""
    docs = random_docs(3)
    prefix = str(tmp_path / "lm")
    lm_corpus.write(prefix, docs)
    pack(feedpack, "megatron", prefix, "-o", tmp_path / "lm.feed", "--name", "lm")
    daemon = feedd_factory(tmp_path, "--dataset", f"lm={tmp_path / 'lm.feed'}")
    stream = np.concatenate(docs).astype(np.int64)
    with feedclient.Loader("lm", 4, socket=daemon.sock, shuffle=False, as_torch=True,
                           pipeline=f"concat(seq_len={L})") as loader:
        b = next(iter(loader))
        ids, lab = b["input_ids"].numpy(), b["labels"].numpy()
    for r in range(4):
        np.testing.assert_array_equal(ids[r], stream[r * L:r * L + L])
        np.testing.assert_array_equal(lab[r], stream[r * L + 1:r * L + L + 1])
