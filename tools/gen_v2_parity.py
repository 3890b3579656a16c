#!/usr/bin/env python3
"""Generate DeepSeek-V2 (MLA) golden parity data with Hugging Face transformers.

For each case below this script builds a small random DeepseekV2ForCausalLM of
deliberately odd shapes, perturbs every parameter (norm weights around 1,
everything else N(0, 0.08)), saves it with save_pretrained (float32
safetensors), reloads it from disk, and records in float32 on the CPU:

  input_ids      I32 [T]      seeded random token ids
  prefill_logits F32 [T, V]   logits of one full forward over input_ids
  decode_tokens  I32 [N]      greedy tokens fed one at a time through the KV cache:
                              decode_tokens[0] = argmax(prefill_logits[T-1]),
                              decode_tokens[i+1] = argmax(decode_logits[i])
  decode_logits  F32 [N, V]   logits after feeding decode_tokens[i] at position T+i

plus a few debugging aids (rope inverse frequencies, the rope cos/sin factor,
the softmax scale, and the residual stream after each layer for the first 16
positions). As a self-check the decode logits are recomputed with a full,
uncached forward over input_ids + decode_tokens and the difference is reported.

Output layout (one folder per case):
  <out>/<case>/config.json         as written by save_pretrained
  <out>/<case>/model.safetensors   as written by save_pretrained
  <out>/<case>/golden.safetensors  the tensors above (metadata: versions, case)
  <out>/<case>/notes.json          versions, description, tensor list, checks

Usage: python3 gen_v2_parity.py --out DIR [--src-out DIR] [--cases a,b]
Needs torch, transformers (5.x, models/deepseek_v2) and safetensors.
"""

import argparse
import copy
import inspect
import json
import math
import os
import shutil
import sys
import time
import traceback

import torch

from pdb_parity_common import (force_eager_experts, fresh_model, greedy_argmax_margin, greedy_decode, load_model,
                               log, save_checkpoint, tensor_listing, uncached_diffs, versions)

N_DECODE = 8
HIDDEN_DUMP_POS = 16
ROUTER_GAP_MIN = 1e-5   # smallest accepted margin at the top-k boundary of router probs
ARGMAX_GAP_MIN = 2e-3   # smallest accepted top1-top2 logit margin during greedy decode
MAX_SEED_TRIES = 12


def yarn(factor, orig, mscale, mscale_all_dim, theta=10000.0):
    return {
        "rope_type": "yarn",
        "rope_theta": float(theta),
        "factor": float(factor),
        "original_max_position_embeddings": int(orig),
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": float(mscale),
        "mscale_all_dim": float(mscale_all_dim),
    }


# Each case: description, T (prompt length), seed, config kwargs.
CASES = {
    "a_yarn_noqlora": dict(
        desc="q_lora_rank null (plain q_proj); YaRN factor 8 over original 64 positions "
             "(T=200 > 64), mscale = mscale_all_dim = 0.707; greedy top-2 of 6 routed experts, "
             "norm_topk_prob false, 2 shared experts, routed_scaling_factor 1.7; untied lm_head",
        T=200, seed=1001,
        cfg=dict(
            vocab_size=241, hidden_size=60, intermediate_size=100, num_hidden_layers=3,
            num_attention_heads=3, q_lora_rank=None, kv_lora_rank=40,
            qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=20,
            first_k_dense_replace=1, n_routed_experts=6, num_experts_per_tok=2,
            n_shared_experts=2, moe_intermediate_size=24, routed_scaling_factor=1.7,
            topk_method="greedy", norm_topk_prob=False,
            max_position_embeddings=512, rope_parameters=yarn(8, 64, 0.707, 0.707),
            tie_word_embeddings=False,
        ),
    ),
    "b_qlora_default_rope": dict(
        desc="q_lora_rank 36 (q_a_proj, q_a_layernorm, q_b_proj); default RoPE theta 10000 "
             "(no scaling), rope dim 16; greedy top-3 of 10 routed experts, norm_topk_prob true, "
             "1 shared expert, routed_scaling_factor 2.5; untied lm_head",
        T=210, seed=2002,
        cfg=dict(
            vocab_size=251, hidden_size=60, intermediate_size=100, num_hidden_layers=3,
            num_attention_heads=4, q_lora_rank=36, kv_lora_rank=40,
            qk_nope_head_dim=24, qk_rope_head_dim=16, v_head_dim=20,
            first_k_dense_replace=1, n_routed_experts=10, num_experts_per_tok=3,
            n_shared_experts=1, moe_intermediate_size=16, routed_scaling_factor=2.5,
            topk_method="greedy", norm_topk_prob=True,
            max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            tie_word_embeddings=False,
        ),
    ),
    "c_qlora_yarn_mscale": dict(
        desc="q_lora_rank 36; YaRN factor 40 over original 32 positions (T=200 > 32), "
             "mscale 1.0 != mscale_all_dim 0.8; greedy top-2 of 8 routed experts, "
             "norm_topk_prob true, 1 shared expert, routed_scaling_factor 1.7; 5 heads; untied",
        T=200, seed=3003,
        cfg=dict(
            vocab_size=277, hidden_size=60, intermediate_size=100, num_hidden_layers=3,
            num_attention_heads=5, q_lora_rank=36, kv_lora_rank=44,
            qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=20,
            first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2,
            n_shared_experts=1, moe_intermediate_size=20, routed_scaling_factor=1.7,
            topk_method="greedy", norm_topk_prob=True,
            max_position_embeddings=1280, rope_parameters=yarn(40, 32, 1.0, 0.8),
            tie_word_embeddings=False,
        ),
    ),
    "d_group_limited_tied": dict(
        desc="topk_method group_limited_greedy (8 experts in n_group 4, topk_group 2, top-3); "
             "4 layers with first_k_dense_replace 2; tie_word_embeddings true (no lm_head "
             "tensor); 4 heads; q_lora null; YaRN factor 4 over original 128 (T=192 > 128), "
             "mscale = mscale_all_dim = 0.707; rope dim 16, nope 16, v 24; 2 shared experts, "
             "routed_scaling_factor 2.5, norm_topk_prob false",
        T=192, seed=4004,
        cfg=dict(
            vocab_size=233, hidden_size=52, intermediate_size=90, num_hidden_layers=4,
            num_attention_heads=4, q_lora_rank=None, kv_lora_rank=32,
            qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=24,
            first_k_dense_replace=2, n_routed_experts=8, num_experts_per_tok=3,
            n_group=4, topk_group=2,
            n_shared_experts=2, moe_intermediate_size=20, routed_scaling_factor=2.5,
            topk_method="group_limited_greedy", norm_topk_prob=False,
            max_position_embeddings=512, rope_parameters=yarn(4, 128, 0.707, 0.707),
            tie_word_embeddings=True,
        ),
    ),
}

COMMON_CFG = dict(
    rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False, mlp_bias=False,
    initializer_range=0.02, bos_token_id=1, eos_token_id=2, use_cache=True,
)


def make_config(case):
    from transformers import DeepseekV2Config
    kw = dict(COMMON_CFG)
    kw.update(case["cfg"])
    return DeepseekV2Config(**kw)


def build_model(config):
    from transformers import AutoModelForCausalLM, DeepseekV2ForCausalLM
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    except Exception as e:  # older/newer signature
        log("  from_config(attn_implementation=eager) failed:", repr(e))
        model = DeepseekV2ForCausalLM(config)
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")
        else:
            model.config._attn_implementation = "eager"
    return model.float().eval()


def apply_official_v2_routing(model):
    """transformers 5.17 drops norm_topk_prob for deepseek_v2 (its router always scales by
    routed_scaling_factor). DeepSeek's own V2 code renormalises the top-k weights instead
    (weights / (sum + 1e-20), no scaling) when norm_topk_prob and top_k > 1; pdbridge follows
    DeepSeek. Patch each router so the goldens describe that rule. No-op when the flag is off."""
    if not getattr(model.config, "norm_topk_prob", False):
        return 0
    n = 0
    for mod in model.modules():
        if type(mod).__name__ != "DeepseekV2TopkRouter":
            continue
        orig = mod.forward

        def fwd(hidden_states, _orig=orig, _mod=mod):
            router_logits, w, idx = _orig(hidden_states)
            if _mod.top_k > 1:
                scores = router_logits.softmax(dim=-1, dtype=torch.float32)
                if _mod.topk_method == "group_limited_greedy":
                    pass  # weights come from the masked scores; gathering unmasked ones is equal for kept experts
                w = scores.gather(1, idx)
                w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
            return router_logits, w, idx

        mod.forward = fwd
        n += 1
    return n


def is_norm_param(name):
    parts = name.split(".")
    return len(parts) >= 2 and "norm" in parts[-2]


@torch.no_grad()
def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    kinds = {}
    for name, p in model.named_parameters():  # shared (tied) parameters appear once
        noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
        if is_norm_param(name):
            p.copy_(1.0 + 0.1 * noise)
            kinds[name] = "norm:1+N(0,0.1)"
        elif name.endswith("e_score_correction_bias"):
            p.zero_()
            kinds[name] = "zero"
        else:
            p.copy_(0.08 * noise)
            kinds[name] = "N(0,0.08)"
    return kinds


class Probe:
    """Hooks that record routing margins at MoE blocks and per-layer residual streams."""

    def __init__(self, model, config):
        self.config = config
        self.router_gaps = []
        self.hidden = None
        self.handles = []
        inner = model.model
        for layer in inner.layers:
            mlp = layer.mlp
            if hasattr(mlp, "gate") and hasattr(mlp, "experts"):
                self.handles.append(mlp.register_forward_pre_hook(self._moe_hook, with_kwargs=True))
        self.handles.append(inner.embed_tokens.register_forward_hook(self._hid_hook))
        for layer in inner.layers:
            self.handles.append(layer.register_forward_hook(self._hid_hook))

    def _moe_hook(self, mod, args, kwargs):
        h = args[0] if args else kwargs.get("hidden_states")
        if h is None:
            return
        x = h.reshape(-1, h.shape[-1]).float()
        probs = torch.softmax(x @ mod.gate.weight.float().t(), dim=-1)
        k = self.config.num_experts_per_tok
        if self.config.topk_method == "group_limited_greedy":
            ng, tg = self.config.n_group, self.config.topk_group
            gs = probs.view(probs.shape[0], ng, -1).max(dim=-1).values
            gsort = gs.sort(dim=-1, descending=True).values
            ggap = (gsort[:, tg - 1] - gsort[:, tg]).min().item()
            gidx = gs.topk(tg, dim=-1).indices
            gmask = torch.zeros_like(gs).scatter_(1, gidx, 1.0)
            emask = gmask.repeat_interleave(probs.shape[1] // ng, dim=1)
            scores = probs.masked_fill(emask == 0, 0.0)
            s = scores.sort(dim=-1, descending=True).values
            gap = min(ggap, (s[:, k - 1] - s[:, k]).min().item())
        else:
            s = probs.sort(dim=-1, descending=True).values
            gap = (s[:, k - 1] - s[:, k]).min().item()
        self.router_gaps.append(gap)

    def _hid_hook(self, mod, args, out):
        if self.hidden is None:
            return
        t = out[0] if isinstance(out, (tuple, list)) else out
        self.hidden.append(t[0, :HIDDEN_DUMP_POS].detach().float().cpu().clone())

    def remove(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def run_reference(model, config, input_ids, probe):
    """Prefill + greedy cached decode. Returns dict of tensors."""
    ids = input_ids.view(1, -1).long()
    probe.hidden = []
    out = model(input_ids=ids, use_cache=True)
    hidden = torch.stack(probe.hidden, 0)  # [L+1, 16, H]
    probe.hidden = None
    prefill = out.logits[0].float().clone()
    pkv = out.past_key_values
    toks, dlog = greedy_decode(model, prefill, pkv, N_DECODE)
    return {
        "prefill_logits": prefill,
        "decode_tokens": toks,
        "decode_logits": dlog,
        "hidden": hidden,
    }


def rope_info(model):
    inner = model.model
    re = inner.rotary_emb
    attn = inner.layers[0].self_attn
    info = {
        "rope_type": getattr(re, "rope_type", None),
        "rotary_attention_scaling": float(getattr(re, "attention_scaling", float("nan"))),
        "attn_softmax_scale": float(getattr(attn, "scaling", float("nan"))),
        "qk_head_dim_pow_-0.5": float((attn.qk_nope_head_dim + attn.qk_rope_head_dim) ** -0.5),
    }
    inv = re.inv_freq.detach().float().cpu().clone()
    return info, inv


@torch.no_grad()
def make_case(name, case, out_root, vers, gpu_check):
    from safetensors.torch import save_file
    cdir = os.path.join(out_root, name)
    T = case["T"]
    report = None
    for attempt in range(MAX_SEED_TRIES):
        seed = case["seed"] + 97 * attempt
        t0 = time.time()
        config = make_config(case)
        model = fresh_model(cdir, seed, lambda: build_model(config))
        kinds = perturb(model, seed + 1)
        save_checkpoint(model, cdir)
        # Reload from disk: the golden must describe exactly what a loader of these files sees.
        m2 = load_model(cdir)
        experts_impl = force_eager_experts(m2)
        patched = apply_official_v2_routing(m2)
        log(f"  official norm_topk_prob routing patched into {patched} routers")
        sd1, sd2 = model.state_dict(), m2.state_dict()
        roundtrip = 0.0
        missing = sorted(set(sd1) ^ set(sd2))
        for k in set(sd1) & set(sd2):
            roundtrip = max(roundtrip, (sd1[k].float() - sd2[k].float()).abs().max().item())
        del model
        cfg2 = m2.config
        g = torch.Generator().manual_seed(seed + 2)
        input_ids = torch.randint(0, cfg2.vocab_size, (T,), generator=g, dtype=torch.int64)
        probe = Probe(m2, cfg2)
        res = run_reference(m2, cfg2, input_ids, probe)
        rgap = min(probe.router_gaps) if probe.router_gaps else float("inf")
        agap_dec = greedy_argmax_margin(res)
        d_dec, d_pre = uncached_diffs(m2, input_ids, res, N_DECODE)
        probe.remove()
        ok = rgap >= ROUTER_GAP_MIN and agap_dec >= ARGMAX_GAP_MIN
        log(f"  [{name}] attempt {attempt} seed {seed}: router_gap_min={rgap:.3e} "
            f"argmax_gap_min={agap_dec:.3e} cached-vs-uncached decode={d_dec:.3e} prefill={d_pre:.3e} "
            f"roundtrip={roundtrip:.1e} key_mismatch={missing} experts={experts_impl} "
            f"({time.time() - t0:.1f}s)")
        if ok or attempt == MAX_SEED_TRIES - 1:
            break
    gpu = None
    if gpu_check and torch.cuda.is_available():
        try:
            mg = copy.deepcopy(m2).cuda()
            lg = mg(input_ids=input_ids.view(1, -1).cuda(), use_cache=False).logits[0].float().cpu()
            gpu = (lg - res["prefill_logits"]).abs().max().item()
            del mg
            log(f"  [{name}] GPU fp32 (tf32 off) prefill vs CPU: max|d|={gpu:.3e}")
        except Exception as e:
            log(f"  [{name}] GPU check failed: {e!r}")
    rinfo, inv = rope_info(m2)
    golden = {
        "input_ids": input_ids.to(torch.int32).contiguous(),
        "prefill_logits": res["prefill_logits"].contiguous(),
        "decode_tokens": res["decode_tokens"].contiguous(),
        "decode_logits": res["decode_logits"].contiguous(),
        "aux_hidden_first16": res["hidden"].contiguous(),
        "aux_rope_inv_freq": inv.contiguous(),
        "aux_rope_attention_scaling": torch.tensor([rinfo["rotary_attention_scaling"]], dtype=torch.float32),
        "aux_attn_softmax_scale": torch.tensor([rinfo["attn_softmax_scale"]], dtype=torch.float32),
    }
    meta = {
        "case": name,
        "description": case["desc"],
        "transformers": vers["transformers"],
        "torch": vers["torch"],
        "device": "cpu float32",
        "T": str(T), "N": str(N_DECODE),
        "decode_convention": "decode_tokens[0]=argmax(prefill_logits[T-1]); decode_logits[i] = logits "
                             "after feeding decode_tokens[i] at position T+i through the cache; "
                             "decode_tokens[i+1]=argmax(decode_logits[i])",
        "aux_hidden_first16": "[L+1,16,H]: index 0 = token embeddings, index l+1 = residual stream after "
                              "decoder layer l (before the final norm), positions 0..15 of the prefill",
    }
    save_file(golden, os.path.join(cdir, "golden.safetensors"), metadata=meta)
    rows, st_meta = tensor_listing(os.path.join(cdir, "model.safetensors"))
    with open(os.path.join(cdir, "config.json")) as f:
        cfg_json = json.load(f)
    notes = {
        "case": name, "description": case["desc"], "versions": vers,
        "seed": seed, "attempts": attempt + 1, "T": T, "N": N_DECODE,
        "vocab_size": cfg_json.get("vocab_size"),
        "experts_implementation": experts_impl,
        "compute": "CPU float32, attn_implementation=eager, experts_implementation=eager, model reloaded with from_pretrained from "
                   "the saved files",
        "init": "every parameter perturbed: RMSNorm weights 1+N(0,0.1), all others N(0,0.08) "
                "(router gate and fused/per-expert weights included)",
        "checks": {
            "max_abs_cached_vs_uncached_decode_logits": d_dec,
            "max_abs_prefill_vs_uncached_full_logits": d_pre,
            "min_router_topk_margin": rgap,
            "min_greedy_argmax_margin": agap_dec,
            "save_reload_max_abs_param_diff": roundtrip,
            "save_reload_state_dict_key_mismatch": missing,
            "gpu_fp32_prefill_vs_cpu_max_abs": gpu,
        },
        "hf_rope": rinfo,
        "rope_inv_freq": [float(v) for v in inv],
        "model_safetensors_metadata": st_meta,
        "tensors": rows,
        "param_init_counts": {v: sum(1 for x in kinds.values() if x == v) for v in sorted(set(kinds.values()))},
        "norm_params": sorted(k for k, v in kinds.items() if v.startswith("norm")),
        "golden_tensors": {k: [str(v.dtype), list(v.shape)] for k, v in golden.items()},
        "golden_conventions": meta,
        "tolerance": "C reference forward must match prefill_logits and decode_logits to max |d| <= 1e-3",
    }
    with open(os.path.join(cdir, "notes.json"), "w") as f:
        json.dump(notes, f, indent=1)
    size = sum(os.path.getsize(os.path.join(cdir, x)) for x in os.listdir(cdir))
    log(f"  [{name}] wrote {cdir} ({size / 1e6:.2f} MB): {sorted(os.listdir(cdir))}")
    return notes, size


def dump_sources(dst):
    """Copy the transformers files that define the reference math (for reading only)."""
    import transformers
    os.makedirs(dst, exist_ok=True)
    base = os.path.dirname(transformers.__file__)
    for rel in ["models/deepseek_v2/modeling_deepseek_v2.py",
                "models/deepseek_v2/configuration_deepseek_v2.py",
                "models/deepseek_v2/modular_deepseek_v2.py",
                "modeling_rope_utils.py", "conversion_mapping.py", "core_model_loading.py",
                "integrations/moe.py"]:
        p = os.path.join(base, rel)
        if os.path.exists(p):
            shutil.copy(p, os.path.join(dst, rel.replace("/", "__")))
    log("transformers at", base)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--src-out", default=None, help="copy the reference transformers sources here")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--no-gpu-check", action="store_true")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_default_dtype(torch.float32)
    vers = versions()
    log("versions:", json.dumps(vers))
    if args.src_out:
        try:
            dump_sources(args.src_out)
        except Exception:
            traceback.print_exc()
    os.makedirs(args.out, exist_ok=True)
    total, failed, summary = 0, [], {}
    for name in args.cases.split(","):
        log(f"== case {name}")
        try:
            notes, size = make_case(name, CASES[name], args.out, vers, not args.no_gpu_check)
            total += size
            summary[name] = notes["checks"]
            log(f"  [{name}] tensors:")
            for r in notes["tensors"]:
                log(f"    {r['name']} {r['dtype']} {r['shape']}")
            with open(os.path.join(args.out, name, "config.json")) as f:
                log(f"  [{name}] config.json:\n" + f.read())
            log(f"  [{name}] hf_rope: {json.dumps(notes['hf_rope'])}")
        except Exception:
            traceback.print_exc()
            failed.append(name)
    log("== summary")
    log(json.dumps(summary, indent=1))
    log(f"total size {total / 1e6:.2f} MB; failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
