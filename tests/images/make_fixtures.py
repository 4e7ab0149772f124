#!/usr/bin/python3
"""make_fixtures.py DIR [--photos N [--only-photos]]: writes the image test
fixtures into DIR (with --only-photos, only N photographs: a benchmark set).

Hand-made images of every variant the decoder must take (JPEG baseline
4:2:0 / 4:4:4 / 4:2:2, grayscale, Adobe CMYK, progressive, odd sizes; PNG
8- and 16-bit RGB, gray, palette, RGBA, gray+alpha, Adam7 interlaced), bad
ones (truncated, garbage in the entropy data, bad CRC, decompression bombs,
GIF and BMP), damaged JPEGs PIL decodes through libjpeg's warnings
(damaged_*.jpg: scrambled entropy data, cut with an EOI, junk between
markers) and damaged ones PIL refuses (bad_*.jpg), and small real photographs cut from Debian's
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


def scans(jpg):
    """Offsets of every SOS marker of a JPEG PIL wrote (no FF DA elsewhere)."""
    out, i = [], jpg.find(b"\xff\xda")
    while i >= 0:
        out.append(i)
        i = jpg.find(b"\xff\xda", i + 2)
    return out


def scramble(data, at, n, seed):
    """n bytes of entropy data from at replaced by random ones, none 0xFF
    (a marker there would be another kind of damage), the byte after an FF
    left alone (FF 00 stuffing)."""
    g, rng = bytearray(data), random.Random(seed)
    for i in range(at, at + n):
        if g[i - 1] != 0xFF and g[i] != 0xFF:
            g[i] = rng.randrange(255)
    return bytes(g)


def damaged(d, jpg, prog):
    """JPEGs with damage PIL (and torchvision's default loader, which is
    PIL) decodes through (libjpeg warnings), damaged_*.jpg, and damage it
    refuses, bad_*.jpg. jpg is a baseline 4:2:0 file, prog a progressive
    one (10 scans), both written by PIL."""
    sos, psos = scans(jpg)[0], scans(prog)
    mid = sos + (len(jpg) - sos) // 3
    eoi = b"\xff\xd9"
    # readable: libjpeg warns, fills in, goes on; PIL returns what it made
    write(d, "damaged_scrambled.jpg", scramble(jpg, mid, 400, 7))
    g = bytearray(scramble(jpg, mid, 64, 8))
    g[mid + 10:mid + 12] = b"\xff\xd3"  # a restart marker where none belongs
    write(d, "damaged_marker.jpg", bytes(g))  # "premature end of data segment"
    write(d, "damaged_cut_scan.jpg", jpg[:mid] + eoi)  # cut mid-scan, then an EOI
    write(d, "damaged_progressive_first_scan.jpg", prog[:psos[1]] + eoi)
    write(d, "damaged_progressive_mid_scan.jpg", prog[:(psos[2] + psos[3]) // 2] + eoi)
    dqt = jpg.find(b"\xff\xdb")
    write(d, "damaged_junk.jpg",  # "extraneous bytes before marker", three times
          jpg[:dqt] + b"junk" + jpg[dqt:sos] + b"\x00\x01\x02" + jpg[sos:-2] + b"\x12\x34" + eoi)
    write(d, "damaged_trailing.jpg", jpg + b"trailing bytes past the end")
    # refused: PIL says "image file is truncated" (libjpeg wants more bytes)
    # or "broken data stream" (a libjpeg error)
    write(d, "bad_truncated.jpg", jpg[:len(jpg) * 6 // 10])  # mid-scan, no EOI
    write(d, "bad_no_eoi.jpg", jpg[:-2])
    write(d, "bad_progressive_cut.jpg", prog[:psos[1]])  # after the first scan
    at = (psos[2] + psos[3]) // 2  # a bogus DHT inside a scan: an error in every path
    write(d, "bad_garbage.jpg", scramble(prog, at, 64, 9)[:at + 64] + b"\xff\xc4\x00\x03\x10" +
          prog[at + 69:])
    # a bogus DHT after a baseline file's only scan: an error once its rows
    # are read (boxes above it cannot see it)
    write(d, "bad_marker_after_scan.jpg", jpg[:mid] + b"\xff\xc4\x00\x03\x10" + jpg[mid + 5:])


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
    with open(os.path.join(d, "progressive.jpg"), "rb") as f:
        prog = f.read()
    damaged(d, jpg, prog)
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
    sof = jpg.find(b"\xff\xc0")
    write(d, "precision12.jpg", jpg[:sof + 4] + b"\x0c" + jpg[sof + 5:])  # SOF says 12-bit
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
