/* placeholder until the decode server lands */
#include <stdio.h>
#include "pdb_cli.h"
int pdb_cli_decode_server(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "decode-server: not built yet\n"); return 1; }
