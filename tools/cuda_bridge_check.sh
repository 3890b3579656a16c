#!/usr/bin/env bash
# cuda_bridge_check: a whole bridge through the CUDA prefill backend, checked against a native
# decoder (run on the GPU machine with the binaries staged by tools/cuda_validate.sh build, or
# here with PDB_CHECK_BACKEND=cpu). For each precision in PDB_CHECK_PRECISIONS (default
# "exact bf16"): a random "small" DeepSeek-V2 (PDB_CHECK_ARCH=deepseek_v4: the tiny V4; exact is its
# CPU engine's products on the GPU, bf16 its device-resident engine) with the decoder on
# --scheme none, a 700-token prompt of token ids bridged by a front (block 128) and answered
# natively by a second decoder; prints the
# verdict, whether the greedy tokens are identical and verify-blocks' summary of the bridged
# store against the native one. Exit 1 when the exact precision's blocks or tokens differ.
# Invariant: prints only what the programs reported.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${PDB_BIN:-}" ] && [ -x /tmp/devcarry/bin/pdbridge ]; then
    export PDB_BIN=/tmp/devcarry/bin/pdbridge LD_LIBRARY_PATH="/tmp/devcarry/lib:${LD_LIBRARY_PATH:-}"
fi
source "$ROOT/tests/common/pdb_e2e.sh"
pdb_e2e_init cudabridge
BACKEND=${PDB_CHECK_BACKEND:-cuda}
ARCH=${PDB_CHECK_ARCH:-deepseek_v2}
PRESET=small; [ "$ARCH" = deepseek_v4 ] && PRESET=tiny
"$BIN" make-model --arch "$ARCH" --preset $PRESET --seed 7 --vocab 4000 --out "$T/hf" >/dev/null
"$BIN" quantize --model "$T/hf" --out "$T/dec" --scheme none >/dev/null 2>&1
IDS=$(python3 -c "print(','.join(str((i * 7919 + 13) % 3990 + 5) for i in range(700)))")
BODY="{\"model\":\"dec\",\"prompt\":[${IDS}],\"max_tokens\":16,\"temperature\":0,\"return_token_ids\":true}"
# POST $BODY to $1/v1/completions; prints the generated token ids, the X-PD-Bridge verdict into $2
# (python's urllib: the staged libcurl on LD_LIBRARY_PATH can break the system's curl binary)
post() {
    python3 - "$1" "$2" "$BODY" <<'PY'
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/completions", data=sys.argv[3].encode(),
                             headers={"content-type": "application/json"})
with urllib.request.urlopen(req, timeout=300) as r:
    open(sys.argv[2], "w").write((r.headers.get("X-PD-Bridge") or "").split(";")[0])
    print(json.load(r)["choices"][0]["token_ids"])
PY
}
rc=0
for prec in ${PDB_CHECK_PRECISIONS:-exact bf16}; do
    rm -rf "$T/cn" "$T/cb"
    pdb_e2e_start native "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cn" --port 0 --block-size 128; NAT=$URL; NPID=$PID
    pdb_e2e_start dec "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cb" --port 0 --block-size 128; DEC=$URL; DPID=$PID
    pdb_e2e_start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend "$BACKEND" \
        --precision "$prec" --chunk 256; PRE=$URL; PPID_=$PID
    pdb_e2e_start front "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cb" \
        --port 0 --block-size 128 --min-bridge-tokens 256 --min-tail 64; FRONT=$URL; FPID=$PID
    BR=$(post "$FRONT" "$T/verdict.txt")
    VERDICT=$(cat "$T/verdict.txt")
    NA=$(post "$NAT" "$T/native.txt")
    set +e; VB=$("$BIN" verify-blocks "$T/cb" "$T/cn" 2>&1); VRC=$?; set -e
    SAME=no; [ "$BR" = "$NA" ] && SAME=yes
    echo "$ARCH backend $BACKEND precision $prec: verdict '$VERDICT'; greedy tokens identical to native: $SAME"
    echo "  verify-blocks bridged vs native (exit $VRC): $(echo "$VB" | tail -1)"
    if [ "$prec" = exact ] && { [ "$SAME" != yes ] || [ $VRC -ne 0 ] || [ "$VERDICT" != complete ]; }; then rc=1; fi
    kill $FPID $PPID_ $DPID $NPID 2>/dev/null || true
    wait $FPID $PPID_ $DPID $NPID 2>/dev/null || true
done
exit $rc
