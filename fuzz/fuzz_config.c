/* fuzz_config: config.json parsing (pdb_config_parse) on arbitrary bytes. Properties: no
 * crash/UB; a config that parses can be serialised (pdb_config_to_json) and the serialisation
 * parses again to the same layer count and hidden size. */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "pdb_config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    pdb_log_set_level((pdb_log_level)(PDB_LOG_ERROR + 1));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    static pdb_config cfg, again;
    if (pdb_config_parse(s, "fuzz", &cfg) == PDB_OK) {
        char *js = NULL;
        if (pdb_config_to_json(&cfg, &js) == PDB_OK) {
            pdb_status st = pdb_config_parse(js, "fuzz-roundtrip", &again);
            FUZZ_CHECK(st == PDB_OK, "serialised config does not parse: %s\n%s", pdb_err_msg(), js);
            FUZZ_CHECK(again.num_layers == cfg.num_layers && again.hidden_size == cfg.hidden_size,
                       "round trip changed num_layers/hidden_size");
            free(js);
        }
    }
    free(s);
    return 0;
}
