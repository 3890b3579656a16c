/* pdb_cli_info: `pdbridge info` prints what this binary can use: CUDA build, GPUs, CPU count. */
#include <stdio.h>
#include <unistd.h>

#include "pdb_cli.h"
#include "pdb_cuda.h"

int pdb_cli_info(int argc, char **argv) {
    if (pdb_cli_wants_help(argc, argv)) {
        printf("usage: pdbridge info\n\nPrints the build's features and the CPUs/GPUs this binary sees.\n");
        return 0;
    }
    char name[256];
    int n = pdb_cuda_device_count(name, sizeof name);
    printf("cuda_built: %s\n", pdb_cuda_built() ? "yes" : "no");
    printf("cuda_devices: %d%s%s\n", n, n ? " (device 0: " : "", n ? name : "");
    if (n) printf(")\n");
    printf("cpus: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    return 0;
}
