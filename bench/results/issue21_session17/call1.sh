# Session 17 call 1: where the time goes inside a pass, per kernel (ncu, clocks and caches left alone)
source scripts/pdb_carry.sh && pdb_carry_unpack .cache/devcarry
B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
$B/cuda_v4_bench seeded v4-flash 2 256 3 16384 bf16 60 profile 2>&1 | tee $OUT/bench_2x256.log | grep -v "^$"
timeout 420 ncu --clock-control none --cache-control none --csv --page raw --metrics gpu__time_duration.sum,dram__bytes.sum \
  $B/cuda_v4_bench seeded v4-flash 2 256 3 16384 bf16 60 > $OUT/ncu_2x256.csv 2> $OUT/ncu.err; echo "ncu rc=$?"
tail -3 $OUT/ncu.err; wc -l $OUT/ncu_2x256.csv
python3 - $OUT/ncu_2x256.csv <<'PY' | tee $OUT/ncu_summary.txt
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
h = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
hd = rows[h]; ki = hd.index('Kernel Name'); ti = hd.index('gpu__time_duration.sum'); bi = hd.index('dram__bytes.sum')
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for r in rows[h + 2:]:
    if len(r) <= max(ki, ti, bi): continue
    try: t = float(r[ti].replace(',', '')); b = float(r[bi].replace(',', ''))
    except ValueError: continue
    a = agg[r[ki][:90]]; a[0] += 1; a[1] += t; a[2] += b
unit = rows[h + 1][ti]; bunit = rows[h + 1][bi]
tot = sum(a[1] for a in agg.values())
print('time unit', unit, 'bytes unit', bunit, 'total', tot)
for k, a in sorted(agg.items(), key=lambda kv: -kv[1][1])[:45]:
    print('%8d %14.1f %5.1f%% %14.1f  %s' % (a[0], a[1], 100 * a[1] / tot, a[2], k))
PY
