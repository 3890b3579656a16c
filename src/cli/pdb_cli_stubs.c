/* placeholders until the model subcommands land */
#include <stdio.h>
#include "pdb_cli.h"
int pdb_cli_generate(int argc, char **argv) { (void)argc; (void)argv; return 1; }
