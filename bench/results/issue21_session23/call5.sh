# Session 23 call 5: the table rows of call 4's build on this card. V2-Lite at full size (27 layers, 64 experts,
# bf16; bench/gpu_prefill.sh: the ceiling, the engine at 8K / 32K / 128K, BASE (281e922) on the same checkpoint at 8K
# and 32K, transformers 5.17 at 8K and 32K: the peer) -> table_v2/; the V4 rows again (bench/gpu_prefill_v4.sh,
# 4 layers x 256 experts, and the 4-layer 8-expert checkpoint with its peer) -> table_v4/. Each folder comes back
# as one archive.
source scripts/pdb_carry.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
OUT=$OUT/table_v2 OLD_ARCHIVE=$PWD/.cache/devcarry_base/devcarry_base.tar.xz timeout 420 bash bench/gpu_prefill.sh 2>&1 | tail -6
OUT=$OUT/table_v4 LAYERS=4 timeout 150 bash bench/gpu_prefill_v4.sh 2>&1 | tail -6
cd $OUT && for d in table_v2 table_v4; do [ -d $d ] && tar cJf $d.tar.xz $d && rm -rf $d; done; ls -la $OUT
