#!/usr/bin/python3
"""make_image_seeds.py DIR: writes small JPEG and PNG files of every variant
the decoder takes (JPEG baseline 4:2:0 / 4:2:2 / 4:4:4, progressive,
grayscale, CMYK; PNG 8- and 16-bit RGB, gray 1..16 bits, palette, RGBA,
gray+alpha, Adam7 interlaced) into DIR/fuzz_img_probe/ as they are, and
into DIR/fuzz_img_decode/ behind the target's 4 control bytes (channels,
scale and box). Small on purpose (at most 40x30): the fuzzer mutates
every byte. Deterministic: the same bytes on every run with the same PIL.
"""
import io
import os
import struct
import sys
import zlib

from PIL import Image


def pattern(w, h):
    img = Image.new("RGB", (w, h))
    img.putdata([((x * 255) // max(w - 1, 1), (y * 255) // max(h - 1, 1), ((x ^ y) * 37) & 255)
                 for y in range(h) for x in range(w)])
    return img


def encoded(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_raw(w, h, depth, ctype, interlace=0):
    """A PNG of gray (ctype 0) or RGB (2) rows at depth bits, by hand (PIL
    writes neither 2- nor 4-bit gray nor interlaced files)."""
    chans = {0: 1, 2: 3}[ctype]
    row = (w * chans * depth + 7) // 8
    raw = b"".join(b"\0" + bytes(((x * 29 + y * 7) & 255) for x in range(row)) for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def images():
    rgb = pattern(40, 30)
    yield "rgb420.jpg", encoded(rgb, "JPEG", quality=80, subsampling=2)
    yield "rgb422.jpg", encoded(rgb, "JPEG", quality=80, subsampling=1)
    yield "rgb444.jpg", encoded(rgb, "JPEG", quality=80, subsampling=0)
    yield "progressive.jpg", encoded(rgb, "JPEG", quality=80, progressive=True)
    yield "gray.jpg", encoded(rgb.convert("L"), "JPEG", quality=80)
    yield "cmyk.jpg", encoded(rgb.convert("CMYK"), "JPEG", quality=80)
    yield "odd.jpg", encoded(pattern(7, 5), "JPEG", quality=90)
    yield "rgb8.png", encoded(rgb, "PNG")
    yield "gray8.png", encoded(rgb.convert("L"), "PNG")
    yield "palette.png", encoded(rgb.quantize(colors=16), "PNG")
    yield "rgba.png", encoded(rgb.convert("RGBA"), "PNG")
    yield "gray_alpha.png", encoded(rgb.convert("LA"), "PNG")
    yield "gray1.png", encoded(rgb.convert("1"), "PNG")
    yield "gray16.png", png_raw(11, 6, 16, 0)
    yield "gray4.png", png_raw(13, 9, 4, 0)
    yield "rgb16.png", png_raw(9, 7, 16, 2)
    yield "interlaced.png", png_raw(17, 11, 8, 2, interlace=1)


def main():
    out = sys.argv[1]
    for target in ("fuzz_img_probe", "fuzz_img_decode"):
        os.makedirs(os.path.join(out, target), exist_ok=True)
    for i, (name, data) in enumerate(images()):
        with open(os.path.join(out, "fuzz_img_probe", name), "wb") as f:
            f.write(data)
        # channels 3 or 1, scale 1/1..1/8, a box or the whole image
        ctl = bytes([(i * 2) & 0x1f, 40 + i * 9, 30 + i * 5, 100 + i * 7])
        with open(os.path.join(out, "fuzz_img_decode", name), "wb") as f:
            f.write(ctl + data)


if __name__ == "__main__":
    main()
