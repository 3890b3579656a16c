/* pdb_cli: the subcommands of the one binary build/pdbridge. Each returns the process exit
 * status (0 ok, 1 failure, 2 usage) and prints its own --help. */
#ifndef PDB_CLI_H
#define PDB_CLI_H

int pdb_cli_tokenize(int argc, char **argv);
int pdb_cli_make_model(int argc, char **argv);
int pdb_cli_forward(int argc, char **argv);
int pdb_cli_generate(int argc, char **argv);
int pdb_cli_info(int argc, char **argv);
int pdb_cli_quantize(int argc, char **argv);
int pdb_cli_decode_server(int argc, char **argv);

/* True when argv holds -h or --help. */
int pdb_cli_wants_help(int argc, char **argv);

#endif
