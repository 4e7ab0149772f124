#!/usr/bin/python3
"""Train a small GPT on packed token documents with batches from feedd.

Everything is made here from local text: Debian's python3-doc reST sources
(/usr/share/doc/python3.11/html/_sources) and the man pages of section 1,
each file one document. A byte-level BPE tokenizer (written below, no
package needed) is trained on a sample of both, the corpora are tokenized
into flat files with an end-of-document token after each document, packed
by feedpack into two token-document datasets (rst, man), served by a
private feedd, and read as one packed mixture of concat(seq_len=L) rows,
70% from rst and 30% from man (each row from one corpus, its `source`):

    python3 examples/train_gpt.py --bin build/bin --workdir /tmp/gpt

Each row holds several documents; the model keeps them apart with the
row's document_ids (attention only within a document, causal) and
position_ids (restarting at each document), the same boundaries
cu_seqlens gives flash_attn_varlen_func on a GPU. Prints the loss every
--log steps and exits non-zero if it did not fall.
"""
import argparse
import glob
import gzip
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "client", "python"))

RST = "/usr/share/doc/python3.11/html/_sources"
MAN = "/usr/share/man/man1"


# ---- the corpora ----------------------------------------------------------

def rst_docs(limit):
    """reST sources, one document per file, up to `limit` bytes in all."""
    out, size = [], 0
    for path in sorted(glob.glob(os.path.join(RST, "**", "*.txt"), recursive=True)):
        with open(path, "rb") as f:
            text = f.read()
        out.append(text)
        size += len(text)
        if size >= limit:
            break
    return out


def man_docs(limit):
    """Man pages of section 1 with the roff requests taken out."""
    out, size = [], 0
    for path in sorted(glob.glob(os.path.join(MAN, "*.gz"))):
        try:
            with gzip.open(path, "rb") as f:
                raw = f.read()
        except OSError:
            continue
        lines = [l for l in raw.split(b"\n") if not l.startswith((b".", b"'\\\""))]
        text = re.sub(rb"\\f[BIRP]|\\-|\\\(..|\\&", b"", b"\n".join(lines))
        if text.strip():
            out.append(text)
            size += len(text)
        if size >= limit:
            break
    return out


# ---- a byte-level BPE, small and plain --------------------------------------

def merge(ids, a, b, new):
    """ids with every non-overlapping (a, b) pair, left to right, made new."""
    hit = (ids[:-1] == a) & (ids[1:] == b)
    if a == b:  # "aaa": the first pair wins, the second may not overlap it
        idx = np.flatnonzero(hit)
        keep, last = [], -2
        for i in idx:
            if i != last + 1:
                keep.append(i)
                last = i
        idx = np.array(keep, dtype=np.int64)
    else:
        idx = np.flatnonzero(hit)
    if len(idx) == 0:
        return ids
    out = ids.copy()
    out[idx] = new
    drop = np.zeros(len(ids), bool)
    drop[idx + 1] = True
    return out[~drop]


def train_bpe(sample, vocab, eos):
    """Merges learnt on sample (int array of bytes, documents separated by
    eos, which never merges), until the vocabulary holds `vocab` ids."""
    merges = []
    ids = sample.astype(np.int64)
    for new in range(256, vocab - 1):
        a, b = ids[:-1], ids[1:]
        ok = (a != eos) & (b != eos)
        codes = a[ok] * vocab + b[ok]
        if len(codes) == 0:
            break
        counts = np.bincount(codes)
        best = int(counts.argmax())
        if counts[best] < 2:
            break
        pa, pb = divmod(best, vocab)
        merges.append((pa, pb, new))
        ids = merge(ids, pa, pb, new)
    return merges


def encode(docs, merges, eos):
    """One flat uint16 array: each document's ids, then eos."""
    parts = []
    for d in docs:
        parts.append(np.frombuffer(d, np.uint8).astype(np.int64))
        parts.append(np.array([eos], np.int64))
    ids = np.concatenate(parts)
    for a, b, new in merges:
        ids = merge(ids, a, b, new)
    return ids.astype("<u2")


# ---- the model ------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(n, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(~mask[:, None], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(n, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, seq_len, d=128, heads=4, layers=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, ids, pos, docs):
        t = ids.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        # FlexAttention's document mask: same document, and causal
        mask = (docs[:, :, None] == docs[:, None, :]) & causal
        x = self.tok(ids) + self.pos(pos)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


# ---- feedd ----------------------------------------------------------------

def prepare(args):
    """Tokenizer, token files, the packed datasets; returns ({name: dir}, eos)."""
    os.makedirs(args.workdir, exist_ok=True)
    out = {name: os.path.join(args.workdir, name) for name in ("rst", "man")}
    eos = args.vocab - 1
    if all(os.path.exists(d) for d in out.values()):
        return out, eos
    rst, man = rst_docs(args.corpus_bytes), man_docs(args.corpus_bytes // 2)
    sample = b"".join(d[:4000] + b"\0" for d in (rst[::4] + man[::4]))[:args.sample_bytes]
    s = np.frombuffer(sample, np.uint8).astype(np.int64)
    s[s == 0] = eos
    t0 = time.monotonic()
    merges = train_bpe(s, args.vocab, eos)
    print(f"BPE: {len(merges)} merges on {len(sample)} bytes in {time.monotonic() - t0:.1f} s")
    for name, docs in (("rst", rst), ("man", man)):
        ids = encode(docs, merges, eos)
        path = os.path.join(args.workdir, f"{name}.bin")
        ids.tofile(path)
        print(f"{name}: {len(docs)} documents, {len(ids)} tokens")
        subprocess.run([os.path.join(args.bin, "feedpack"), "tokens", path, "--dtype", "uint16",
                        "--doc-sep", str(eos), "--vocab-size", str(args.vocab), "-o",
                        out[name]], check=True)
    return out, eos


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--workdir", default="/tmp/feedd-gpt")
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--log", type=int, default=50)
    ap.add_argument("--corpus-bytes", type=int, default=3 << 20)
    ap.add_argument("--sample-bytes", type=int, default=400_000)
    args = ap.parse_args()
    torch.manual_seed(0)

    import feedclient
    data, _ = prepare(args)
    sock = os.path.join(args.workdir, "feedd.sock")
    feedd = subprocess.Popen([os.path.join(args.bin, "feedd"), "--socket", sock,
                              *[a for n, d in data.items() for a in ("--dataset", f"{n}={d}")]])
    try:
        for _ in range(500):   # until it answers (at most 10 s)
            if os.path.exists(sock):
                break
            time.sleep(0.02)
        # a packed mixture: each row from one corpus, each corpus its own passes
        loader = feedclient.Loader({"rst": 0.7, "man": 0.3}, args.batch, socket=sock,
                                   as_torch=True, pipeline=f"concat(seq_len={args.seq_len})",
                                   seed=1)
        model = GPT(args.vocab, args.seq_len)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses, step = [], 0
        while step < args.steps:
            for batch in loader:
                logits = model(batch["input_ids"], batch["position_ids"],
                               batch["document_ids"])
                loss = F.cross_entropy(logits.view(-1, args.vocab), batch["labels"].view(-1),
                                       ignore_index=-100)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                step += 1
                if step % args.log == 0:
                    print(f"step {step}: loss {np.mean(losses[-args.log:]):.3f} "
                          f"({len(batch['cu_seqlens']) - 1} segments in the batch)")
                if step == args.steps:
                    break
        loader.close()
    finally:
        feedd.terminate()
        feedd.wait()
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    print(f"loss {first:.3f} -> {last:.3f}")
    sys.exit(0 if last < first - 0.5 else 1)


if __name__ == "__main__":
    main()
