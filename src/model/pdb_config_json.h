/* pdb_config_json: the config.json readers every architecture's parser shares (pdb_config.c) and
 * the per-architecture parsers / writers the registry points to. Each reader names origin and key
 * on error; a missing optional field takes def. Model-internal: only src/model includes it. */
#ifndef PDB_CONFIG_JSON_H
#define PDB_CONFIG_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "pdb_config.h"

/* An integer (an integral real, or the first of an integer array: eos_token_id [a, b]). */
pdb_status pdb_cfgj_int(json_t *o, const char *origin, const char *key, int64_t def, int required, int64_t *out);
pdb_status pdb_cfgj_num(json_t *o, const char *origin, const char *key, double def, double *out);
pdb_status pdb_cfgj_bool(json_t *o, const char *origin, const char *key, int def, int *out);
/* The string value, or NULL when absent or not a string. */
const char *pdb_cfgj_str(json_t *o, const char *key);
/* One rope dict (rope_parameters, rope_scaling, or a V4 sub-dict; o2 names it in errors). */
pdb_status pdb_cfgj_rope_dict(json_t *rp, const char *o2, double top_theta, int64_t max_pos, pdb_rope_params *r);
/* The model's rope: rope_parameters (5.x) or rope_scaling + rope_theta (legacy). */
pdb_status pdb_cfgj_rope(json_t *root, const char *origin, int64_t max_pos, pdb_rope_params *r);

/* A new config object with "architectures": [cls] and "model_type" (NULL when out of memory). */
json_t *pdb_cfgj_root(const char *cls, const char *model_type);

pdb_status pdb_v2_config_parse(json_t *root, const char *origin, pdb_config *c);
pdb_status pdb_v2_config_to_json(const pdb_config *c, char **out);
pdb_status pdb_v4_config_parse(json_t *root, const char *origin, pdb_config *c);
pdb_status pdb_v4_config_to_json(const pdb_config *c, char **out);

#endif
