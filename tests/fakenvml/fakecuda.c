/* A stand-in libcuda.so.1 for the probe's CUDA checks (tests only).
 *
 * cuDriverGetVersion answers FAKE_CUDA_DRIVER_VERSION (e.g. 12040 for CUDA 12.4), as the real one
 * does before cuInit. cuInit, the call that initialises CUDA (and that the probe must never make),
 * appends its name to FAKE_CUDA_CALLS, so a test can prove who made it; it answers
 * FAKE_CUDA_INIT_RESULT (default CUDA_SUCCESS). cuDeviceGetCount answers as the Driver API documents:
 * CUDA_ERROR_NOT_INITIALIZED before cuInit ("If cuInit() has not been called, any function from the
 * driver API will return CUDA_ERROR_NOT_INITIALIZED"), cuInit's error after a failed one, and
 * FAKE_CUDA_DEVICE_COUNT (default 1) devices after a successful one.
 * CUresult values from cuda.h: CUDA_SUCCESS 0, CUDA_ERROR_INVALID_VALUE 1,
 * CUDA_ERROR_NOT_INITIALIZED 3, CUDA_ERROR_NO_DEVICE 100.
 */
#include <stdio.h>
#include <stdlib.h>

static int init_result = -1; /* -1: cuInit not called */

static void note(const char *name) {
    const char *path = getenv("FAKE_CUDA_CALLS");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v ? atoi(v) : fallback;
}

int cuDriverGetVersion(int *version) {
    if (!version) return 1;
    *version = env_int("FAKE_CUDA_DRIVER_VERSION", 12040);
    return 0;
}

int cuInit(unsigned int flags) {
    (void)flags;
    note("cuInit");
    if (init_result != 0) init_result = env_int("FAKE_CUDA_INIT_RESULT", 0);
    return init_result;
}

int cuDeviceGetCount(int *count) {
    if (!count) return 1;
    if (init_result < 0) return 3;
    if (init_result != 0) return init_result;
    *count = env_int("FAKE_CUDA_DEVICE_COUNT", 1);
    return 0;
}
