"""pdb_parity_common: the pieces gen_v2_parity.py and gen_v4_parity.py share (logging, versions,
a fresh seeded model, saving and reloading a transformers checkpoint with eager attention and
experts, greedy cached decoding and its argmax margin, the cached-vs-uncached check, a
safetensors listing). Invariant: every function here is model-agnostic; what differs per
architecture stays in the generator scripts."""

import os
import shutil
import sys

import torch


def log(*a):
    print(*a, flush=True)


def versions():
    import transformers
    try:
        import safetensors
        st = safetensors.__version__
    except Exception:  # pragma: no cover
        st = "?"
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "safetensors": st, "python": sys.version.split()[0]}


def fresh_model(cdir, seed, build):
    """An empty folder cdir, then build() under torch.manual_seed(seed): one seed attempt's model."""
    if os.path.isdir(cdir):
        shutil.rmtree(cdir)
    os.makedirs(cdir)
    torch.manual_seed(seed)
    return build()


def save_checkpoint(model, cdir):
    """save_pretrained into cdir without generation_config.json (the goldens carry no sampling)."""
    model.save_pretrained(cdir)
    gc = os.path.join(cdir, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)


def load_model(path):
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", torch_dtype=torch.float32)
    return m.float().eval()


def force_eager_experts(model):
    """Use the plain per-expert loop (the default grouped_mm path needs 16-byte aligned rows).
    Returns the experts implementations now set (sorted names)."""
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
        except Exception as e:
            log("  set_experts_implementation(eager) failed:", repr(e))
    seen = set()
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if type(m).__name__.endswith("Experts") and cfg is not None:
            if getattr(cfg, "_experts_implementation", None) != "eager":
                cfg._experts_implementation = "eager"
            seen.add(getattr(cfg, "_experts_implementation", None))
    return sorted(str(x) for x in seen)


@torch.no_grad()
def greedy_decode(model, prefill, pkv, n_decode):
    """n_decode greedy tokens fed one at a time through the cache pkv after a prefill whose
    logits are prefill [T, V]: tokens[0] = argmax(prefill[T-1]), logits[i] after feeding
    tokens[i], tokens[i+1] = argmax(logits[i]). Returns (tokens I32 [N], logits F32 [N, V])."""
    toks, dlog = [], []
    nxt = int(prefill[-1].argmax())
    for _ in range(n_decode):
        toks.append(nxt)
        o = model(input_ids=torch.tensor([[nxt]], dtype=torch.long), past_key_values=pkv, use_cache=True)
        pkv = o.past_key_values
        lg = o.logits[0, -1].float().clone()
        dlog.append(lg)
        nxt = int(lg.argmax())
    return torch.tensor(toks, dtype=torch.int32), torch.stack(dlog, 0)


def greedy_argmax_margin(res):
    """Smallest top1-top2 logit margin over the rows greedy decoding chose from: the prefill's
    last row and every decode row but the last."""
    rows = torch.cat([res["prefill_logits"][-1:], res["decode_logits"][:-1]], 0)
    s = rows.sort(dim=-1, descending=True).values
    return (s[:, 0] - s[:, 1]).min().item()


@torch.no_grad()
def uncached_diffs(model, input_ids, res, n_decode):
    """One uncached forward over input_ids + decode_tokens; max |d| against the cached decode
    logits and against the prefill logits."""
    full = torch.cat([input_ids.long(), res["decode_tokens"].long()]).view(1, -1)
    lg = model(input_ids=full, use_cache=False).logits[0].float()
    T = input_ids.numel()
    d_dec = (lg[T:T + n_decode] - res["decode_logits"]).abs().max().item()
    d_pre = (lg[:T] - res["prefill_logits"]).abs().max().item()
    return d_dec, d_pre


def tensor_listing(path):
    from safetensors import safe_open
    rows = []
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        for k in f.keys():
            sl = f.get_slice(k)
            rows.append({"name": k, "dtype": str(sl.get_dtype()), "shape": list(sl.get_shape())})
    return rows, meta
