"""python3 -m feedclient.pack text: JSONL (plain, .gz, .zst) and Parquet
documents into a token-document dataset (tokens: u16 when the vocabulary
fits, u32 past it; --eos appended; sample i is document i whatever the
process count) or a str field; bad input named by file and line or row.

tokenizers and pyarrow come from PyPI only: these tests run the command in
the virtual environment tests/python/venv.sh makes (build/venv-ingest) and
skip, saying why, when it cannot be made.
"""

import gzip
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from conftest import BIN, LIB, PYPKG, SRC

sys.path.insert(0, str(SRC / "bench"))
import feedformat as ff  # noqa: E402

DOCS = [f"the cat sat on mat number {i} " + "and the dog ran " * (i % 4) for i in range(60)]


@pytest.fixture(scope="session")
def venv_py():
    venv = BIN.parent / "venv-ingest"
    r = subprocess.run([str(SRC / "tests" / "python" / "venv.sh"), str(venv)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"no tokenizers/pyarrow environment (tests/python/venv.sh): "
                    f"{r.stderr.strip()[-300:]}")
    return str(venv / "bin" / "python")


def env():
    e = dict(os.environ, PYTHONPATH=str(PYPKG), FEEDCLIENT_LIB=str(LIB / "libfeedclient.so"))
    return e


def py(venv_py, code, *args):
    r = subprocess.run([venv_py, "-c", code, *map(str, args)], capture_output=True, text=True,
                       env=env(), timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def pack_text(venv_py, *args, ok=True):
    r = subprocess.run([venv_py, "-m", "feedclient.pack", "text", *map(str, args)],
                       capture_output=True, text=True, env=env(), timeout=300)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


MAKE_TOKENIZER = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
n = int(sys.argv[2])
if n:
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(n)}, unk_token="w0"))
else:
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([open(sys.argv[3]).read()],
                            trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>"]))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.save(sys.argv[1])
"""

ENCODE = """
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
docs = json.load(open(sys.argv[2]))
print(json.dumps([tok.encode(d, add_special_tokens=False).ids for d in docs]))
print(tok.token_to_id("<eos>"))
"""


@pytest.fixture(scope="session")
def tokenizer(venv_py, tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    (d / "corpus.txt").write_text("\n".join(DOCS))
    (d / "docs.json").write_text(json.dumps(DOCS))
    py(venv_py, MAKE_TOKENIZER, d / "tokenizer.json", 0, d / "corpus.txt")
    out = py(venv_py, ENCODE, d / "tokenizer.json", d / "docs.json").split("\n")
    return d / "tokenizer.json", json.loads(out[0]), int(out[1])


def write_jsonl(path, docs, opener=open):
    with opener(path, "wt") as fh:
        for i, t in enumerate(docs):
            fh.write(json.dumps({"id": i, "text": t}) + "\n")


def test_feedclient_pack_text_jsonl_tokens_in_order(venv_py, tokenizer, tmp_path):
    tok, want, eos = tokenizer
    write_jsonl(tmp_path / "a.jsonl", DOCS[:25])
    write_jsonl(tmp_path / "b.jsonl.gz", DOCS[25:40], gzip.open)
    import zstandard
    with open(tmp_path / "c.jsonl.zst", "wb") as raw:
        with zstandard.ZstdCompressor().stream_writer(raw) as zw:
            zw.write("".join(json.dumps({"text": t}) + "\n\n" for t in DOCS[40:]).encode())
    versions = set()
    for workers in (1, 3):
        out = tmp_path / f"ds{workers}"
        r = pack_text(venv_py, tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz",
                      tmp_path / "c.jsonl.zst", "--format", "jsonl", "--field", "text",
                      "--tokenizer", tok, "--eos", "<eos>", "-o", out, "--workers", workers)
        ntok = sum(len(w) + 1 for w in want)
        assert f"packed 60 documents, {ntok} tokens (uint16) into {out}" in r.stdout
        assert "tokens/s" in r.stdout
        ds = ff.Dataset(out)
        versions.add(ds.version)
    assert len(versions) == 1
    assert [f.name for f in ds.schema] == ["tokens"] and ds.schema[0].variable
    assert ds.schema[0].dtype == np.dtype("<u2")
    for i, ids in enumerate(want):
        assert ds[i]["tokens"].tolist() == ids + [eos], i


def test_feedclient_pack_text_parquet_and_strings(venv_py, tokenizer, tmp_path):
    tok, want, _ = tokenizer
    py(venv_py, "import sys, json, pyarrow as pa, pyarrow.parquet as pq\n"
       "docs = json.load(open(sys.argv[1]))\n"
       "pq.write_table(pa.table({'n': list(range(len(docs))), 'body': docs}), sys.argv[2],"
       " row_group_size=7)", tokenizer[0].parent / "docs.json", tmp_path / "d.parquet")
    pack_text(venv_py, tmp_path / "d.parquet", "--format", "parquet", "--field", "body",
              "--tokenizer", tok, "-o", tmp_path / "tok", "--workers", 2)
    ds = ff.Dataset(tmp_path / "tok")
    assert [ds[i]["tokens"].tolist() for i in range(len(ds))] == want
    r = pack_text(venv_py, tmp_path / "d.parquet", "--format", "parquet", "--field", "body",
                  "-o", tmp_path / "str")
    ds = ff.Dataset(tmp_path / "str")
    assert [f.name for f in ds.schema] == ["body"] and ds.schema[0].dtype == "str"
    assert [ds[i]["body"] for i in range(len(ds))] == DOCS
    r = pack_text(venv_py, tmp_path / "d.parquet", "--format", "parquet", "--field", "text",
                  "-o", tmp_path / "x", ok=False)
    assert r.returncode == 1
    assert f"{tmp_path / 'd.parquet'}: no column 'text' (columns: n, body)" in r.stderr
    assert not (tmp_path / "x").exists()


def test_feedclient_pack_text_u32_past_65536(venv_py, tmp_path):
    py(venv_py, MAKE_TOKENIZER, tmp_path / "big.json", 70000, "")
    write_jsonl(tmp_path / "a.jsonl", ["w1 w69999 w65536", "w2"])
    pack_text(venv_py, tmp_path / "a.jsonl", "--format", "jsonl", "--field", "text",
              "--tokenizer", tmp_path / "big.json", "-o", tmp_path / "ds", "--workers", 1)
    ds = ff.Dataset(tmp_path / "ds")
    assert ds.schema[0].dtype == np.dtype("<u4")
    assert ds[0]["tokens"].tolist() == [1, 69999, 65536] and ds[1]["tokens"].tolist() == [2]


@pytest.mark.parametrize("lines,words", [
    (['{"text": "a"}', '{"text": "b"}', '{"text": oops}'], "bad.jsonl:3: not JSON"),
    (['{"text": "a"}', '{"body": "b"}'], "bad.jsonl:2: no field 'text'"),
    (['{"text": 5}'], "bad.jsonl:1: field 'text' is int, not a string"),
], ids=["json", "field", "type"])
def test_feedclient_pack_text_bad_jsonl_names_line(venv_py, tmp_path, lines, words):
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    r = pack_text(venv_py, tmp_path / "bad.jsonl", "--format", "jsonl", "--field", "text",
                  "-o", tmp_path / "ds", ok=False)
    assert r.returncode == 1 and words in r.stderr, r.stderr
    assert not (tmp_path / "ds").exists()


def test_feedclient_pack_text_token_above_vocabulary():
    from feedclient.pack import text
    with pytest.raises(text.InputError, match=r"f.jsonl:7: token id 300 is above the "
                                              r"vocabulary \(256 tokens\)"):
        text._check_vocab(np.array([1, 2, 3, 300]), np.array([2, 0, 2]),
                          ["f.jsonl:1", "f.jsonl:4", "f.jsonl:7"], 256)
