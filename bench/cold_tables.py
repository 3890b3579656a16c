#!/usr/bin/env python3
"""cold_tables.py: the README's two cold-prompt tables (markdown) from a bench/sweep_cold.sh output
directory's bench_cold.csv, numbers only as the CSV has them (nothing measured here).

    bench/cold_tables.py DIR      # DIR: a sweep --out directory (bench_cold.csv inside)

Table 1, cold prompts: per prompt size, the native decoder's and the bridged time to first token
and their ratio (bridged / native), and whether the two answers were equal (bench-cold's
answer_equal). A bridged TTFT is shown only for a `bridged` row (verdict complete).
Table 2, per prompt: the prefill engine's tok/s (prompt tokens / the verdict's engine_ms), the
bridged end-to-end time (total_s of the stream), TTFT / engine time (the bridge's overhead), blocks
written / requested, the decoder's cached tokens, the verdict, and the prefill server's peak RSS.
Rows pair up as bench-cold --native writes them: a front row followed by its native row; the warm
rows (verdict `skipped warm`) are left out.
"""
import csv
import sys


def rows_of(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def pairs(rows):
    out, i = [], 0
    while i < len(rows):
        r = rows[i]
        if r["mode"] in ("bridged", "front") and r["verdict"] != "skipped warm":
            nat = rows[i + 1] if i + 1 < len(rows) and rows[i + 1]["mode"] == "native" else None
            out.append((r, nat))
            i += 2 if nat else 1
        else:
            i += 1
    return out


def num(s, fmt):
    return fmt % float(s) if s not in ("", None) else "-"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ps = pairs(rows_of(sys.argv[1] + "/bench_cold.csv"))
    print("| prompt tokens | native TTFT s | bridged TTFT s | bridged / native | answers |")
    print("|---:|---:|---:|---:|---|")
    for b, n in ps:
        bt = b["ttft_s"] if b["mode"] == "bridged" else ""
        nt = n["ttft_s"] if n else ""
        ratio = "%.3f" % (float(bt) / float(nt)) if bt and nt else "-"
        eq = {"1": "equal", "0": "DIFFERENT"}.get(n.get("answer_equal", "") if n else "", "-")
        print("| %s | %s | %s | %s | %s |" % (format(int(b["prompt_tokens"]), ","), num(nt, "%.2f"), num(bt, "%.2f"), ratio, eq))
    print()
    print("| prompt tokens | engine tok/s | end-to-end s | TTFT / engine | blocks | cached tokens | verdict | prefill peak RSS MB |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|")
    for b, _ in ps:
        p, e = int(b["prompt_tokens"]), b["engine_ms"]
        tps = "%.0f" % (p / (float(e) / 1000)) if e else "-"
        over = "%.4f" % (float(b["ttft_s"]) / (float(e) / 1000)) if e and b["ttft_s"] else "-"
        blocks = "%s/%s" % (b["blocks_written"], b["blocks_requested"]) if b["blocks_written"] else "-"
        rss = "%.1f" % (float(b["prefill_peak_rss_bytes"]) / 1e6) if b["prefill_peak_rss_bytes"] else "-"
        print("| %s | %s | %.2f | %s | %s | %s | %s | %s |" % (format(p, ","), tps, float(b["total_s"]), over, blocks,
                                                             format(int(b["cached_tokens"]), ","), b["verdict"], rss))


if __name__ == "__main__":
    main()
