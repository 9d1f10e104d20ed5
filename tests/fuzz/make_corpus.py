#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Write the seed corpora of stoker's fuzz targets.

Usage: make_corpus.py [--stamp FILE] DIR

Creates DIR/shard/ (inputs of fuzz_shard: one configuration byte, then a
shard), DIR/urls/ (inputs of fuzz_urls: a brace pattern), DIR/list_xml/
(inputs of fuzz_list_xml: ListObjectsV2 response pages), DIR/aws_config/
(inputs of fuzz_aws_config: a kind byte, then an AWS config or credentials
file), DIR/gzip/
(inputs of fuzz_gzip) and DIR/index/ (inputs of fuzz_index: dataset index
files). The seeds are
small and deterministic (no timestamps, no randomness) and are regenerated
by the build; only inputs that once crashed are committed, in
tests/fuzz/regressions/. With --stamp, FILE is written last so a build
system can depend on it. Standard library only.

Shard seeds: valid shards of each tar flavour (ustar, GNU, pax), long
names, a pax size record, directories, symlinks and hard links, a
reappearing key, a duplicate member, mixed-case and multi-dot extensions,
limits (many members, a big member, a long name), gzip/bzip2/xz and
hand-made zstd and lz4 frames, uncompressed; GNU sparse members (old GNU,
pax 0.0, 0.1, 1.0) and headers claiming more bytes than they store; data
after the end-of-archive marker; then truncated, checksum-corrupted and
size-corrupted variants, gzip with a bad CRC or ISIZE.
"""

import bz2
import gzip
import io
import lzma
import os
import shutil
import struct
import sys
import tarfile

from make_image_corpus import write_image_seeds

# fuzz_shard's first byte: bits 0-1 block size of the fail-policy run (1, 7,
# 512, 65536), bits 2-3 that of the skip-policy run, bits 4-7 the source
# chunk sizes (0, 1, 3, 4096) of the two runs.
def config(block_a, block_b, chunk_a=0, chunk_b=0):
    return bytes([block_a | block_b << 2 | chunk_a << 4 | chunk_b << 6])


FAST = config(2, 3)          # 512 / 65536, whole blocks
BYTEWISE = config(0, 2, 1, 0)  # 1-byte blocks, then 512
ODD = config(1, 3, 2, 3)     # 7-byte blocks fed 3 at a time, then 64 KiB in 4 KiB reads
CONFIGS = [FAST, BYTEWISE, ODD, config(3, 1, 3, 1)]


def member(name, data=b"", kind=tarfile.REGTYPE, linkname="", pax=None):
    return (name, data, kind, linkname, pax)


def make_tar(members, fmt=tarfile.GNU_FORMAT, global_pax=None):
    buf = io.BytesIO()
    kwargs = {"format": fmt}
    if global_pax is not None:
        kwargs["pax_headers"] = global_pax
    with tarfile.open(fileobj=buf, mode="w", **kwargs) as tf:
        for name, data, kind, linkname, pax in members:
            ti = tarfile.TarInfo(name)
            ti.type = kind
            ti.mtime = 1700000000
            ti.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
            ti.uname = ti.gname = "stoker"
            ti.linkname = linkname
            if pax:
                ti.pax_headers = dict(pax)
            if kind == tarfile.REGTYPE:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            else:
                tf.addfile(ti)
    return buf.getvalue()


BASIC = [
    member("s000.jpg", b"\xff\xd8\xff\xe0JFIF" + b"x" * 40),
    member("s000.cls", b"3"),
    member("s001.jpg", b"\xff\xd8\xff\xe0" + b"y" * 17),
    member("s001.cls", b"7"),
    member("s001.json", b'{"label": 7}'),
]

WEIRD_NAMES = [
    member("dir/", kind=tarfile.DIRTYPE),
    member("dir/a.JPG", b"AAAA"),
    member("dir/a.Cls", b"1"),
    member("dir/b.seg.png", b"BB"),
    member("dir/b.cls", b"2"),
    member("dir/link.txt", kind=tarfile.SYMTYPE, linkname="a.cls"),
    member("dir/hard.txt", kind=tarfile.LNKTYPE, linkname="dir/b.cls"),
    member("README", b"no dot"),
    member("__meta__", b"meta"),
    member("__x.y__", b"meta too"),
    member(".hidden.txt", b"h"),
    member("d.x/.dotfile", b"h"),
    member("v1.2/c.txt", b"key with a dotted directory"),
    member("./e.txt", b"e"),
    member("f.", b"empty extension"),
    member("g.txt", b""),
    member("fifo.txt", kind=tarfile.FIFOTYPE),
]

LONG = "long/" + "d" * 120 + "/" + "k" * 90
LONG_NAMES = [
    member(LONG + ".jpg", b"long name"),
    member(LONG + ".cls", b"5"),
    member("x" * 99 + ".txt", b"exactly 103"),
]

REAPPEAR = [
    member("a.jpg", b"1"),
    member("b.jpg", b"2"),
    member("a.cls", b"3"),
    member("c.jpg", b"4"),
]

DUPLICATE = [
    member("a.jpg", b"1"),
    member("a.jpg", b"2"),
    member("b.jpg", b"3"),
]

DUP_CASE = [
    member("a.jpg", b"1"),
    member("a.JPG", b"2"),
    member("b.jpg", b"3"),
]

MANY_MEMBERS = [member("m.e%02d" % i, bytes([i])) for i in range(18)] + [member("n.jpg", b"n")]

TOO_LONG_NAME = [
    member("ok.jpg", b"1"),
    member("ok." + "e" * 300, b"2"),
    member("z" * 300 + ".jpg", b"3"),
    member("p.jpg", b"4"),
]


def pax_size_record():
    # A pax header whose "size" record says how long the data is (libarchive
    # prefers it to the ustar field), plus the usual pax noise.
    return make_tar(
        [
            member("p0.jpg", b"P" * 33, pax={"size": "33", "comment": "seed"}),
            member("p0.txt", b"q", pax={"path": "p0.txt", "mtime": "1700000000.25"}),
            member("p1.jpg", b"r" * 5, pax={"path": "pax/p1.jpg", "uname": "u" * 40}),
        ],
        fmt=tarfile.PAX_FORMAT,
        global_pax={"comment": "global header"},
    )


def octal(n, width):
    return ("%0*o" % (width - 1, n)).encode() + b"\0"


def checksum(header):
    h = bytearray(header)
    h[148:156] = b" " * 8
    return octal(sum(h), 7) + b" "


def fix_checksum(header):
    h = bytearray(header)
    h[148:156] = checksum(h)
    return bytes(h)


def raw_header(name, size, typeflag=b"0", size_field=None, magic=b"ustar\x0000"):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size_field if size_field is not None else octal(size, 12)
    h[136:148] = octal(1700000000, 12)
    h[156:157] = typeflag
    h[257:265] = magic
    return fix_checksum(h)


def pad(data):
    return data + b"\0" * (-len(data) % 512)


def hand_made():
    """Headers tarfile will not write."""
    out = {}
    end = b"\0" * 1024
    # Base-256 (GNU binary) size field.
    size256 = b"\x80" + b"\0" * 7 + struct.pack(">I", 5)
    out["base256_size"] = raw_header(b"b.bin", 5, size_field=size256) + pad(b"hello") + end
    # A size of 8 GiB - 1 in octal, with no data: oversized, then truncated.
    out["huge_size"] = raw_header(b"h.bin", 0o77777777777) + pad(b"x") + end
    # Pax size record larger than the ustar field.
    rec = b"16 size=1048577\n"
    pax = raw_header(b"PaxHeader/h.bin", len(rec), typeflag=b"x") + pad(rec)
    out["pax_big_size"] = pax + raw_header(b"h.bin", 3) + pad(b"abc") + end
    # Pax record with a bad length, a negative size, a non-numeric size.
    for tag, rec in (("pax_bad_len", b"99 size=3\n"), ("pax_neg_size", b"13 size=-10\n"),
                     ("pax_nan_size", b"12 size=abc\n"), ("pax_path_nul", b"14 path=a\0.b\n")):
        pax = raw_header(b"PaxHeader/x", len(rec), typeflag=b"x") + pad(rec)
        out[tag] = pax + raw_header(b"x.bin", 3) + pad(b"abc") + end
    # GNU long name ('L') entry, and one without a following member.
    long_name = b"L" * 200 + b".txt\0"
    gnu = raw_header(b"././@LongLink", len(long_name), typeflag=b"L", magic=b"ustar  \0")
    out["gnu_longlink"] = gnu + pad(long_name) + raw_header(b"short.txt", 2) + pad(b"ok") + end
    out["gnu_longlink_dangling"] = gnu + pad(long_name) + end
    # Old v7 header (no magic), a regular file typed '\0', and a contiguous file '7'.
    out["v7"] = raw_header(b"v.txt", 2, typeflag=b"\0", magic=b"\0" * 8) + pad(b"v7") + end
    out["contiguous"] = raw_header(b"c.txt", 2, typeflag=b"7") + pad(b"c7") + end
    # A member with a name and no end-of-archive blocks.
    out["no_end"] = raw_header(b"n.txt", 2) + pad(b"nn")
    # One end block only, then garbage.
    out["one_end_block"] = raw_header(b"o.txt", 1) + pad(b"o") + b"\0" * 512 + b"garbage" * 10
    # Empty input, zeros only, not a tar at all.
    out["empty"] = b""
    out["zeros"] = b"\0" * 1024
    out["text"] = b"this is not a tar archive\n" * 30
    out.update(sparse_members())
    # Data after the end-of-archive marker: a second archive, junk, padding.
    first = raw_header(b"a.txt", 1) + pad(b"a") + end
    out["concatenated"] = first + raw_header(b"b.txt", 1) + pad(b"b") + end
    out["junk_after_end"] = first + b"\0" * 700 + b"J"
    out["padding_after_end"] = first + b"\0" * 9000
    return out


def sparse_members():
    """GNU sparse members in every encoding (refused: their holes are not in
    the shard), and headers claiming more bytes than they store."""
    out = {}
    end = b"\0" * 1024
    real = 512 << 10
    data = b"sparse"
    # Old GNU 'S': map in the header (offset, numbytes), realsize at 483.
    h = bytearray(raw_header(b"o.bin", len(data), typeflag=b"S", magic=b"ustar  \0"))
    h[386:398] = octal(4096, 12)
    h[398:410] = octal(len(data), 12)
    h[483:495] = octal(real, 12)
    out["sparse_oldgnu"] = fix_checksum(h) + pad(data) + raw_header(b"n.txt", 2) + pad(b"ok") + end
    h[386:410] = b"\0" * 24  # no map at all: all hole
    out["sparse_oldgnu_empty_map"] = fix_checksum(h) + end
    def record(r):  # "LEN key=value\n", LEN counting itself
        n = len(r) + 2
        length = n + len(str(n))
        length = n + len(str(length))
        return b"%d %s\n" % (length, r)

    def pax(records, name, size, body):
        recs = b"".join(record(r) for r in records)
        return (raw_header(b"PaxHeader/" + name, len(recs), typeflag=b"x") + pad(recs) +
                raw_header(name, size) + pad(body))
    out["sparse_pax_0_0"] = pax([b"GNU.sparse.size=%d" % real, b"GNU.sparse.numblocks=1",
                                 b"GNU.sparse.offset=4096", b"GNU.sparse.numbytes=6"],
                                b"p0.bin", len(data), data) + end
    out["sparse_pax_0_1"] = pax([b"GNU.sparse.size=%d" % real, b"GNU.sparse.numblocks=1",
                                 b"GNU.sparse.map=4096,6"], b"p1.bin", len(data), data) + end
    body = pad(b"1\n4096\n6\n") + data
    out["sparse_pax_1_0"] = pax([b"GNU.sparse.major=1", b"GNU.sparse.minor=0",
                                 b"GNU.sparse.name=p2.bin", b"GNU.sparse.realsize=%d" % real],
                                b"GNUSparseFile.0/p2.bin", len(body), body) + end
    out["pax_realsize_without_map"] = pax([b"GNU.sparse.realsize=%d" % real], b"r.bin",
                                          len(data), data) + end
    return out


def xxh32(data, seed=0):
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    m = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & m

    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + p1 + p2) & m, (seed + p2) & m, seed & m, (seed - p1) & m]
        while i + 16 <= n:
            for j in range(4):
                (lane,) = struct.unpack_from("<I", data, i + 4 * j)
                v[j] = (rotl((v[j] + lane * p2) & m, 13) * p1) & m
            i += 16
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & m
    else:
        h = (seed + p5) & m
    h = (h + n) & m
    while i + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, i)
        h = (rotl((h + lane * p3) & m, 17) * p4) & m
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & m, 11) * p1) & m
        i += 1
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    h ^= h >> 16
    return h


def lz4_frame(data):
    """An LZ4 frame of uncompressed blocks (64 KiB max each)."""
    desc = bytes([0x60, 0x40])  # version 1, independent blocks; 64 KiB blocks
    out = struct.pack("<I", 0x184D2204) + desc + bytes([(xxh32(desc) >> 8) & 0xFF])
    for i in range(0, len(data), 65536):
        block = data[i:i + 65536]
        out += struct.pack("<I", len(block) | 0x80000000) + block
    return out + struct.pack("<I", 0)


def zstd_frame(data, rle_tail=0):
    """A zstd frame of raw blocks; rle_tail adds an RLE block of zeros."""
    out = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x38])  # no FCS; 128 KiB window
    blocks = [data[i:i + 65536] for i in range(0, len(data), 65536)] or [b""]
    for n, block in enumerate(blocks):
        last = n == len(blocks) - 1 and not rle_tail
        hdr = (len(block) << 3) | (0 << 1) | int(last)
        out += struct.pack("<I", hdr)[:3] + block
    if rle_tail:
        hdr = (rle_tail << 3) | (1 << 1) | 1
        out += struct.pack("<I", hdr)[:3] + b"\0"
    return out


def gz(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


def shard_seeds():
    seeds = {}
    basic = {
        "ustar": make_tar(BASIC, tarfile.USTAR_FORMAT),
        "gnu": make_tar(BASIC, tarfile.GNU_FORMAT),
        "pax": make_tar(BASIC, tarfile.PAX_FORMAT),
    }
    for fmt, data in basic.items():
        for i, cfg in enumerate(CONFIGS):
            seeds["%s_cfg%d" % (fmt, i)] = cfg + data
    for fmt, f in (("gnu", tarfile.GNU_FORMAT), ("pax", tarfile.PAX_FORMAT),
                   ("ustar", tarfile.USTAR_FORMAT)):
        # ustar stores the long path in its prefix field, but not a
        # 103-byte basename.
        names = LONG_NAMES[:2] if f == tarfile.USTAR_FORMAT else LONG_NAMES
        seeds["long_names_" + fmt] = FAST + make_tar(names, f)
    seeds["weird_names_gnu"] = FAST + make_tar(WEIRD_NAMES, tarfile.GNU_FORMAT)
    seeds["weird_names_pax"] = ODD + make_tar(WEIRD_NAMES, tarfile.PAX_FORMAT)
    seeds["reappearing_key"] = FAST + make_tar(REAPPEAR)
    seeds["duplicate_member"] = FAST + make_tar(DUPLICATE)
    seeds["duplicate_member_case"] = BYTEWISE + make_tar(DUP_CASE)
    seeds["many_members"] = FAST + make_tar(MANY_MEMBERS)
    seeds["too_long_name"] = FAST + make_tar(TOO_LONG_NAME, tarfile.PAX_FORMAT)
    seeds["pax_size_record"] = FAST + pax_size_record()
    seeds["pax_size_record_bytewise"] = BYTEWISE + pax_size_record()
    for name, data in hand_made().items():
        seeds["raw_" + name] = FAST + data

    # Compressed shards.
    plain = make_tar(BASIC, tarfile.PAX_FORMAT)
    seeds["gz"] = FAST + gz(plain)
    seeds["gz_bytewise"] = BYTEWISE + gz(plain)
    seeds["gz_concatenated"] = FAST + gz(plain[:1024]) + gz(plain[1024:])
    seeds["gz_trailing_garbage"] = FAST + gz(plain) + b"garbage"
    seeds["bz2"] = FAST + bz2.compress(plain, 9)
    seeds["xz"] = ODD + lzma.compress(plain, preset=0)
    seeds["lzma_alone"] = FAST + lzma.compress(plain, format=lzma.FORMAT_ALONE, preset=0)
    seeds["zstd_raw"] = FAST + zstd_frame(plain)
    seeds["zstd_rle_tail"] = FAST + zstd_frame(plain[:-1024], rle_tail=1024)
    seeds["lz4_raw"] = FAST + lz4_frame(plain)
    big = make_tar([member("big.bin", b"\0" * ((1 << 20) + 1)), member("small.txt", b"s")])
    seeds["gz_big_member"] = FAST + gz(big)
    seeds["gz_tar_of_tar"] = FAST + gz(make_tar([member("inner.tar", plain)]))

    # Damaged variants of a valid shard.
    base = make_tar(REAPPEAR[:2] + BASIC, tarfile.GNU_FORMAT)
    for cut in (1, 100, 511, 512, 513, 700, 1024, 1536, len(base) - 1024, len(base) - 1):
        seeds["truncated_%d" % cut] = FAST + base[:cut]
    seeds["truncated_bytewise"] = BYTEWISE + base[:1300]
    bad = bytearray(base)
    bad[148] ^= 0x01  # first header's checksum
    seeds["bad_checksum_first"] = FAST + bytes(bad)
    bad = bytearray(base)
    bad[1024 + 148] ^= 0x01  # second header's checksum
    seeds["bad_checksum_second"] = FAST + bytes(bad)
    bad = bytearray(base)
    bad[1024 + 3] ^= 0x20  # a name byte, checksum left stale
    seeds["stale_checksum_name"] = FAST + bytes(bad)
    bad = bytearray(base)
    bad[124:136] = b"77777777777\0"  # first member's size, then fixed checksum
    bad[0:512] = fix_checksum(bad[0:512])
    seeds["size_corrupt"] = FAST + bytes(bad)
    seeds["gz_truncated"] = FAST + gz(base)[:-20]
    seeds["gz_bad_crc"] = FAST + gz(base)[:-8] + b"\0" * 8
    packed = bytearray(gz(base))
    packed[-1] ^= 1
    seeds["gz_bad_isize"] = FAST + bytes(packed)
    seeds["gz_trailing_zeros"] = BYTEWISE + gz(base) + b"\0" * 600
    seeds["bz2_truncated"] = FAST + bz2.compress(base)[:-30]
    seeds["xz_truncated"] = FAST + lzma.compress(base)[:-30]
    return seeds


def gzip_seeds():
    """Inputs of fuzz_gzip: byte 0 even, raw gzip bytes; odd, a tar the
    harness compresses (see tests/fuzz/fuzz_gzip.c for the bits)."""
    plain = make_tar(BASIC)
    body = gz(plain)
    seeds = {}
    for cfg in (0x00, 0x0a, 0x1c, 0x66):  # chunk, read size and head variations
        seeds["raw_%02x" % cfg] = bytes([cfg]) + body
    seeds["raw_two_members"] = b"\x00" + gz(plain[:700]) + gz(plain[700:])
    seeds["raw_empty_member"] = b"\x02" + gz(b"") + body
    seeds["raw_zeros_after"] = b"\x04" + body + b"\0" * 300
    seeds["raw_zeros_then_member"] = b"\x00" + body + b"\0\0" + body
    seeds["raw_garbage_after"] = b"\x00" + body + b"PK\x03\x04"
    seeds["raw_truncated"] = b"\x08" + body[:-5]
    seeds["raw_bad_crc"] = b"\x00" + body[:-8] + bytes(8)
    seeds["raw_fhcrc_name"] = b"\x00" + (b"\x1f\x8b\x08\x0a" + bytes(6) + b"name\0" + b"\xff\xff" +
                                      body[10:])
    seeds["raw_stored_level0"] = b"\x1a" + gzip.compress(plain, 0)
    split = struct.pack(">H", 600)
    for cfg in (0x01, 0x81, 0xa1, 0xc1, 0x41, 0x5f):
        seeds["wrap_%02x" % cfg] = bytes([cfg]) + split + struct.pack(">H", 37) + b"\x10" + plain
    return seeds


URL_SEEDS = [
    "train-{000000..000009}.tar",
    "train-{0..9}.tar",
    "/data/shards/s-{00..15..3}.tar.gz",
    "file:///data/{train,val}/part-{000..003}.tar",
    "{a,b,c}",
    "{a,{b,c},d}-{1..2}",
    "x{a,{b,{c,d}}}y",
    "{5..1}",
    "{-3..3}",
    "{-05..05}",
    "{0..10..-2}",
    "{10..0..3}",
    "pre{,fix}",
    "{,}",
    "{a}",
    "{}",
    "{",
    "}",
    "a}{b,c}",
    "{a,b}}",
    "{{a,b}",
    "{1..}",
    "{..2}",
    "{1..2..0}",
    "{1..2..}",
    "{+1..+3}",
    "{ 1.. 3}",
    "{1..3}{a,b}{x,y}",
    "{0..9}{0..9}",
    "{99999999999999999999..1}",
    "{9223372036854775800..9223372036854775805}",
    "{00000000000000000000..2}",
    "plain-url.tar",
    "s3://bucket/path/{00000..00002}.tar",
    "pipe:curl -s http://host/{a,b}.tar",
    "pipe:env AWS_SECRET_ACCESS_KEY=abc sh -c 'cat \"$0\"' x.tar --password=p 'a b'",
    "pipe:curl -H 'Authorization: Bearer t' -H Cookie:\\ c=d --user u:p 'https://u:p@h/x?sig=s'",
    "pipe:tool \"PASSWORD=a\\\"b\" -u 'x y' --token 'unterminated",
    "",
    "@list.txt",
    "{" * 40 + "a,b" + "}" * 40,
    "{a,b}" * 8,
    "a" * 300 + "{1..2}",
]


LIST_XML_SEEDS = [
    '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
    'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>train/</Prefix>'
    '<KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>'
    '<NextContinuationToken>1yiAB+/=</NextContinuationToken>'
    '<Contents><Key>train/shard-0.tar</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>'
    '<ETag>&quot;d41d8&quot;</ETag><Size>10240</Size><StorageClass>STANDARD</StorageClass>'
    '</Contents><Contents><Key>train/a&amp;b &lt;c&gt; &#233;.tar</Key><Size>1</Size></Contents>'
    '</ListBucketResult>',
    '<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>',
    '<ListBucketResult><Contents><Key><![CDATA[x]]>/y.tar</Key></Contents>'
    '<CommonPrefixes><Prefix>p/</Prefix></CommonPrefixes></ListBucketResult>',
    '<?xml version="1.0"?><Error><Code>AccessDenied</Code><Message>no</Message></Error>',
    '<ListBucketResult><Contents><Key></Key></Contents></ListBucketResult>',
]


_V2 = '{"format": "stoker-index", "version": 2, '
# Dataset index files (index_json.h): valid ones of each shape, and the
# refusals an index meets (unknown keys, wrong types, nesting, offsets).
INDEX_SEEDS = [
    _V2 + '"samples": 3, "shards": [{"url": "a.tar", "samples": 3, "size": 4096, '
    '"mtime_ns": 1700000000123456789, "offsets": [0, 1024, 2048]}]}',
    _V2 + '"samples": 5, "shards": [{"url": "http://h/b.tar.gz", "samples": 5, "size": 99, '
    '"etag": "\\"abc-1\\""}, {"url": "pipe:cat x", "samples": 0, "offsets": []}]}',
    _V2 + '"shards": []}',
    '{"format": "stoker-index", "version": 1, "shards": []}',
    _V2 + '"shards": [], "junk": [0, 0, 0]}',
    _V2 + '"shards": [[[[]]]]}',
    _V2 + '"shards": [{"url": "a", "samples": 2, "size": 1024, "offsets": [0, 1024]}]}',
    _V2 + '"shards": [{"url": "a", "samples": 1.5}]}',
    _V2 + '"samples": 18446744073709551615, "shards": [{"url": "a", "samples": '
    '18446744073709551615}, {"url": "b", "samples": 1}]}',
    '[' * 64,
    # Version 3: URLs redacted, told apart by a tag under the file's key;
    # a version 2 URL with credentials, redacted and tagged on reading.
    '{"format": "stoker-index", "version": 3, "samples": 2, '
    '"url_key": "00112233445566778899aabbccddeeff", "shards": [{"url": '
    '"http://***@h/a.tar?sig=***", "url_tag": "ffeeddccbbaa99887766554433221100", "samples": 1}, '
    '{"url": "http://***@h/a.tar?sig=***", "url_tag": "0123456789abcdef0123456789abcdef", '
    '"samples": 1}]}',
    _V2 + '"shards": [{"url": "http://u:p@h/a.tar?X-Amz-Signature=s", "samples": 1}]}',
    _V2 + '"shards": [{"url": "a", "url_tag": "00", "samples": 1}]}',
]

# fuzz_aws_config: byte 0 even = config file, odd = credentials file.
AWS_CONFIG_SEEDS = [
    b"\0# shared config\n[default]\nregion = eu-west-3\n\n[profile train]\n"
    b"role_arn = arn:aws:iam::123456789012:role/train\nsource_profile = base\n"
    b"s3 =\n    max_concurrent_requests = 20\n\n    addressing_style = path\n"
    b"[sso-session corp]\nsso_region = us-east-1\n",
    b"\0[profile \"two words\"]\nCredential_Process = /bin/helper 'a b' \"c\\\"d\" e\\ f\n"
    b"; comment\n  # indented comment\nkey: value # not a comment\n",
    b"\1[base]\r\naws_access_key_id = AKID\r\naws_secret_access_key = S=1:2\r\n"
    b"aws_session_token =\r\n[ spaced ]\rk=v\r",
    b"\1k = before any section\n",
    b"\0[default]\nno delimiter here\n",
    b"\1[a]\nk=1\nK=2\n",
    b"\0[profile a]\n[profile  a ]\n",
    b"\0[profile 'open quote]\n[profile a b]\n[profilex y]\n[]\n[x]]\n= v\n",
]


def main(argv):
    args = argv[1:]
    stamp = None
    if len(args) >= 2 and args[0] == "--stamp":
        stamp = args[1]
        args = args[2:]
    if len(args) != 1:
        sys.stderr.write(__doc__)
        return 2
    out = args[0]
    for sub in ("shard", "urls", "list_xml", "gzip", "index", "aws_config"):
        path = os.path.join(out, sub)
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.makedirs(path)
    seeds = shard_seeds()
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, "shard", name), "wb") as f:
            f.write(data)
    for name, data in sorted(gzip_seeds().items()):
        with open(os.path.join(out, "gzip", name), "wb") as f:
            f.write(data)
    for i, pattern in enumerate(URL_SEEDS):
        with open(os.path.join(out, "urls", "seed%03d" % i), "wb") as f:
            f.write(pattern.encode())
    for i, page in enumerate(LIST_XML_SEEDS):
        with open(os.path.join(out, "list_xml", "seed%03d" % i), "wb") as f:
            f.write(page.encode())
    for i, text in enumerate(AWS_CONFIG_SEEDS):
        with open(os.path.join(out, "aws_config", "seed%03d" % i), "wb") as f:
            f.write(text)
    for i, text in enumerate(INDEX_SEEDS):
        with open(os.path.join(out, "index", "seed%03d" % i), "wb") as f:
            f.write(text.encode())
    images, sources = write_image_seeds(out)
    if stamp is not None:
        with open(stamp, "w") as f:
            f.write("%d shard seeds, %d url seeds, %d image seeds from %d images\n"
                    % (len(seeds), len(URL_SEEDS), images, sources))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
