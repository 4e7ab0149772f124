"""README.md's "Getting your data in": every example runs as written.

Each ### section's code blocks run in order in a directory of their own,
python blocks with this Python and sh blocks under bash -e with the
build's programs first on PATH, after the files the section names are made
(tars, JSONL, Parquet, a tokenizer); then the test checks what they wrote.
A Hugging Face `datasets` stand-in is used where the library is absent;
the text section needs the tokenizers/pyarrow environment (venv.sh) and
skips without it.
"""

import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pytest

from conftest import BIN, LIB, PYPKG, SRC

sys.path.insert(0, str(SRC / "bench"))
import feedformat as ff  # noqa: E402

DOC = SRC / "README.md"


def doc_text():
    """The README's section "Getting your data in", up to the next ## heading."""
    text = DOC.read_text()
    start = text.index("\n## Getting your data in\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def sections():
    """{heading: [(lang, code), ...]} of the document."""
    out, cur = {}, None
    for part in re.split(r"^### ", doc_text(), flags=re.M)[1:]:
        cur = part.split("\n", 1)[0].strip()
        out[cur] = re.findall(r"^```(python|sh)\n(.*?)^```", part, flags=re.M | re.S)
    return out


def section(prefix):
    got = [v for k, v in sections().items() if k.startswith(prefix)]
    assert len(got) == 1 and got[0], f"no section '{prefix}' with examples in {DOC}"
    return got[0]


def run_blocks(blocks, cwd, extra_env=None, path_first=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cwd), str(PYPKG)]),
               FEEDCLIENT_LIB=str(LIB / "libfeedclient.so"),
               PATH=os.pathsep.join([*map(str, path_first), str(BIN), os.environ["PATH"]]))
    env.update(extra_env or {})
    for lang, code in blocks:
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-e", "-c", code]
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{lang} example failed:\n{code}\n{r.stdout}\n{r.stderr}"


def test_feedclient_pack_docs_writer(tmp_path):
    run_blocks(section("Arrays from Python"), tmp_path)
    ds = ff.Dataset(tmp_path / "digits")
    assert len(ds) == 1000 and ds[13]["caption"] == "digit 3"
    assert ds[5]["boxes"].shape == (2, 4)


def test_feedclient_pack_docs_from_iterable(tmp_path):
    run_blocks(section("Any iterable"), tmp_path)
    ds = ff.Dataset(tmp_path / "docs")
    assert len(ds) == 20000 and ds[299]["tokens"].tolist() == list(range(300))


FAKE_DATASETS = '''
"""A stand-in for Hugging Face datasets (what from_hf uses of it)."""
class Value:
    def __init__(self, dtype):
        self.dtype = dtype
class Dataset:
    def __init__(self, cols):
        self.cols, self.column_names = cols, list(cols)
        self.features = {c: Value("string" if isinstance(v[0], str) else "int64")
                         for c, v in cols.items()}
    @classmethod
    def from_dict(cls, cols):
        return cls(cols)
    def __len__(self):
        return len(next(iter(self.cols.values())))
    def __getitem__(self, sl):
        return {c: v[sl] for c, v in self.cols.items()}
'''


def test_feedclient_pack_docs_from_hf(tmp_path):
    try:
        import datasets  # noqa: F401
    except ImportError:
        (tmp_path / "datasets.py").write_text(FAKE_DATASETS)
    run_blocks(section("A Hugging Face dataset"), tmp_path)
    ds = ff.Dataset(tmp_path / "reviews")
    assert [ds[i]["text"] for i in range(3)] == ["a fine film", "dull", "superb"]
    assert [int(ds[i]["label"]) for i in range(3)] == [1, 0, 1]


def make_tar(path, first, n, mode):
    from PIL import Image
    with tarfile.open(path, mode) as t:
        for i in range(first, first + n):
            buf = io.BytesIO()
            Image.fromarray(np.full((48 + i, 80, 3), 5 * i, np.uint8)).save(buf, "JPEG")
            for ext, data in ((".jpg", buf.getvalue()), (".txt", f"picture {i}".encode()),
                              (".cls", str(i % 3).encode())):
                ti = tarfile.TarInfo(f"{i:06d}{ext}")
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))


def test_feedclient_pack_docs_wds(tmp_path, feedd_factory):
    pytest.importorskip("PIL.Image")
    (tmp_path / "shards").mkdir()
    make_tar(tmp_path / "shards" / "000000.tar", 0, 6, "w")
    make_tar(tmp_path / "shards" / "000001.tar.gz", 6, 6, "w:gz")
    blocks = section("WebDataset tar shards")
    run_blocks([b for b in blocks if b[0] == "sh"], tmp_path)
    ds = ff.Dataset(tmp_path / "pairs")
    assert [ds[i]["txt"] for i in range(len(ds))] == [f"picture {i}" for i in range(12)]
    d = feedd_factory(tmp_path, "--dataset", f"pairs={tmp_path / 'pairs'}")
    run_blocks([b for b in blocks if b[0] == "python"], tmp_path, {"FEEDD_SOCKET": d.sock})
    d.stop()


MAKE_TEXT = textwrap.dedent('''
    import gzip, json, sys
    import pyarrow as pa, pyarrow.parquet as pq, zstandard
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    docs = [f"line {i} of the corpus" for i in range(40)]
    with gzip.open("corpus.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": d}) + "\\n" for d in docs[:30])
    with open("more.jsonl.zst", "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(
            "".join(json.dumps({"text": d}) + "\\n" for d in docs[30:]).encode()))
    pq.write_table(pa.table({"text": docs[:25]}), "part-0.parquet", row_group_size=10)
    pq.write_table(pa.table({"text": docs[25:]}), "part-1.parquet")
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(docs, trainers.WordLevelTrainer(special_tokens=["<unk>", "</s>"]))
    tok.save("tokenizer.json")
''')


def test_feedclient_pack_docs_text(tmp_path):
    venv = BIN.parent / "venv-ingest"
    r = subprocess.run([str(SRC / "tests" / "python" / "venv.sh"), str(venv)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"no tokenizers/pyarrow environment (tests/python/venv.sh): "
                    f"{r.stderr.strip()[-300:]}")
    subprocess.run([str(venv / "bin" / "python"), "-c", MAKE_TEXT], cwd=tmp_path, check=True)
    run_blocks(section("Text in JSONL or Parquet"), tmp_path, path_first=[venv / "bin"])
    tokens = ff.Dataset(tmp_path / "corpus")
    assert len(tokens) == 40 and tokens.schema[0].name == "tokens"
    assert tokens[0]["tokens"].tolist()[-1] == 1            # </s> appended
    strings = ff.Dataset(tmp_path / "corpus-strings")
    assert [strings[i]["text"] for i in range(40)] == [f"line {i} of the corpus"
                                                        for i in range(40)]
