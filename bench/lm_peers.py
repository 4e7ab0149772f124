#!/usr/bin/python3
"""bench/lm_peers.py: one language-model contender of bench/run, one run,
one JSON line (bench/contenders.py's consumer and figures).

    python3 bench/lm_peers.py NAME --data DIR [--socket S] [--workers N]
        [--batch B] [--seq-len L] [--epochs E] [--max-s S] [--max-batches N]
        [--daemon-pid PID]
    python3 bench/lm_peers.py --prepare litdata|mosaic|megatron --data DIR
        [--seq-len L]

The corpus is DIR/lm.bin + DIR/lm.idx (bench/lm_corpus.py: byte-level
tokens of local text, one Megatron document per file, each ending with
EOD), and feedd's dataset `lm` is the same files through `feedpack
megatron`. Every contender yields batches of B rows of L tokens, as torch
int64 tensors: input_ids, and labels = the next tokens (a window of L+1
sliced in two, in the training loop's process, as Megatron's get_batch
does). The consumer reads those two fields of each batch once.

Contenders (NAME):
  feedd-concat     feedclient.Loader("lm", B, pipeline="concat(seq_len=L)",
                   as_torch=True): rows tile the shuffled documents
                   (windows of L+1 overlapping by one); each batch also
                   carries position_ids, document_ids and cu_seqlens
  feedd-pack       the same with pack(seq_len=L, pad_id=EOD): best-fit
                   decreasing, padded rows (tokens/s counts the padding)
  litdata-tokens   litdata.StreamingDataset(DIR/litdata-lm,
                   item_loader=TokensLoader(block_size=L+1), shuffle=True)
                   through StreamingDataLoader(num_workers=N): blocks of
                   L+1 tokens, not overlapping; --prepare litdata writes
                   the documents with litdata.optimize
  mosaic-concat    streaming.StreamingDataset(DIR/mosaic-lm, shuffle=True)
                   of MDS shards (one document a sample, ndarray:uint16),
                   concatenated into windows of L+1 overlapping by one in
                   an IterableDataset around it, as a user writes it
                   (Mosaic has no packing), DataLoader(num_workers=N)
  megatron-memmap  Megatron-LM's GPTDataset done again in small: .bin/.idx
                   memory-mapped, and the index it builds before training
                   (document order shuffled per epoch, sample index of
                   (document, offset) per window of L+1 overlapping by one,
                   sample shuffle) saved as .npy and memory-mapped, as
                   Megatron caches it; --prepare megatron builds it and
                   writes its time (index_build_ms); DataLoader(num_workers=N)
first_batch_ms: from constructing the dataset and loader (Megatron's index
already cached) to the first batch in hand. conversion_s: how long the
one-time conversion of the corpus into this contender's format took when
bench/run made it (feedpack megatron; litdata.optimize; MDSWriter), from
DIR/lm-conversions.json. epoch_samples: rows in one
pass over the corpus for this contender, so cpu_s_per_epoch is per pass.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import contenders  # noqa: E402
import lm_corpus  # noqa: E402

NAMES = ("feedd-concat", "feedd-pack", "litdata-tokens", "mosaic-concat", "megatron-memmap")
SEQ_LEN = 2048
BATCH = 16


def corpus_prefix(data):
    return os.path.join(data, "lm")


def corpus_meta(data):
    with open(corpus_prefix(data) + ".json") as f:
        return json.load(f)


def split_rows(t):
    """{input_ids, labels} of a [B, L+1] int64 tensor (Megatron's get_batch)."""
    return {"input_ids": t[:, :-1].contiguous(), "labels": t[:, 1:].contiguous()}


class Sliced:
    """A loader whose batches are [B, L+1] token windows, as the two fields."""

    def __init__(self, loader, key=None):
        self.loader, self.key = loader, key

    def __iter__(self):
        import torch
        for b in self.loader:
            t = b[self.key] if self.key else b
            yield split_rows(t.to(torch.int64))


# ---------------------------------------------------------------- feedd

def feedd(a, op):
    import feedclient
    pad = ", pad_id=%d" % lm_corpus.EOD if op == "pack" else ""
    spec = "%s(seq_len=%d%s)" % (op, a.seq_len, pad)

    class Two:
        """The Loader's batches, input_ids and labels (as every contender)."""

        def __init__(self):
            self.loader = feedclient.Loader("lm", a.batch, pipeline=spec, seed=1, shuffle=True,
                                            socket=a.socket, as_torch=True, credits=4)

        def __iter__(self):
            for b in self.loader:
                yield {"input_ids": b["input_ids"], "labels": b["labels"]}

        def __len__(self):
            return len(self.loader)

        def close(self):
            self.loader.close()

    probe = Two()
    n = len(probe) * a.batch
    probe.close()
    return Two, n


# ---------------------------------------------------------------- LitData

def litdata_dir(a):
    return os.path.join(a.data, "litdata-lm")


_OPEN = {}


def litdata_doc(i, prefix):
    """Document i as litdata.optimize stores it (module level: pickled): a
    numpy array (TokensLoader reads tensors through torch >= 2.1's
    dtype.itemsize, which Debian's torch 1.13 lacks), int16 to keep 2 bytes
    a token where the collate step needs a dtype torch 1.13 has (ids < 257)."""
    if _OPEN.get("prefix") != prefix:  # once per process (optimize calls this per document)
        _OPEN.update(prefix=prefix, idx=lm_corpus.read_idx(prefix + ".idx"),
                     data=np.memmap(prefix + ".bin", np.uint16, "r"))
    (sizes, pointers), data = _OPEN["idx"], _OPEN["data"]
    return np.asarray(data[pointers[i] // 2:pointers[i] // 2 + sizes[i]]).astype(np.int16)


def prepare_litdata(a):
    import functools
    litdata = contenders.import_litdata()
    from litdata.streaming.item_loader import TokensLoader
    prefix = corpus_prefix(a.data)
    n = len(lm_corpus.read_idx(prefix + ".idx")[0])
    litdata.optimize(fn=functools.partial(litdata_doc, prefix=prefix), inputs=list(range(n)),
                     output_dir=litdata_dir(a), chunk_size=(a.seq_len + 1) * 512,
                     item_loader=TokensLoader(), num_workers=1, mode="overwrite",
                     start_method="fork")


def litdata_loader(a):
    litdata = contenders.import_litdata()
    from litdata.streaming.item_loader import TokensLoader
    path = litdata_dir(a)
    if not os.path.isdir(path):
        raise SystemExit("lm_peers: %s missing (--prepare litdata)" % path)

    def mk():
        ds = litdata.StreamingDataset(path, item_loader=TokensLoader(block_size=a.seq_len + 1),
                                      shuffle=True, seed=1)
        return Sliced(litdata.StreamingDataLoader(ds, batch_size=a.batch, num_workers=a.workers,
                                                  persistent_workers=a.workers > 0))
    n = len(litdata.StreamingDataset(path, item_loader=TokensLoader(block_size=a.seq_len + 1)))
    return mk, n


# ---------------------------------------------------------------- Mosaic

def mosaic_dir(a):
    return os.path.join(a.data, "mosaic-lm")


def prepare_mosaic(a):
    from streaming import MDSWriter
    with MDSWriter(out=mosaic_dir(a), columns={"tokens": "ndarray:uint16"}) as w:
        for d in lm_corpus.docs(corpus_prefix(a.data)):
            w.write({"tokens": np.asarray(d)})


def mosaic_loader(a):
    import torch
    import torch.utils.data as tud
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    path = mosaic_dir(a)
    if not os.path.isdir(path):
        raise SystemExit("lm_peers: %s missing (--prepare mosaic)" % path)
    clean_stale_shared_memory()
    L = a.seq_len

    class Concat(tud.IterableDataset):
        """Documents in the StreamingDataset's order, concatenated and cut
        into windows of L+1 overlapping by one (in each worker)."""

        def __init__(self):
            self.docs = StreamingDataset(local=path, shuffle=True, shuffle_seed=1,
                                         batch_size=a.batch)

        def __iter__(self):
            buf = np.empty(0, np.int64)
            for s in self.docs:
                buf = np.concatenate([buf, s["tokens"].astype(np.int64)])
                while len(buf) > L:
                    yield torch.from_numpy(buf[:L + 1].copy())
                    buf = buf[L:]

    def mk():
        return Sliced(tud.DataLoader(Concat(), batch_size=a.batch, num_workers=a.workers,
                                     persistent_workers=a.workers > 0))
    return mk, (corpus_meta(a.data)["tokens"] - 1) // L


# ---------------------------------------------------------------- Megatron

def megatron_dir(a):
    return os.path.join(a.data, "megatron-index-%d" % a.seq_len)


def build_megatron_index(sizes, seq_len, seed, epochs=1):
    """Megatron's GPTDataset index (one epoch by default): doc_idx (document
    order, shuffled per epoch), sample_idx ([n+1, 2]: position in doc_idx
    and offset in that document where window i starts; window i runs to
    window i+1's start, one token more) and shuffle_idx (the order samples
    are read). Vectorized in numpy where Megatron's helpers loop in C++."""
    rng = np.random.RandomState(seed)
    n_docs = len(sizes)
    doc_idx = np.concatenate([rng.permutation(n_docs) for _ in range(epochs)]).astype(np.int32)
    lens = sizes[doc_idx].astype(np.int64)
    ends = np.cumsum(lens)
    n = int((ends[-1] - 1) // seq_len)
    starts = np.arange(n + 1, dtype=np.int64) * seq_len
    k = np.searchsorted(ends, starts, side="right")
    k = np.minimum(k, len(ends) - 1)
    sample_idx = np.stack([k, starts - (ends[k] - lens[k])], axis=1).astype(np.int64)
    shuffle_idx = rng.permutation(n).astype(np.int64)
    return doc_idx, sample_idx, shuffle_idx


def prepare_megatron(a):
    """Builds and caches the index; writes how long that took."""
    t0 = time.perf_counter()
    sizes, _ = lm_corpus.read_idx(corpus_prefix(a.data) + ".idx")
    idx = build_megatron_index(np.asarray(sizes), a.seq_len, seed=1)
    out = megatron_dir(a)
    os.makedirs(out, exist_ok=True)
    for name, arr in zip(("doc_idx", "sample_idx", "shuffle_idx"), idx):
        np.save(os.path.join(out, name + ".npy"), arr)
    ms = (time.perf_counter() - t0) * 1e3
    with open(os.path.join(out, "build.json"), "w") as f:
        json.dump({"index_build_ms": ms, "samples": len(idx[2]), "documents": len(sizes)}, f)
    return ms


class GPTDataset:
    """Megatron's GPTDataset over the cached index: sample i is the window
    of L+1 tokens at sample_idx[shuffle_idx[i]], across documents."""

    def __init__(self, prefix, index_dir):
        self.sizes, self.pointers = lm_corpus.read_idx(prefix + ".idx")
        self.bin = np.memmap(prefix + ".bin", np.uint16, "r")
        load = lambda n: np.load(os.path.join(index_dir, n + ".npy"), mmap_mode="r")  # noqa
        self.doc_idx, self.sample_idx = load("doc_idx"), load("sample_idx")
        self.shuffle_idx = load("shuffle_idx")

    def __len__(self):
        return len(self.shuffle_idx)

    def doc(self, k, start, stop=None):
        d = self.doc_idx[k]
        p = self.pointers[d] // 2
        end = p + (self.sizes[d] if stop is None else stop)
        return self.bin[p + start:end]

    def __getitem__(self, i):
        j = self.shuffle_idx[i]
        (k0, o0), (k1, o1) = self.sample_idx[j], self.sample_idx[j + 1]
        if k0 == k1:
            parts = [self.doc(k0, o0, o1 + 1)]
        else:
            parts = [self.doc(k0, o0)] + [self.doc(k, 0) for k in range(k0 + 1, k1)] + \
                [self.doc(k1, 0, o1 + 1)]
        return np.concatenate(parts).astype(np.int64)


def megatron_loader(a):
    import torch.utils.data as tud
    index = megatron_dir(a)
    if not os.path.exists(os.path.join(index, "build.json")):
        raise SystemExit("lm_peers: %s missing (--prepare megatron)" % index)

    def mk():
        ds = GPTDataset(corpus_prefix(a.data), index)
        # the order is the index's shuffle_idx: the sampler is sequential
        return Sliced(tud.DataLoader(ds, batch_size=a.batch, shuffle=False,
                                     num_workers=a.workers, persistent_workers=a.workers > 0))
    with open(os.path.join(index, "build.json")) as f:
        build = json.load(f)
    a.extra["index_build_ms"] = build["index_build_ms"]
    return mk, build["samples"]


# ---------------------------------------------------------------- main

def make(a):
    if a.name == "feedd-concat":
        return feedd(a, "concat")
    if a.name == "feedd-pack":
        return feedd(a, "pack")
    if a.name == "litdata-tokens":
        return litdata_loader(a)
    if a.name == "mosaic-concat":
        return mosaic_loader(a)
    if a.name == "megatron-memmap":
        return megatron_loader(a)
    raise SystemExit("lm_peers: unknown contender '%s' (one of %s)" % (a.name, ", ".join(NAMES)))


# The one-time conversion each contender's format needs from the corpus's
# .bin/.idx (Megatron reads those as they are; its index is timed apart).
CONVERSION = {"feedd-concat": "feedpack", "feedd-pack": "feedpack",
              "litdata-tokens": "litdata", "mosaic-concat": "mosaic"}


def conversions_path(data):
    return corpus_prefix(data) + "-conversions.json"


def record_conversion(data, fmt, seconds):
    """Keeps how long converting the corpus to fmt took (DIR/lm-conversions.json)."""
    path = conversions_path(data)
    rec = {}
    if os.path.exists(path):
        with open(path) as f:
            rec = json.load(f)
    rec[fmt] = seconds
    with open(path, "w") as f:
        json.dump(rec, f)


def conversion_s(data, name):
    """The recorded conversion time of contender name's format, or None."""
    try:
        with open(conversions_path(data)) as f:
            return json.load(f).get(CONVERSION.get(name))
    except (OSError, ValueError):
        return None


def prepare(a):
    fn = {"litdata": prepare_litdata, "mosaic": prepare_mosaic,
          "megatron": prepare_megatron}[a.prepare]
    t0 = time.perf_counter()
    fn(a)
    took = time.perf_counter() - t0
    if a.prepare != "megatron":
        record_conversion(a.data, a.prepare, took)
    print(json.dumps({"prepare": a.prepare, "prepare_s": took}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", nargs="?")
    p.add_argument("--data", required=True)
    p.add_argument("--socket")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=BATCH)
    p.add_argument("--seq-len", type=int, default=SEQ_LEN)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-s", type=float, default=1e9)
    p.add_argument("--max-batches", type=int)
    p.add_argument("--daemon-pid", type=int)
    p.add_argument("--prepare", choices=["litdata", "mosaic", "megatron"])
    a = p.parse_args()
    a.extra = {}
    try:
        import torch
        torch.set_num_threads(1)
        if a.prepare:
            prepare(a)
            return 0
        if not a.name:
            p.error("a contender NAME is required")
        mk, n = make(a)
        r = contenders.consume(mk, a.epochs, a.max_s, daemon_pid=a.daemon_pid,
                               max_batches=a.max_batches)
    except ImportError as e:
        print("not installed: %s" % e, file=sys.stderr)
        return 4
    a.extra["conversion_s"] = conversion_s(a.data, a.name)
    r.update(a.extra, name=a.name, workload="lm", workers=a.workers, batch=a.batch,
             seq_len=a.seq_len, epoch_samples=n, tokens_per_s=r["samples_per_s"] * a.seq_len)
    r["epochs_timed"] = r["samples"] / n
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
