/* placeholder until quantize lands */
#include <stdio.h>
#include "pdb_cli.h"
int pdb_cli_quantize(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "quantize: not built yet\n"); return 1; }
