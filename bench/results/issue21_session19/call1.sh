# Session 19 call 1: the new top-k (11 + 11 + 10-bit radix select, warp-parallel digit pick, warp-segment
# placement; the same picks) and indexer scores (a warp per token, S^T = K Q^T, one barrier a tile) tested, the session-18 build (05bddea, OLD) and this one side by side on
# 4 layers x 256 experts, then where a 128K pass's attention and indexer time goes (ncu per kernel)
# and two kernels' limiters at 32K (ncu full sections on one launch each: the CSA layer's attention, the scores).
source scripts/pdb_carry.sh && pdb_carry_unpack .cache/devcarry_old && mv /tmp/devcarry /tmp/devcarry_old; OLD=/tmp/devcarry_old/bin
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin; D=bench/results/issue21_session19
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
for t in test_cuda_v4_ops test_cuda_v4_index test_cuda_v4_engine; do $B/$t > $OUT/$t.log 2>&1; echo "$t rc=$?"; grep -E "PASSED|FAILED|topk|Failure|32K-token" $OUT/$t.log | tail -5; done
for b in $OLD $B; do echo "[$b]"; $b/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 profile; done 2>&1 | tee $OUT/bench_4x256.log | grep -E "^\[|time=|profile" | cut -c1-250
M="--clock-control none --cache-control none"
timeout 120 ncu $M --csv --page raw --metrics gpu__time_duration.sum,dram__bytes.sum \
  --kernel-name regex:'.*(k_embed_hc|index|topk|attn_tc16|heads_norm|to_bf16).*' \
  $B/cuda_v4_bench seeded v4-flash 4 256 3 131072 bf16 60 > $OUT/ncu128k.csv 2> $OUT/ncu128k.err; echo "ncu rc=$?"; tail -2 $OUT/ncu128k.err
python3 $D/ncu_pass.py $OUT/ncu128k.csv > $OUT/ncu128k_summary.txt; head -14 $OUT/ncu128k_summary.txt | cut -c1-160
for k in "k_v4_attn_tc16 2" "k_v4_index_tc 0"; do set -- $k
  timeout 70 ncu $M --set full --kernel-name regex:".*$1.*" --launch-skip $2 --launch-count 1 \
    $B/cuda_v4_bench seeded v4-flash 4 256 3 32768 bf16 60 > $OUT/full_$1.txt 2>&1; echo "ncu $1 rc=$?"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|One or More|No Eligible|L2 Hit|Executed Ipc A|Bank" $OUT/full_$1.txt | head -16
done
xz -9 $OUT/ncu128k.csv
