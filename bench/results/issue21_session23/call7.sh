# Session 23 call 7: the final tree's device validation (tools/cuda_validate.sh run: the V2 and V4 tests, the V2
# bench, pool-validate for both architectures on the GPU), logs in one archive.
OUT=$OUT/validate timeout 230 bash tools/cuda_validate.sh run > /dev/null 2>&1; echo "validate rc=$?"
cat $OUT/validate/rc.txt 2>/dev/null; grep -hE "PASSED|FAILED|PASS|FAIL" $OUT/validate/*.log 2>/dev/null | sort | uniq -c | head -20
(cd $OUT && tar cJf validate.tar.xz validate && rm -rf validate)
