# Sums an ncu --csv --page raw log by kernel name over the launches from the SKIP-th k_embed_hc on
# (argv[2], default 1: the warm-up pass left out): calls, time, DRAM bytes, share of the sum.
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
skip = int(sys.argv[2]) if len(sys.argv) > 2 else 1
h = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
hd = rows[h]; ki = hd.index('Kernel Name'); ti = hd.index('gpu__time_duration.sum'); bi = hd.index('dram__bytes.sum')
agg = collections.defaultdict(lambda: [0, 0.0, 0.0]); seen = 0
for r in rows[h + 2:]:
    if len(r) <= max(ki, ti, bi): continue
    if 'k_embed_hc' in r[ki]: seen += 1
    if seen <= skip: continue
    try: t = float(r[ti].replace(',', '')); b = float(r[bi].replace(',', ''))
    except ValueError: continue
    a = agg[r[ki][:90]]; a[0] += 1; a[1] += t; a[2] += b
unit = rows[h + 1][ti]; bunit = rows[h + 1][bi]
tot = sum(a[1] for a in agg.values())
print('time unit', unit, 'bytes unit', bunit, 'total', tot, 'passes counted', seen - skip)
for k, a in sorted(agg.items(), key=lambda kv: -kv[1][1])[:45]:
    print('%8d %14.1f %5.1f%% %14.1f  %s' % (a[0], a[1], 100 * a[1] / tot, a[2], k))
