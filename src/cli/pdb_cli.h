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

int pdb_cli_prefill_server(int argc, char **argv);
int pdb_cli_front(int argc, char **argv);
int pdb_cli_up(int argc, char **argv);
int pdb_cli_bench_cold(int argc, char **argv);
/* Exactness tools (pdb_cli_verify.c). */
int pdb_cli_verify_blocks(int argc, char **argv);
int pdb_cli_diff_state(int argc, char **argv);
int pdb_cli_pool_validate(int argc, char **argv);
int pdb_cli_doctor(int argc, char **argv);

/* Servers: block SIGINT/SIGTERM in every thread started afterwards and ignore SIGPIPE; then
 * wait for one of them in the main thread (returns the signal). */
void pdb_cli_signals_block(void);
int pdb_cli_signals_wait(void);
/* A started server's main thread: print "listening on http://HOST:PORT[ (NOTE)]" (the line the
 * e2e harness and `up` read), wait for SIGINT/SIGTERM and log it; the caller then stops it. */
void pdb_cli_serve_until_signal(const char *cmd, const char *host, int port, const char *note);
/* Parse an integer in [lo, hi]; 0 when s is not one. */
int pdb_cli_parse_int(const char *s, long long lo, long long hi, long long *out);
/* Apply --log-level NAME; 0 when NAME is unknown. */
int pdb_cli_set_log_level(const char *name);

/* The current error message (pdb_err_msg) past any leading "CMD:" the library already put there
 * (pdb_make_model_write says "make-model: ...", pdb_quantize "quantize: ..."), so that a line
 * the CLI prefixes with "pdbridge CMD: " names the subcommand once. */
const char *pdb_cli_error_text(const char *cmd);
/* Print "pdbridge CMD: [STATUS: ]MESSAGE" on stderr (the message from pdb_cli_error_text; status
 * may be NULL). The one printer of a failed library call's message. */
void pdb_cli_print_error(const char *cmd, const char *status);

/* True when argv holds -h or --help. */
int pdb_cli_wants_help(int argc, char **argv);

#endif
