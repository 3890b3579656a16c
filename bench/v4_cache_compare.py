#!/usr/bin/env python3
"""v4_cache_compare: a DeepSeek-V4 store of f32 blocks (block format 1, `official` before D36)
against a store of compact blocks (format 2: FP8 / FP4 rows, pdb_v4_rows.h) of the same prompts:
blocks are matched by (block_index, tokens); every compact row is decoded as docs/formats/block.md
describes it (written here from that text, not from the C code) and compared bit for bit with the
f32 row; the f32 pools (overlap halves) byte for byte. Standard library only.
usage: v4_cache_compare.py OLD_CACHE_DIR NEW_CACHE_DIR HEAD_DIM ROPE_DIM INDEX_HEAD_DIM"""
import glob, json, os, struct, sys

def read_block(path):
    b = open(path, "rb").read()
    n = struct.unpack_from("<Q", b, 0)[0]
    hdr = json.loads(b[8:8 + n])
    meta = hdr.pop("__metadata__")
    data = b[8 + n:]
    t = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in hdr.items()}
    return meta, t

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

def e4m3(c):
    s = -1.0 if c & 0x80 else 1.0
    e, m = (c >> 3) & 15, c & 7
    if e == 15 and m == 7: return float("nan")
    if e == 0: return s * m * 2.0 ** -9
    return s * (1 + m / 8) * 2.0 ** (e - 7)

def f32(x):  # round to f32 (the C code multiplies in f32; products of these are exact in f32 anyway)
    return struct.unpack("<f", struct.pack("<f", x))[0]

def scale(e):
    return 2.0 ** (e - 127)

def decode_fp8(row, hd, rope):
    n = hd - rope
    rot = list(struct.unpack_from("<%df" % rope, row, 0))
    codes, scales = row[4 * rope:4 * rope + n], row[4 * rope + n:4 * rope + n + n // 64]
    return [f32(e4m3(codes[i]) * scale(scales[i // 64])) for i in range(n)] + rot

def decode_fp4(row, d):
    out = []
    for b in range(d // 32):
        s = scale(row[d // 2 + b])
        for m in range(16):
            p = row[b * 16 + m]
            out += [f32(E2M1[p & 15] * s), f32(E2M1[p >> 4] * s)]
    return out

def bits(v):
    return struct.pack("<%df" % len(v), *v)

def main():
    old, new, hd, rope, ihd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    def index(d):
        r = {}
        for p in glob.glob(os.path.join(d, "*", "*.pdbblk")):
            m, t = read_block(p)
            r[(m["block_index"], t["tokens"][2])] = (m, t, p)
        return r
    a, b = index(old), index(new)
    print("blocks: %d old (format %s), %d new (format %s), %d matched by index and tokens" % (
        len(a), ",".join(sorted({m["version"] for m, _, _ in a.values()})), len(b),
        ",".join(sorted({m["version"] for m, _, _ in b.values()})), len(set(a) & set(b))))
    bad = rows = vals = 0
    per = {}
    for k in sorted(set(a) & set(b)):
        ma, ta, _ = a[k]
        mb, tb, _ = b[k]
        for name, (dt, shape, raw) in ta.items():
            if name == "tokens": continue
            dtn, shn, rawn = tb[name]
            L, R, W = shape
            if dtn == "F32":
                ok = raw == rawn
                bad += not ok
                per.setdefault(name, [0, 0, "f32 bytes"])
                per[name][0] += L * R; per[name][1] += (not ok) * L * R
                continue
            rb = shn[2]
            for i in range(L * R):
                ref = raw[i * 4 * W:(i + 1) * 4 * W]
                row = rawn[i * rb:(i + 1) * rb]
                got = decode_fp4(row, W) if name == "ikeys" else decode_fp8(row, hd, rope)
                same = bits(got) == ref
                rows += 1; vals += W
                per.setdefault(name, [0, 0, "%s rows of %d bytes (f32 %d)" % ("FP4" if name == "ikeys" else "FP8", rb, 4 * W)])
                per[name][0] += 1; per[name][1] += not same
                bad += not same
    for name, (n, nb, what) in per.items():
        print("  %-9s %6d rows, %d differ  (%s)" % (name, n, nb, what))
    print("compact rows decoded: %d rows, %d values; rows not bit-identical to the f32 blocks: %d" % (rows, vals, bad))
    return 1 if bad or not (set(a) & set(b)) else 0

sys.exit(main())
