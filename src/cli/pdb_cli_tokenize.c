/* placeholder until the tokenizer lands */
#include <stdio.h>
#include "pdb_cli.h"
int pdb_cli_tokenize(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "tokenize: not built yet\n"); return 1; }
