"""feedclient.pack: write feedd datasets from Python.

    from feedclient import pack
    with pack.Writer("mnist", fields={"image": ("uint8", (28, 28, 1)),
                                      "label": ("int64", ())}) as w:
        for x, y in samples:
            w.write({"image": x, "label": y})

Writer writes sample by sample (or write_batch, a batch of columns);
from_iterable writes an iterable of samples on several threads, with the
same result whatever their number; from_hf writes a Hugging Face dataset.
Every byte is laid out by the C writer feedpack uses (libfeedpack, through
ctypes). `python3 -m feedclient.pack text` packs JSONL or Parquet text,
tokenized or not (text.py).
"""

from ._parallel import from_hf, from_iterable
from ._writer import Writer

__all__ = ["Writer", "from_iterable", "from_hf"]
