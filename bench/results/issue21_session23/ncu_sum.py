"""ncu_sum: an ncu --csv report of gpu__time_duration.sum for cuda_v4_bench with one prompt length -> the timed
forward's kernels, summed by kernel name, largest first, in ms. Every engine pass starts with the one kernel
whose name contains 'embed'; the warm-up runs one pass (of the engine's pass bound), so with 3 passes seen the
timed forward is the last 2, with 2 the last 1."""
import csv, sys
rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * 1e-6))
starts = [i for i, (k, _) in enumerate(rows) if "embed" in k]
if not starts:
    sys.exit("ncu_sum: no embed kernel in the report")
P = len(starts) - 1
if P < 1:
    sys.exit('ncu_sum: fewer than 2 passes')
last = rows[starts[-P]:]
tot = {}
cnt = {}
for k, ms in last:
    k = k[:110]
    tot[k] = tot.get(k, 0) + ms
    cnt[k] = cnt.get(k, 0) + 1
print(f"launches {len(last)} of {len(rows)}; passes seen {len(starts)}, timed {P}; kernel time {sum(tot.values()):.2f} ms")
for k in sorted(tot, key=lambda k: -tot[k]):
    print(f"{tot[k]:9.3f} ms {cnt[k]:6d}  {k}")
