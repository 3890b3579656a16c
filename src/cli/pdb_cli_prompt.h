/* pdb_cli_prompt: long real-text prompts for the demo (`up`) and the benchmarks (`bench-cold`):
 * the Python standard library's .py files (found with python3's sysconfig, else
 * /usr/lib/python3.11): first its top-level files, then, once those are used up, the files of its
 * packages one level down (email/, json/, ...; not site-packages), concatenated until about a
 * target number of tokens, each file under a "# ---- file NAME ----" header (NAME "pkg/file.py"
 * for a package's), with a needle line ("# NEEDLE") placed once half the target is reached.
 * Invariants: each of the two lists is in sorted name order when the seed is 0, else shuffled by
 * a shuffle that depends only on the seed (the same seed and library give the same text; a target
 * the top-level files can fill gives the same text as before the packages were read); a file that
 * cannot be read or tokenized is skipped; a file counts at most its first 64 KiB; the last file
 * is cut so that the files' tokens (as the tokenizer counts each file alone) do not pass the
 * target. The text is about the target: headers and the needle add a few tokens, and joining
 * files may merge a token or two. */
#ifndef PDB_CLI_PROMPT_H
#define PDB_CLI_PROMPT_H

#include <stdint.h>

#include "pdb_status.h"
#include "pdb_tokenizer.h"

/* The Python standard library's directory (malloc'd; NULL only when out of memory). */
char *pdb_cli_prompt_stdlib_dir(void);

/* *out: the NUL-terminated text (free it); *tokens (may be NULL): the files' tokens counted, less
 * than target when the library has too little text. PDB_IO naming the directory when it cannot
 * be read, PDB_NOMEM. */
pdb_status pdb_cli_prompt_build(const pdb_tokenizer *tok, int64_t target, uint64_t seed, const char *needle, char **out,
                                int64_t *tokens);

/* A needle code that depends only on the seed: four capital letters, '-', four digits
 * ("QZKM-4821"), written at out (at least 10 bytes). */
void pdb_cli_prompt_code(uint64_t seed, char out[10]);

#endif
