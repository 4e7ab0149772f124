#!/usr/bin/python3
"""make_fixtures.py DIR [--photos N [--only-photos]]: writes the image test
fixtures into DIR (with --only-photos, only N photographs: a benchmark set).

Hand-made images of every variant the decoder must take (JPEG baseline
4:2:0 / 4:4:4 / 4:2:2, grayscale, Adobe CMYK, progressive, odd sizes; PNG
8- and 16-bit RGB, gray, palette, RGBA, gray+alpha, Adam7 interlaced), bad
ones (truncated, garbage in the entropy data, bad CRC, decompression bombs,
GIF and BMP), and small real photographs cut from Debian's
plasma-workspace-wallpapers (photo_*.jpg, shorter side 375..500, quality 90,
as ImageNet's). Deterministic: the same bytes on every run with the same PIL.
Run by CTest as a fixture (FIXTURES_SETUP image_fixtures).
"""
import glob
import os
import random
import struct
import sys
import zlib

from PIL import Image

W, H = 301, 203  # odd sizes: partial iMCUs on both edges


def pattern(w, h, seed=1):
    """A smooth gradient with edges and some noise: something like a photo."""
    rng = random.Random(seed)
    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            r = (x * 255) // max(w - 1, 1)
            g = (y * 255) // max(h - 1, 1)
            b = 255 - ((x + y) * 255) // max(w + h - 2, 1)
            if (x // 23 + y // 17) % 2:
                r, b = b, r
            n = rng.randint(-12, 12)
            px[x, y] = tuple(min(255, max(0, v + n)) for v in (r, g, b))
    return img


def png_chunk(kind, data, crc=None):
    if crc is None:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png_raw(w, h, depth, ctype, rows, interlace=False):
    """A PNG by hand (PIL writes neither 16-bit RGB nor Adam7): rows is a
    function (x, y) -> bytes of one pixel; filter 0 on every row."""
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 1 if interlace else 0)
    raw = bytearray()
    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                  (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    else:
        passes = [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        xs = range(x0, w, dx)
        if not xs:
            continue
        for y in range(y0, h, dy):
            raw.append(0)
            for x in xs:
                raw += rows(x, y)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
            png_chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + png_chunk(b"IEND", b""))


def write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def jpeg_bomb():
    """A baseline JPEG whose SOF claims 65000 x 65000 (4.2 Gpx): the header is
    valid, the entropy data is a few bytes."""
    img = pattern(16, 16)
    import io
    b = io.BytesIO()
    img.save(b, "JPEG", quality=90)
    data = bytearray(b.getvalue())
    i = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, i + 5, 65000, 65000)
    return bytes(data)


def photos(d, n):
    """Small real photographs: random crops of the wallpapers, shorter side
    375..500, quality 90, 4:2:0 (what PIL writes by default)."""
    srcs = sorted({os.path.realpath(p) for p in
                   glob.glob("/usr/share/wallpapers/*/contents/images/*.jpg")})
    if not srcs:
        sys.exit("make_fixtures: no /usr/share/wallpapers/*/contents/images/*.jpg "
                 "(install plasma-workspace-wallpapers)")
    rng = random.Random(12)
    for i in range(n):
        src = Image.open(srcs[(i * 7) % len(srcs)])
        if min(src.width, src.height) >= 1000:  # halved by libjpeg: quicker, still >= 500
            src.draft("RGB", (src.width // 2, src.height // 2))
        src = src.convert("RGB")
        short = rng.randint(375, 500)
        long_ = rng.randint(short, min(short * 3 // 2, max(src.width, src.height)))
        w, h = (long_, short) if rng.random() < 0.7 else (short, long_)
        w, h = min(w, src.width), min(h, src.height)
        x, y = rng.randint(0, src.width - w), rng.randint(0, src.height - h)
        src.crop((x, y, x + w, y + h)).save(os.path.join(d, "photo_%02d.jpg" % i), "JPEG",
                                           quality=90)


def main():
    d = sys.argv[1]
    n_photos = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--photos" else 6
    os.makedirs(d, exist_ok=True)
    if "--only-photos" in sys.argv:
        photos(d, n_photos)
        return
    rgb = pattern(W, H)
    rgb.save(os.path.join(d, "rgb420.jpg"), "JPEG", quality=90, subsampling=2)
    rgb.save(os.path.join(d, "rgb422.jpg"), "JPEG", quality=90, subsampling=1)
    rgb.save(os.path.join(d, "rgb444.jpg"), "JPEG", quality=90, subsampling=0)
    rgb.save(os.path.join(d, "progressive.jpg"), "JPEG", quality=90, progressive=True)
    rgb.convert("L").save(os.path.join(d, "gray.jpg"), "JPEG", quality=90)
    rgb.convert("CMYK").save(os.path.join(d, "cmyk.jpg"), "JPEG", quality=90)
    pattern(64, 48, 3).save(os.path.join(d, "small.jpg"), "JPEG", quality=95)
    pattern(7, 5, 4).save(os.path.join(d, "tiny.jpg"), "JPEG", quality=95)

    rgb.save(os.path.join(d, "rgb8.png"))
    rgb.convert("L").save(os.path.join(d, "gray8.png"))
    rgb.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(os.path.join(d, "palette.png"))
    rgba = rgb.copy()
    rgba.putalpha(pattern(W, H, 5).convert("L"))
    rgba.save(os.path.join(d, "rgba.png"))
    rgba.convert("LA").save(os.path.join(d, "gray_alpha.png"))
    px = rgb.load()
    write(d, "rgb16.png", png_raw(W, H, 16, 2, lambda x, y: struct.pack(
        ">HHH", *[v * 256 + (x * 31 + y) % 256 for v in px[x, y]])))
    write(d, "interlaced.png", png_raw(W, H, 8, 2, lambda x, y: bytes(px[x, y]),
                                       interlace=True))
    gpx = rgb.convert("L").load()
    write(d, "gray16.png", png_raw(W, H, 16, 0, lambda x, y: struct.pack(">H", gpx[x, y] * 256 + (x + y) % 256)))

    # bad ones
    with open(os.path.join(d, "rgb420.jpg"), "rb") as f:
        jpg = f.read()
    write(d, "bad_truncated.jpg", jpg[:len(jpg) * 6 // 10])
    write(d, "bad_truncated_header.jpg", jpg[:100])
    sos = jpg.find(b"\xff\xda")
    g = bytearray(jpg)
    rng = random.Random(7)
    mid = sos + (len(jpg) - sos) // 3
    for i in range(mid, mid + 64):
        g[i] = rng.randrange(256)
    g[mid + 10:mid + 12] = b"\xff\xd3"  # a restart marker where none belongs
    write(d, "bad_garbage.jpg", bytes(g))
    with open(os.path.join(d, "rgb8.png"), "rb") as f:
        png = f.read()
    write(d, "bad_truncated.png", png[:len(png) * 6 // 10])
    write(d, "bad_truncated_header.png", png[:20])
    idat = png.find(b"IDAT")
    n = struct.unpack(">I", png[idat - 4:idat])[0]
    crc_at = idat + 4 + n
    b = bytearray(png)
    b[crc_at] ^= 0x5A
    write(d, "bad_crc.png", bytes(b))
    write(d, "bomb.jpg", jpeg_bomb())
    write(d, "bomb.png", png_raw(1, 1, 8, 2, lambda x, y: b"\0\0\0").replace(
        png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)),
        png_chunk(b"IHDR", struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0))))
    write(d, "huge_dims.png", png_raw(1, 1, 8, 2, lambda x, y: b"\0\0\0").replace(
        png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)),
        png_chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 10, 8, 2, 0, 0, 0))))
    rgb.save(os.path.join(d, "other.gif"))
    rgb.save(os.path.join(d, "other.bmp"))
    photos(d, n_photos)


if __name__ == "__main__":
    main()
