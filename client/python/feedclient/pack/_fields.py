"""feedclient.pack._fields: the `fields=` mapping of Writer, and turning one
sample's values into the bytes the C writer stores.

A field is ("dtype", shape) with numpy dtype names and None for the
variable (first) axis, or "str", "bytes" or "image" (a whole JPEG or PNG
file, kept as it is; feedd's `decode` op reads it). Every check names the
field and the sample's position, so a bad sample in a million is found.
Pure Python over numpy; no C calls.
"""

import numpy as np

from ..errors import InvalidArgument

# numpy dtype name -> FEED_DTYPE_* (proto/dtype.h)
DTYPES = {
    "uint8": 1, "int8": 2, "uint16": 3, "int16": 4, "uint32": 5, "int32": 6, "uint64": 7,
    "int64": 8, "float16": 9, "bfloat16": 10, "float32": 11, "float64": 12, "bool": 13,
}
STR, BYTES, IMAGE = "str", "bytes", "image"
DTYPE_STR = 14


class FieldSpec:
    """One parsed field: kind is "array", "str", "bytes" or "image"."""

    def __init__(self, name, spec):
        self.name = name
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"field name {name!r}: a non-empty str")
        if spec in (STR, BYTES, IMAGE):
            self.kind, self.dtype, self.shape, self.variable = spec, None, (), True
            self.code = DTYPE_STR if spec == STR else DTYPES["uint8"]
            self.np = np.dtype("u1")
            return
        if not (isinstance(spec, tuple) and len(spec) == 2):
            raise InvalidArgument(f"field '{name}': {spec!r} is not (dtype, shape), "
                                  "'str', 'bytes' or 'image'")
        dtype, shape = spec
        dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
        if dtype not in DTYPES:
            raise InvalidArgument(f"field '{name}': dtype {dtype!r} is not one of "
                                  f"{', '.join(DTYPES)}")
        shape = tuple(shape)
        if any(d is None for d in shape[1:]):
            raise InvalidArgument(f"field '{name}': only the first axis may be None")
        if any(d is not None and (not isinstance(d, (int, np.integer)) or d < 1)
               for d in shape):
            raise InvalidArgument(f"field '{name}': shape {shape} needs dimensions >= 1")
        self.kind, self.dtype, self.code = "array", dtype, DTYPES[dtype]
        self.variable = bool(shape) and shape[0] is None
        self.shape = tuple(int(d) for d in (shape[1:] if self.variable else shape))
        # bfloat16 has no numpy dtype of its own: its raw bits come as uint16
        self.np = np.dtype("<u2") if dtype == "bfloat16" else np.dtype(dtype).newbyteorder("<")
        if len(self.shape) > 8:
            raise InvalidArgument(f"field '{name}': rank {len(self.shape)} above 8")

    def describe(self):
        """The spec as a user writes it."""
        if self.kind != "array":
            return self.kind
        return (self.dtype, ((None,) if self.variable else ()) + self.shape)

    def bytes_of(self, value, pos):
        """The bytes of value for this field (a bytes-like object), or
        InvalidArgument naming the sample position and the field."""
        if self.kind == STR:
            if not isinstance(value, str):
                raise self._bad(pos, f"expected str, got {type(value).__name__}")
            return value.encode("utf-8")
        if self.kind in (BYTES, IMAGE):
            if isinstance(value, (bytes, bytearray, memoryview)):
                return value
            if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 1:
                return np.ascontiguousarray(value)
            if self.kind == IMAGE and isinstance(value, dict) and "bytes" in value:
                return value["bytes"]             # datasets' Image(decode=False)
            raise self._bad(pos, f"expected bytes, got {type(value).__name__}")
        return self._array(value, pos)

    def _array(self, value, pos):
        if type(value) is np.ndarray and value.dtype == self.np and value.flags.c_contiguous \
                and (value.shape == self.shape if not self.variable
                     else value.shape[1:] == self.shape and value.ndim == 1 + len(self.shape)):
            return value if value.ndim else value.reshape(1)   # the common case, fast
        if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
            value = value.detach().cpu().numpy()
        if isinstance(value, np.ndarray) or isinstance(value, np.generic):
            arr = np.asarray(value)
            want = np.dtype("u2") if self.dtype == "bfloat16" else np.dtype(self.dtype)
            if arr.dtype.newbyteorder("=") != want.newbyteorder("="):
                raise self._bad(pos, f"dtype {arr.dtype} where the field is {self.dtype}")
        else:
            arr = self._from_python(value, pos)
        if self.variable:
            ok = arr.ndim == 1 + len(self.shape) and arr.shape[1:] == self.shape
        else:
            ok = arr.shape == self.shape
        if not ok:
            want = ("(n, " + ", ".join(map(str, self.shape)) + ")") if self.variable \
                else str(self.shape)
            raise self._bad(pos, f"shape {arr.shape} where the field takes {want}")
        return np.ascontiguousarray(arr, dtype=self.np)

    def _from_python(self, value, pos):
        """Python numbers and lists: converted when every value survives."""
        try:
            raw = np.asarray(value)
        except (ValueError, TypeError) as e:
            raise self._bad(pos, f"not an array: {e}") from None
        if raw.dtype.kind not in "biuf" and raw.size:
            raise self._bad(pos, f"{type(value).__name__} of {raw.dtype} is not numbers")
        arr = raw.astype(self.np if self.dtype != "bfloat16" else np.float32)
        if self.dtype == "bfloat16" or not np.array_equal(arr, raw):
            raise self._bad(pos, f"values do not fit {self.dtype}")
        return arr

    def _bad(self, pos, what):
        return InvalidArgument(f"sample {pos}: field '{self.name}': {what}")


def parse_fields(fields):
    """The fields mapping as a list of FieldSpec, in the mapping's order."""
    if not isinstance(fields, dict) or not fields:
        raise InvalidArgument("fields: a non-empty dict of name -> (dtype, shape), 'str', "
                              "'bytes' or 'image'")
    return [FieldSpec(name, spec) for name, spec in fields.items()]


def sample_bytes(specs, sample, pos):
    """One sample (a dict) as a list of bytes-like values in field order."""
    if not isinstance(sample, dict):
        raise InvalidArgument(f"sample {pos}: a dict of field values, got "
                              f"{type(sample).__name__}")
    names = {s.name for s in specs}
    extra = [k for k in sample if k not in names]
    if extra:
        raise InvalidArgument(f"sample {pos}: field '{extra[0]}' is not in the dataset's "
                              f"fields ({', '.join(s.name for s in specs)})")
    out = []
    for s in specs:
        if s.name not in sample:
            raise InvalidArgument(f"sample {pos}: field '{s.name}' is missing")
        out.append(s.bytes_of(sample[s.name], pos))
    return out
