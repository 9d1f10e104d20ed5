#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The seed corpus of fuzz_image: small JPEG and PNG files.

make_corpus.py calls write_image_seeds(DIR), which writes DIR/image/
(replacing it). Each seed is fuzz_image's 6 configuration
bytes (see tests/fuzz/fuzz_image.c) followed by an image made with Pillow
from a synthetic pattern: baseline JPEGs in each chroma subsampling, odd
sizes (partial MCUs), progressive, optimized, grayscale, CMYK with and
without the Adobe marker, restart-free Motion-JPEG style (no DHT), EXIF;
PNGs of every colour type and bit depth, palette with tRNS, 16-bit RGB
written by hand; progressive JPEGs of end-of-band runs only (too many
scans, scans visiting the blocks too often, coefficient buffers above the
limit), which tests/integration/test_bombs.py makes larger; then truncated
and corrupted variants and headers that claim more pixels than the
fuzzer's limit. With --stamp, FILE is written
last so a build system can depend on it.

Pillow (python3-pil) makes the JPEGs; without it only the hand-written PNG
seeds are produced (and a note is printed), so the build never fails for
lack of it.
"""

import io
import os
import shutil
import struct
import sys
import zlib

try:
    from PIL import Image
except ImportError:  # the PNG seeds below need only zlib
    Image = None


def config(size_sel=0, full=0, float_out=0, flip=0, inject=0, crop=(128, 128, 64, 64), seed=0):
    """fuzz_image's configuration bytes."""
    b0 = size_sel | full << 2 | float_out << 3 | flip << 4 | inject << 5
    return bytes([b0, *crop, seed])


CONFIGS = [
    config(),                                   # 32x32 uint8, region decode
    config(full=1, flip=1),                     # 32x32, whole image
    config(size_sel=1, float_out=1, crop=(255, 255, 0, 0)),
    config(size_sel=2, crop=(0, 0, 255, 255)),  # 1x1 output, 1x1 crop
    config(size_sel=3, inject=3, seed=9),       # 17x17, 4th allocation fails
]


def png_chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png(width, height, bit_depth, color_type, rows, extra=b""):
    """A PNG from raw scanlines (each with its filter byte)."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra
            + png_chunk(b"IDAT", zlib.compress(rows, 9)) + png_chunk(b"IEND", b""))


def pattern_bytes(width, height, channels, bytes_per_sample=1):
    out = bytearray()
    for y in range(height):
        out.append(y % 5)  # every PNG filter type
        for x in range(width):
            for c in range(channels):
                v = (x * 7 + y * 13 + c * 50 + (x * y) % 31) & 0xFF
                out += bytes([v] * bytes_per_sample)
    return bytes(out)


def hand_made_pngs():
    seeds = {}
    seeds["png_rgb16_hand.png"] = png(13, 9, 16, 2, pattern_bytes(13, 9, 3, 2))
    seeds["png_rgba16_hand.png"] = png(9, 13, 16, 6, pattern_bytes(9, 13, 4, 2))
    seeds["png_gray16_hand.png"] = png(16, 3, 16, 0, pattern_bytes(16, 3, 1, 2))
    seeds["png_gray_alpha8_hand.png"] = png(5, 7, 8, 4, pattern_bytes(5, 7, 2))
    plte = png_chunk(b"PLTE", bytes(range(48)))
    trns = png_chunk(b"tRNS", bytes([0, 128, 255]))
    rows = b"".join(b"\0" + bytes((x + y) % 16 for x in range(11)) for y in range(6))
    seeds["png_palette_trns_hand.png"] = png(11, 6, 8, 3, rows, plte + trns)
    # Palette indices beyond the palette, and a missing PLTE.
    rows = b"".join(b"\0" + bytes(200 + x for x in range(11)) for y in range(6))
    seeds["png_palette_out_of_range.png"] = png(11, 6, 8, 3, rows, plte)
    seeds["png_palette_no_plte.png"] = png(11, 6, 8, 3, rows)
    rows = b"".join(b"\0" + bytes([0b10110010, 0b01000000]) for y in range(5))
    seeds["png_gray1_hand.png"] = png(10, 5, 1, 0, rows)
    # Header claims above fuzz_image's 4 MP limit, and an absurd one.
    seeds["png_bomb_limit.png"] = png(4000, 1001, 8, 2, b"\0" * 12004)
    seeds["png_bomb_max.png"] = png(0x7FFFFFFF, 0x7FFFFFFF, 8, 2, b"\0" * 100)
    # Too few rows of data, bad CRC, bad filter byte.
    seeds["png_short_idat.png"] = png(8, 8, 8, 2, pattern_bytes(8, 3, 3))
    good = png(8, 8, 8, 2, pattern_bytes(8, 8, 3))
    bad = bytearray(good)
    bad[29] ^= 1
    seeds["png_bad_ihdr_crc.png"] = bytes(bad)
    rows = bytearray(pattern_bytes(8, 8, 3))
    rows[25] = 9
    seeds["png_bad_filter.png"] = png(8, 8, 8, 2, bytes(rows))
    seeds["png_truncated.png"] = good[:len(good) - 20]
    return seeds


def segment(marker, payload):
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def eob_runs(blocks):
    """Entropy-coded data of an AC scan ending the band of `blocks` blocks:
    EOBr symbols (4-bit codes r = 0..14, see the DHT below), each followed by
    r bits of run length, as many as needed."""
    acc, nbits, out = 0, 0, bytearray()

    def put(value, n):
        nonlocal acc, nbits
        for i in range(n - 1, -1, -1):
            acc, nbits = (acc << 1) | ((value >> i) & 1), nbits + 1
            if nbits == 8:
                out.append(acc)
                if acc == 0xFF:
                    out.append(0)  # byte stuffing
                acc, nbits = 0, 0
    while blocks > 0:
        run = min(blocks, 32767)
        r = run.bit_length() - 1
        put(r, 4)
        put(run - (1 << r), r)
        blocks -= run
    while nbits:
        put(1, 1)
    return bytes(out)


def hostile_jpeg(width, height, components=3, luma_sampling=(1, 1), refine_scans=0,
                 refine_components=None):
    """A progressive JPEG of width x height: one AC scan per component, then
    refine_scans AC refinement scans of the refine_components in turn (each
    repeats a refinement; libjpeg only warns), all of end-of-band runs."""
    hmax, vmax = luma_sampling
    sampling = [luma_sampling] + [(1, 1)] * (components - 1)
    out = bytearray(b"\xff\xd8")
    out += segment(0xDB, b"\x00" + bytes([1] * 64))
    sof = bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([components])
    for c, (h, v) in enumerate(sampling):
        sof += bytes([c + 1, (h << 4) | v, 0])
    out += segment(0xC2, sof)
    counts = bytes([0, 0, 0, 15] + [0] * 12)
    out += segment(0xC4, b"\x10" + counts + bytes(r << 4 for r in range(15)))

    def scan(c, ah, al):
        h, v = sampling[c]
        blocks = -(-width * h // (hmax * 8)) * -(-height * v // (vmax * 8))
        return segment(0xDA, bytes([1, c + 1, 0x00, 1, 63, (ah << 4) | al])) + eob_runs(blocks)
    for c in range(components):
        out += scan(c, 0, 1 if refine_scans else 0)
    cycle = refine_components or range(components)
    for i in range(refine_scans):
        out += scan(cycle[i % len(cycle)], 1, 0)
    return bytes(out + b"\xff\xd9")


def hostile_jpeg_seeds():
    """Progressive JPEGs that cost far more than their size: too many scans,
    scans that visit the blocks over and over, and coefficient buffers
    above the fuzzer's limit (4 megapixels: 12 MB)."""
    seeds = {}
    seeds["jpeg_progressive_600_scans.jpg"] = hostile_jpeg(
        32, 32, components=3, luma_sampling=(4, 4), refine_scans=600, refine_components=(1, 2))
    seeds["jpeg_progressive_block_visits.jpg"] = hostile_jpeg(256, 256, 1, refine_scans=80)
    seeds["jpeg_progressive_coefficients_444.jpg"] = hostile_jpeg(2048, 1024, 3)
    seeds["jpeg_progressive_coefficients_ok.jpg"] = hostile_jpeg(2000, 1000, 3)
    seeds["jpeg_progressive_eob_only.jpg"] = hostile_jpeg(40, 24, 3, luma_sampling=(2, 1))
    return seeds


def pil_seeds():
    seeds = {}

    def save(im, fmt, **kw):
        buf = io.BytesIO()
        im.save(buf, fmt, **kw)
        return buf.getvalue()

    def pattern(w, h):
        im = Image.new("RGB", (w, h))
        im.putdata([((x * 9) & 255, (y * 11) & 255, ((x + y) * 5) & 255)
                    for y in range(h) for x in range(w)])
        return im

    rgb = pattern(48, 40)
    odd = pattern(37, 23)
    seeds["jpeg_420.jpg"] = save(rgb, "JPEG", quality=75)
    seeds["jpeg_444.jpg"] = save(rgb, "JPEG", quality=90, subsampling=0)
    seeds["jpeg_422_odd.jpg"] = save(odd, "JPEG", quality=60, subsampling=1)
    seeds["jpeg_420_odd.jpg"] = save(odd, "JPEG", quality=50, subsampling=2)
    seeds["jpeg_progressive.jpg"] = save(rgb, "JPEG", quality=80, progressive=True)
    seeds["jpeg_progressive_odd.jpg"] = save(odd, "JPEG", quality=80, progressive=True,
                                             subsampling=0)
    seeds["jpeg_optimized.jpg"] = save(rgb, "JPEG", quality=70, optimize=True)
    seeds["jpeg_gray.jpg"] = save(rgb.convert("L"), "JPEG", quality=85)
    seeds["jpeg_gray_progressive.jpg"] = save(odd.convert("L"), "JPEG", progressive=True)
    seeds["jpeg_cmyk.jpg"] = save(odd.convert("CMYK"), "JPEG", quality=85)
    seeds["jpeg_cmyk_progressive.jpg"] = save(rgb.convert("CMYK"), "JPEG", progressive=True)
    seeds["jpeg_1x1.jpg"] = save(pattern(1, 1), "JPEG")
    seeds["jpeg_wide.jpg"] = save(pattern(250, 2), "JPEG")
    seeds["jpeg_tall.jpg"] = save(pattern(3, 200), "JPEG", progressive=True)
    exif = Image.Exif()
    exif[0x0112] = 6
    seeds["jpeg_exif.jpg"] = save(odd, "JPEG", exif=exif.tobytes())
    big = Image.new("RGB", (320, 240), (30, 90, 150))  # flat: compresses to little
    seeds["jpeg_flat_320x240.jpg"] = save(big, "JPEG", quality=50)

    def segments(data):
        i, out = 2, []
        while i + 4 <= len(data) and data[i] == 0xFF:
            marker = data[i + 1]
            length = struct.unpack(">H", data[i + 2:i + 4])[0]
            out.append((marker, i, length))
            if marker == 0xDA:
                break
            i += 2 + length
        return out

    def without(data, marker):
        out = bytearray(data[:2])
        for m, off, length in segments(data):
            if m == 0xDA:
                out += data[off:]
                return bytes(out)
            if m != marker:
                out += data[off:off + 2 + length]
        return bytes(out)

    def with_size(data, w, h):
        b = bytearray(data)
        for m, off, _ in segments(data):
            if m in (0xC0, 0xC1, 0xC2):
                b[off + 5:off + 9] = struct.pack(">HH", h, w)
        return bytes(b)

    base = seeds["jpeg_420.jpg"]
    seeds["jpeg_no_dht.jpg"] = without(base, 0xC4)
    seeds["jpeg_cmyk_no_adobe.jpg"] = without(seeds["jpeg_cmyk.jpg"], 0xEE)
    seeds["jpeg_no_dqt.jpg"] = without(base, 0xDB)
    seeds["jpeg_bomb_limit.jpg"] = with_size(base, 4000, 1001)
    seeds["jpeg_bomb_max.jpg"] = with_size(base, 65500, 65500)
    seeds["jpeg_zero_width.jpg"] = with_size(base, 0, 40)
    seeds["jpeg_larger_than_data.jpg"] = with_size(base, 480, 400)  # runs out of data
    for name in ("jpeg_420.jpg", "jpeg_progressive.jpg", "jpeg_cmyk.jpg"):
        data = seeds[name]
        for frac in (0.25, 0.6, 0.95):
            seeds[name.replace(".jpg", "_truncated_%d.jpg" % (frac * 100))] = \
                data[:int(len(data) * frac)]
    corrupt = bytearray(base)
    sos = max(off for m, off, _ in segments(base))
    for k in range(sos + 20, len(corrupt) - 2, 37):
        corrupt[k] ^= 0x5A
    seeds["jpeg_corrupt_scan.jpg"] = bytes(corrupt)

    seeds["png_rgb8.png"] = save(odd, "PNG")
    rgba = odd.copy()
    rgba.putalpha(128)
    seeds["png_rgba8.png"] = save(rgba, "PNG")
    seeds["png_palette.png"] = save(odd.quantize(64), "PNG")
    seeds["png_palette_trns.png"] = save(odd.quantize(16), "PNG", transparency=2)
    seeds["png_palette_2bit.png"] = save(odd.quantize(4), "PNG", bits=2)
    seeds["png_gray8.png"] = save(odd.convert("L"), "PNG")
    seeds["png_gray_alpha.png"] = save(rgba.convert("LA"), "PNG")
    seeds["png_1bit.png"] = save(odd.convert("1"), "PNG")
    seeds["png_gray16.png"] = save(odd.convert("I").point(lambda v: v * 200).convert("I;16"),
                                   "PNG")
    return seeds


def write_image_seeds(corpus_dir):
    """Write the image seeds into corpus_dir/image; returns (seeds, images)."""
    out = os.path.join(corpus_dir, "image")
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    seeds = hand_made_pngs()
    seeds.update(hostile_jpeg_seeds())
    if Image is not None:
        seeds.update(pil_seeds())
    else:
        sys.stderr.write("make_corpus: no Pillow; PNG image seeds only\n")
    count = 0
    for name, data in sorted(seeds.items()):
        for i, cfg in enumerate(CONFIGS):
            # Every seed with the first config, the small ones with all.
            if i > 0 and len(data) > 4096:
                continue
            with open(os.path.join(out, "%s.cfg%d" % (name, i)), "wb") as f:
                f.write(cfg + data)
            count += 1
    return count, len(seeds)
