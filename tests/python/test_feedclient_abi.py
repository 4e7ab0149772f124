"""The ctypes mirror of libfeedclient's public structs (feedclient/_lib.py)
has the C compiler's layout: every struct's size and every field's offset,
as `cc` sees the installed headers. A field added to a C struct and not to
its mirror (or the other way) makes C read or write past what Python
allocated; this catches it before a trainer does."""

import ctypes
import os
import shutil
import subprocess

import pytest

from conftest import SRC

import feedclient._lib as L

# ctypes class -> (C struct name, header)
MIRRORS = {
    L.Field: ("feed_field", "feed/client.h"),
    L.Dataset: ("feed_dataset", "feed/client.h"),
    L.DatasetList: ("feed_dataset_list", "feed/client.h"),
    L.Op: ("feed_op", "feed/client.h"),
    L.OpList: ("feed_op_list", "feed/client.h"),
    L.StreamDevice: ("feed_stream_device", "feed/stream.h"),
    L.StreamOpts: ("feed_stream_opts", "feed/stream.h"),
    L.MixtureSource: ("feed_mixture_source", "feed/stream.h"),
    L.StreamInfo: ("feed_stream_info", "feed/stream.h"),
    L.View: ("feed_view", "feed/client.h"),
    L.GpuDevice: ("feed_gpu_device", "feed/gpu.h"),
    L.GpuInfo: ("feed_gpu_info", "feed/gpu.h"),
    L.ToDevice: ("feed_to_device", "feed/gpu.h"),
    L.MixSpec: ("feed_mix_spec", "feed/gpu.h"),
    L.Mix: ("feed_mix", "feed/gpu.h"),
    L.Stats: ("feed_stats", "feed/client.h"),
    L.StreamStatus: ("feed_stream_status", "feed/client.h"),
    L.CacheStatus: ("feed_cache_status", "feed/client.h"),
    L.GpuStatus: ("feed_gpu_status", "feed/client.h"),
    L.Status: ("feed_status", "feed/client.h"),
}


def test_every_ctypes_struct_matches_c(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.fail("no C compiler (cc) to ask for the structs' layout")
    # every public struct of _lib.py is mirrored here: a new one must be added
    mirrored = {c for c in vars(L).values()
                if isinstance(c, type) and issubclass(c, ctypes.Structure)}
    assert mirrored == set(MIRRORS), f"unchecked: {mirrored - set(MIRRORS)}"
    lines = ["#include <stddef.h>", "#include <stdio.h>",
             "#include \"feed/client.h\"", "#include \"feed/stream.h\"",
             "#include \"feed/gpu.h\"", "int main(void) {"]
    for cls, (name, _) in MIRRORS.items():
        lines.append(f'printf("{name} size %zu\\n", sizeof(struct {name}));')
        for field, *_ in cls._fields_:
            lines.append(f'printf("{name} {field} %zu\\n", offsetof(struct {name}, {field}));')
    lines += ["return 0; }"]
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "abi"
    subprocess.run([cc, "-std=c11", "-I", str(SRC / "client" / "include"), "-o", str(exe),
                    str(src)], check=True)
    c_says = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        name, what, v = line.split()
        c_says[(name, what)] = int(v)
    wrong = []
    for cls, (name, _) in MIRRORS.items():
        if ctypes.sizeof(cls) != c_says[(name, "size")]:
            wrong.append(f"{name}: size {ctypes.sizeof(cls)} in Python, "
                         f"{c_says[(name, 'size')]} in C")
        for field, *_ in cls._fields_:
            off = getattr(cls, field).offset
            if off != c_says[(name, field)]:
                wrong.append(f"{name}.{field}: offset {off} in Python, "
                             f"{c_says[(name, field)]} in C")
    assert not wrong, "\n".join(wrong)
