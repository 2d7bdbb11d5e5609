/* A stand-in libcuda.so.1 for the probe's driver-version check (tests only).
 *
 * cuDriverGetVersion answers FAKE_CUDA_DRIVER_VERSION (e.g. 12040 for CUDA 12.4), as the real one
 * does before cuInit. Every other entry point the probe must never call before the program does
 * (cuInit, cuDeviceGetCount) appends its name to FAKE_CUDA_CALLS, so a test can prove it was not.
 * CUresult values from cuda.h: CUDA_SUCCESS 0, CUDA_ERROR_INVALID_VALUE 1,
 * CUDA_ERROR_SYSTEM_DRIVER_MISMATCH 803.
 */
#include <stdio.h>
#include <stdlib.h>

static void note(const char *name) {
    const char *path = getenv("FAKE_CUDA_CALLS");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

int cuDriverGetVersion(int *version) {
    const char *v = getenv("FAKE_CUDA_DRIVER_VERSION");
    if (!version) return 1;
    *version = v ? atoi(v) : 12040;
    return 0;
}

int cuInit(unsigned int flags) {
    (void)flags;
    note("cuInit");
    return 803;
}

int cuDeviceGetCount(int *count) {
    note("cuDeviceGetCount");
    if (count) *count = 0;
    return 803;
}
