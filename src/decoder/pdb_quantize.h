/* pdb_quantize: `pdbridge quantize`, the decoder's own checkpoint from an HF directory.
 * Scheme "mx" (default): routed experts MXFP4; attention projections, dense and shared-expert
 * MLPs and lm_head MXFP8 (V4: see pdb_quantize_model_ex) (a weight whose input dim is not a multiple of 32 stays as it was);
 * embeddings, norms and the router keep their dtype. Scheme "none": every tensor as it was.
 * Output: config.json, model.safetensors (MX weight W: "W" e4m3 [R,C] or packed e2m1 U8
 * [R,C/2] plus "W_mx_scale" F8_E8M0 [R,C/32]), pdbridge_decoder.json {scheme, weights_sha256,
 * fingerprint, cache_semantics, source}, and tokenizer files when present.
 * Invariant: the output directory appears complete or not at all (written to DIR.tmp, renamed). */
#ifndef PDB_QUANTIZE_H
#define PDB_QUANTIZE_H

#include "pdb_status.h"

pdb_status pdb_quantize_model(const char *src_dir, const char *out_dir, const char *scheme, int verbose);
/* v4_semantics: "official" | "exact" for a deepseek_v4 model (NULL: official), recorded as
 * "v4_semantics" in pdbridge_decoder.json and part of the fingerprint; must be NULL for V2.
 * deepseek_v4 under scheme mx: routed experts MXFP4; attention, compressor and indexer projections,
 * the shared expert and the head MXFP8 (input dim a multiple of 32); norms, router, hash tables,
 * sinks, hc mixing and position biases unchanged (the V4 loader dequantizes MX weights exactly). */
pdb_status pdb_quantize_model_ex(const char *src_dir, const char *out_dir, const char *scheme, const char *v4_semantics,
                                 int verbose);

#endif
