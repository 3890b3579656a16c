#!/usr/bin/env python3
"""gpu_prefill: the GPU prefill table's measured columns that need torch, and the CSV.

  gpu_prefill.py ceiling                      bf16 dense GEMM TFLOP/s on this GPU (torch.matmul,
                                              8192^3, median of 20 after warm-up)
  gpu_prefill.py peer MODEL_DIR T [T ...]     transformers (AutoModelForCausalLM, bf16, sdpa; eager
                                              where the architecture has no sdpa path, as
                                              deepseek_v4) prefill tok/s of one prompt of T random
                                              tokens (logits of the last position only)
  gpu_prefill.py attn T [T ...]               torch SDPA causal attention alone on V2-Lite's head
                                              shapes (16 heads, q/k 192, v 128, bf16; the backend
                                              torch picks), TFLOP/s counted as cuda_attn_bench does
  gpu_prefill.py flops MODEL_DIR T            model GFLOP per token at prompt length T
  gpu_prefill.py csv ARGS...                  one CSV row (see row())

Model GFLOP per token (DeepSeek-V2, counted from config.json, the model's own formulation, not
our engine's absorbed one): every projection (q or q_a/q_b, kv_a, kv_b, o), the attention
scores (qk_nope + qk_rope dims) and values (v_head_dim) against (T + 1) / 2 keys on average
(causal), the dense MLPs, per MoE layer the router and the top-k + shared experts; the LM head
is left out (a prefill computes logits for the last position only). Prints only what it measured
or counted.
"""
import json
import os
import statistics
import sys
import time


def flops_per_token(cfg, T):
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    kvl, qlr = cfg["kv_lora_rank"], cfg.get("q_lora_rank") or 0
    qk = nope + rope
    keys = (T + 1) / 2
    attn = (2 * H * qlr + 2 * qlr * nh * qk) if qlr else 2 * H * nh * qk
    attn += 2 * H * (kvl + rope) + 2 * kvl * nh * (nope + v) + 2 * nh * v * H
    attn += 2 * nh * qk * keys + 2 * nh * v * keys
    L, dense = cfg["num_hidden_layers"], cfg.get("first_k_dense_replace", 0)
    E, K = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    Im, ns, I = cfg["moe_intermediate_size"], cfg.get("n_shared_experts") or 0, cfg["intermediate_size"]
    mlp_dense = 3 * 2 * H * I
    mlp_moe = 2 * H * E + (K + ns) * 3 * 2 * H * Im
    total = L * attn + min(dense, L) * mlp_dense + max(L - dense, 0) * mlp_moe
    return total / 1e9


def ceiling():
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    t = statistics.median(times)
    print(f"gpu-ceiling bf16_gemm n={n} median_s={t:.6f} tflops={2 * n ** 3 / t / 1e12:.1f}")


def peer(model_dir, Ts):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    t0 = time.time()
    impl = "sdpa"
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation=impl)
    except ValueError as e:  # deepseek_v4 in transformers 5.17 has no sdpa path: its eager attention
        print(f"gpu-peer sdpa unavailable ({str(e).splitlines()[0][:120]}): eager")
        impl = "eager"
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation=impl)
    model = model.cuda()
    model.eval()
    print(f"gpu-peer transformers={transformers.__version__} torch={torch.__version__} attn={impl} loaded_s={time.time() - t0:.1f}")
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    import contextlib
    ac = contextlib.nullcontext
    with torch.no_grad():
        warm = torch.randint(0, V, (1, 1024), generator=g).cuda()
        try:
            model(warm, use_cache=False, logits_to_keep=1)
        except RuntimeError as e:  # deepseek_v4: f32 hidden states meet bf16 weights; autocast runs them in bf16
            print(f"gpu-peer bf16 forward failed ({str(e).splitlines()[0][:100]}): under torch.autocast(bfloat16)")
            ac = lambda: torch.autocast("cuda", dtype=torch.bfloat16)
            with ac():
                model(warm, use_cache=False, logits_to_keep=1)
        torch.cuda.synchronize()
        for T in Ts:
            ids = torch.randint(0, V, (1, T), generator=g).cuda()
            try:
                torch.cuda.synchronize()
                s = time.time()
                with ac():
                    model(ids, use_cache=False, logits_to_keep=1)
                torch.cuda.synchronize()
                dt = time.time() - s
                print(f"gpu-peer T={T} time_s={dt:.3f} tok_s={T / dt:.0f}", flush=True)
            except torch.OutOfMemoryError as e:
                print(f"gpu-peer T={T} out_of_memory ({str(e).splitlines()[0]})", flush=True)
                torch.cuda.empty_cache()


def attn(Ts, heads=16, dqk=192, dv=128):
    import torch
    import torch.nn.functional as F
    for T in Ts:
        q = torch.randn(1, heads, T, dqk, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, heads, T, dqk, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, heads, T, dv, device="cuda", dtype=torch.bfloat16)
        flop = heads * 2.0 * (dqk + dv) * T * (T + 1) / 2
        for _ in range(2):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        times = []
        for _ in range(5):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        t = min(times)
        print(f"gpu-attn-peer torch={torch.__version__} T={T} heads={heads} dqk={dqk} dv={dv} best_s={t:.5f} "
              f"tflops={flop / t / 1e12:.1f}", flush=True)
        del q, k, v
        torch.cuda.empty_cache()


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd = sys.argv[1]
    if cmd == "ceiling":
        ceiling()
    elif cmd == "peer":
        peer(sys.argv[2], [int(x) for x in sys.argv[3:]])
    elif cmd == "attn":
        attn([int(x) for x in sys.argv[2:]])
    elif cmd == "flops":
        with open(os.path.join(sys.argv[2], "config.json")) as f:
            print(f"{flops_per_token(json.load(f), int(sys.argv[3])):.3f}")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
