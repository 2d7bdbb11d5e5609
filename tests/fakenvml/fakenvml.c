/*
 * A simulated NVIDIA driver library (libnvidia-ml.so.1) for tests on machines without a GPU.
 *
 * The official nvml.h is included so every exported function must match NVIDIA's prototype (a
 * mismatch is a compile error) and the static_asserts below pin the struct layouts that
 * nvidia-ml-py's ctypes mirrors assume. Compile with -DNVML_NO_UNVERSIONED_FUNC_DEFS: without it
 * the header #defines nvmlInit to nvmlInit_v2 (and so on), and we could not export both names.
 *
 * The scenario (what the GPUs look like) lives in the file named by FAKE_NVML_SCENARIO. It is
 * re-read whenever its inode, size or mtime changes, checked with one stat() per call, so a test
 * can change a running process's GPUs by rewriting the file (tests/fakenvml/__init__.py writes it
 * atomically and makes sure the mtime moves). Format: see parse_scenario() and README.md.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "nvml.h"

#define EXPORT __attribute__((visibility("default")))

/* Layouts nvidia-ml-py (and nvitop's own ctypes mirrors) rely on; see shared/notes/nvml.md. */
static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t is {total, free, used}");
static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t is 40 bytes");
static_assert(offsetof(nvmlMemory_v2_t, reserved) == 16, "v2 reserved follows total");
static_assert(nvmlMemory_v2 == 0x02000028, "the version word nvidia-ml-py sends");
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "v1 process entries are 16 bytes");
static_assert(sizeof(nvmlProcessInfo_t) == 24, "v2/v3 process entries are 24 bytes");
static_assert(offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16, "MIG ids follow usedGpuMemory");
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "process samples are 32 bytes");
static_assert(offsetof(nvmlProcessUtilizationSample_t, timeStamp) == 8, "timestamp at 8");
static_assert(sizeof(nvmlUtilization_t) == 8, "{gpu, memory}");
static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "busId after the legacy id and 5 uints");
static_assert(sizeof(nvmlTemperature_v1_t) == 12, "{version, sensorType, temperature}");

#define MAX_GPUS 64
#define MAX_PROCS 512
#define STR_LEN 96
#define MIB 1048576ULL

/* not_supported categories; the Python writer validates against the same names. */
enum {
    NS_UTILIZATION = 1u << 0,
    NS_MEMORY = 1u << 1, /* both memory calls */
    NS_MEMORY_V2 = 1u << 2, /* only the v2 call, as on drivers before 515 */
    NS_TEMPERATURE = 1u << 3,
    NS_POWER = 1u << 4,
    NS_POWER_LIMIT = 1u << 5,
    NS_PROCESSES = 1u << 6,
    NS_PROCESS_UTILIZATION = 1u << 7,
    NS_PCI = 1u << 8,
    NS_COMPUTE_CAPABILITY = 1u << 9,
    NS_ENCODER = 1u << 10,
    NS_DECODER = 1u << 11,
};

static const struct {
    const char *name;
    unsigned bit;
} ns_names[] = {
    {"utilization", NS_UTILIZATION},
    {"memory", NS_MEMORY},
    {"memory_v2", NS_MEMORY_V2},
    {"temperature", NS_TEMPERATURE},
    {"power", NS_POWER},
    {"power_limit", NS_POWER_LIMIT},
    {"processes", NS_PROCESSES},
    {"process_utilization", NS_PROCESS_UTILIZATION},
    {"pci", NS_PCI},
    {"compute_capability", NS_COMPUTE_CAPABILITY},
    {"encoder", NS_ENCODER},
    {"decoder", NS_DECODER},
};

#define PROC_COMPUTE 1u
#define PROC_GRAPHICS 2u

struct fake_proc {
    unsigned pid;
    unsigned long long used_bytes; /* ULLONG_MAX = not available (NVML_VALUE_NOT_AVAILABLE) */
    unsigned sm_util, mem_util;
    unsigned types;
};

struct fake_gpu {
    char name[STR_LEN], uuid[STR_LEN], serial[STR_LEN], pci_bus_id[STR_LEN];
    unsigned pci_domain, pci_bus, pci_device;
    unsigned pci_device_id, pci_subsystem_id;
    unsigned long long mem_total, mem_used, mem_reserved; /* bytes */
    unsigned util_gpu, util_mem, temperature_c, power_mw, power_limit_mw;
    int cc_major, cc_minor;
    int lost;
    unsigned not_supported;
    unsigned n_procs;
    struct fake_proc procs[MAX_PROCS];
};

struct scenario {
    int loaded; /* a scenario file has been read at least once */
    char driver_version[STR_LEN];
    int cuda_driver_version;
    int init_error; /* NVML_SUCCESS or the nvmlReturn_t nvmlInit returns */
    unsigned long long sample_period_us;
    unsigned n_gpus;
    struct fake_gpu gpus[MAX_GPUS];
};

/* Handles are addresses of these slots: stable for the life of the process, like real ones. */
struct nvmlDevice_st {
    unsigned index;
};

static struct nvmlDevice_st g_handles[MAX_GPUS];
static struct scenario g_sc;
static int g_init_count; /* nvmlInit/nvmlShutdown are reference counted */
static struct {
    int valid;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} g_seen;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void copy_str(char *dst, const char *src) {
    snprintf(dst, STR_LEN, "%s", src);
}

static void gpu_defaults(struct fake_gpu *g, unsigned index) {
    memset(g, 0, offsetof(struct fake_gpu, procs));
    snprintf(g->name, STR_LEN, "NVIDIA A100-SXM4-80GB");
    snprintf(g->uuid, STR_LEN, "GPU-%08x-0000-4000-8000-000000000000", index);
    snprintf(g->serial, STR_LEN, "%013u", 1320000000u + index);
    snprintf(g->pci_bus_id, STR_LEN, "00000000:%02X:00.0", index + 1);
    g->pci_bus = index + 1;
    g->pci_device_id = 0x20B510DE;
    g->pci_subsystem_id = 0x153310DE;
    g->mem_total = 81920 * MIB;
    g->temperature_c = 35;
    g->power_mw = 60000;
    g->power_limit_mw = 400000;
    g->cc_major = 8;
}

static void parse_pci(struct fake_gpu *g) {
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(g->pci_bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) == 4) {
        g->pci_domain = dom;
        g->pci_bus = bus;
        g->pci_device = dev;
    }
    /* NVML prints the id as %08X:%02X:%02X.0; normalise so string comparisons are exact. */
    snprintf(g->pci_bus_id, STR_LEN, NVML_DEVICE_PCI_BUS_ID_FMT, g->pci_domain, g->pci_bus, g->pci_device);
}

/*
 * One record per line: "key value", the value running to the end of the line. Global keys come
 * first; "gpu" starts a new device and the keys after it describe that device; "proc PID USED_MIB
 * SM MEM TYPES" adds a process (USED_MIB -1 = not available, TYPES bit 1 compute, bit 2 graphics).
 * Unknown keys are ignored so an older library can read a newer file.
 */
static void parse_scenario(char *text, struct scenario *sc) {
    memset(sc, 0, offsetof(struct scenario, gpus));
    sc->loaded = 1;
    copy_str(sc->driver_version, "550.54.15");
    sc->cuda_driver_version = 12040;
    sc->sample_period_us = 166666;
    struct fake_gpu *g = NULL;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[--len] = 0;
        if (!len || line[0] == '#') continue;
        char *val = strchr(line, ' ');
        if (val) *val++ = 0;
        else val = line + len;
        const char *key = line;
        unsigned long long u = strtoull(val, NULL, 0);
        if (!strcmp(key, "gpu")) {
            if (sc->n_gpus >= MAX_GPUS) { g = NULL; continue; }
            g = &sc->gpus[sc->n_gpus];
            gpu_defaults(g, sc->n_gpus);
            sc->n_gpus++;
        } else if (!g) {
            if (!strcmp(key, "driver_version")) copy_str(sc->driver_version, val);
            else if (!strcmp(key, "cuda_driver_version")) sc->cuda_driver_version = (int)strtol(val, NULL, 0);
            else if (!strcmp(key, "init_error")) sc->init_error = (int)strtol(val, NULL, 0);
            else if (!strcmp(key, "sample_period_us") && u > 0) sc->sample_period_us = u;
        } else if (!strcmp(key, "name")) copy_str(g->name, val);
        else if (!strcmp(key, "uuid")) copy_str(g->uuid, val);
        else if (!strcmp(key, "serial")) copy_str(g->serial, val);
        else if (!strcmp(key, "pci_bus_id")) { copy_str(g->pci_bus_id, val); parse_pci(g); }
        else if (!strcmp(key, "pci_device_id")) g->pci_device_id = (unsigned)u;
        else if (!strcmp(key, "memory_total_mib")) g->mem_total = u * MIB;
        else if (!strcmp(key, "memory_used_mib")) g->mem_used = u * MIB;
        else if (!strcmp(key, "memory_total_bytes")) g->mem_total = u; /* exact, for byte-exact checks */
        else if (!strcmp(key, "memory_used_bytes")) g->mem_used = u;
        else if (!strcmp(key, "memory_reserved_mib")) g->mem_reserved = u * MIB;
        else if (!strcmp(key, "util_gpu")) g->util_gpu = (unsigned)u;
        else if (!strcmp(key, "util_mem")) g->util_mem = (unsigned)u;
        else if (!strcmp(key, "temperature_c")) g->temperature_c = (unsigned)u;
        else if (!strcmp(key, "power_mw")) g->power_mw = (unsigned)u;
        else if (!strcmp(key, "power_limit_mw")) g->power_limit_mw = (unsigned)u;
        else if (!strcmp(key, "compute_capability")) sscanf(val, "%d.%d", &g->cc_major, &g->cc_minor);
        else if (!strcmp(key, "lost")) g->lost = u != 0;
        else if (!strcmp(key, "not_supported")) {
            for (size_t i = 0; i < sizeof ns_names / sizeof ns_names[0]; i++)
                if (!strcmp(val, ns_names[i].name)) g->not_supported |= ns_names[i].bit;
        } else if (!strcmp(key, "proc") && g->n_procs < MAX_PROCS) {
            long long used_mib = -1;
            struct fake_proc *p = &g->procs[g->n_procs];
            if (sscanf(val, "%u %lld %u %u %u", &p->pid, &used_mib, &p->sm_util, &p->mem_util, &p->types) == 5) {
                p->used_bytes = used_mib < 0 ? ~0ULL : (unsigned long long)used_mib * MIB;
                g->n_procs++;
            }
        }
    }
}

/* Called with g_lock held at the top of every entry point: one stat(), a re-parse only on change. */
static void refresh(void) {
    const char *path = getenv("FAKE_NVML_SCENARIO");
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        /* No file yet: behave as a machine whose driver is not loaded. A file that vanishes after
         * a successful read keeps the last scenario (writers replace it atomically). */
        return;
    }
    if (g_seen.valid && g_seen.dev == st.st_dev && g_seen.ino == st.st_ino && g_seen.size == st.st_size &&
        g_seen.mtime.tv_sec == st.st_mtim.tv_sec && g_seen.mtime.tv_nsec == st.st_mtim.tv_nsec)
        return;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t cap = (size_t)st.st_size + 1;
    char *buf = malloc(cap);
    if (!buf) { fclose(f); return; }
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    parse_scenario(buf, &g_sc);
    free(buf);
    g_seen.valid = 1;
    g_seen.dev = st.st_dev;
    g_seen.ino = st.st_ino;
    g_seen.size = st.st_size;
    g_seen.mtime = st.st_mtim;
}

#define ENTER() pthread_mutex_lock(&g_lock); refresh()
#define RETURN(code) do { nvmlReturn_t r_ = (code); pthread_mutex_unlock(&g_lock); return r_; } while (0)

/* Common prologue for system queries. */
#define ENTER_SYSTEM() ENTER(); if (g_init_count == 0) RETURN(NVML_ERROR_UNINITIALIZED)

/* Common prologue for device queries: resolve the handle into g, honour lost and not_supported. */
#define ENTER_DEVICE(dev, ns_bit) \
    ENTER_SYSTEM(); \
    struct fake_gpu *g = lookup(dev); \
    if (!g) RETURN(NVML_ERROR_INVALID_ARGUMENT); \
    if (g->lost) RETURN(NVML_ERROR_GPU_IS_LOST); \
    if ((ns_bit) && (g->not_supported & (unsigned)(ns_bit))) RETURN(NVML_ERROR_NOT_SUPPORTED)

static struct fake_gpu *lookup(nvmlDevice_t dev) {
    uintptr_t p = (uintptr_t)dev, base = (uintptr_t)g_handles;
    if (p < base || p >= base + sizeof g_handles || (p - base) % sizeof g_handles[0]) return NULL;
    unsigned i = (unsigned)((p - base) / sizeof g_handles[0]);
    return i < g_sc.n_gpus ? &g_sc.gpus[i] : NULL;
}

static nvmlReturn_t put_str(char *dst, unsigned length, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- init, shutdown, errors */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    ENTER();
    if (!g_sc.loaded) RETURN(NVML_ERROR_DRIVER_NOT_LOADED);
    if (g_sc.init_error != NVML_SUCCESS) RETURN((nvmlReturn_t)g_sc.init_error);
    g_init_count++;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    ENTER_SYSTEM();
    g_init_count--;
    RETURN(NVML_SUCCESS);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch ((int)result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Ran out of critical resources, other than memory";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "The requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY: return "The system is not ready for the request";
    case NVML_ERROR_GPU_NOT_FOUND: return "No GPUs were found";
    default: return "Unknown Error";
    }
}

/* ---------------------------------------------------------------- system */

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER_SYSTEM();
    RETURN(put_str(version, length, g_sc.driver_version));
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    ENTER_SYSTEM();
    char buf[STR_LEN + 16];
    snprintf(buf, sizeof buf, "%d.%s", g_sc.cuda_driver_version / 1000, g_sc.driver_version);
    RETURN(put_str(version, length, buf));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    ENTER_SYSTEM();
    if (!cudaDriverVersion) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *cudaDriverVersion = g_sc.cuda_driver_version;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    ENTER_SYSTEM();
    if (!deviceCount) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *deviceCount = g_sc.n_gpus;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

/* ---------------------------------------------------------------- handles and identity */

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER_SYSTEM();
    /* A lost GPU still gets a handle; every query on it then says GPU_IS_LOST, which is what lets
     * tools show "GPU 1: lost" instead of silently dropping it. */
    if (!device || index >= g_sc.n_gpus) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    g_handles[index].index = index;
    *device = &g_handles[index];
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

static nvmlReturn_t handle_where(nvmlDevice_t *device, int (*match)(const struct fake_gpu *, const void *),
                                 const void *arg) {
    if (!device || !arg) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < g_sc.n_gpus; i++) {
        if (match(&g_sc.gpus[i], arg)) {
            if (g_sc.gpus[i].lost) return NVML_ERROR_GPU_IS_LOST;
            g_handles[i].index = i;
            *device = &g_handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static int match_uuid(const struct fake_gpu *g, const void *uuid) { return !strcmp(g->uuid, uuid); }

static int match_pci(const struct fake_gpu *g, const void *text) {
    /* NVML accepts "domain:bus:device.function" and "bus:device.function", any case. */
    unsigned dom = 0, bus, dev, fn;
    if (sscanf(text, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) {
        dom = 0;
        if (sscanf(text, "%x:%x.%x", &bus, &dev, &fn) != 3) return 0;
    }
    return dom == g->pci_domain && bus == g->pci_bus && dev == g->pci_device;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    ENTER_SYSTEM();
    RETURN(handle_where(device, match_uuid, uuid));
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    ENTER_SYSTEM();
    RETURN(handle_where(device, match_pci, pciBusId));
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER_DEVICE(device, 0);
    RETURN(put_str(name, length, g->name));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    ENTER_DEVICE(device, 0);
    RETURN(put_str(uuid, length, g->uuid));
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    ENTER_DEVICE(device, 0);
    RETURN(put_str(serial, length, g->serial));
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    ENTER_DEVICE(device, 0);
    if (!index) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *index = (unsigned)(g - g_sc.gpus);
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    return nvmlDeviceGetIndex(device, minorNumber);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    ENTER_DEVICE(device, NS_PCI);
    if (!pci) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, g->pci_domain,
             g->pci_bus, g->pci_device);
    snprintf(pci->busId, sizeof pci->busId, "%s", g->pci_bus_id);
    pci->domain = g->pci_domain;
    pci->bus = g->pci_bus;
    pci->device = g->pci_device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    ENTER_DEVICE(device, NS_COMPUTE_CAPABILITY);
    if (!major || !minor) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *major = g->cc_major;
    *minor = g->cc_minor;
    RETURN(NVML_SUCCESS);
}

/* ---------------------------------------------------------------- memory, utilisation, sensors */

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER_DEVICE(device, NS_MEMORY);
    if (!memory) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    /* v1 "used" counts the driver's reservation too; v2 reports it separately. */
    unsigned long long used = g->mem_used + g->mem_reserved;
    memory->total = g->mem_total;
    memory->used = used;
    memory->free = g->mem_total > used ? g->mem_total - used : 0;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    ENTER_DEVICE(device, NS_MEMORY | NS_MEMORY_V2);
    if (!memory) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != nvmlMemory_v2) RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    unsigned long long used = g->mem_used + g->mem_reserved;
    memory->total = g->mem_total;
    memory->reserved = g->mem_reserved;
    memory->used = g->mem_used;
    memory->free = g->mem_total > used ? g->mem_total - used : 0;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory) {
    ENTER_DEVICE(device, 0);
    if (!bar1Memory) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    bar1Memory->bar1Total = 256 * MIB;
    bar1Memory->bar1Used = 2 * MIB;
    bar1Memory->bar1Free = 254 * MIB;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    ENTER_DEVICE(device, NS_UTILIZATION);
    if (!utilization) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    utilization->gpu = g->util_gpu;
    utilization->memory = g->util_mem;
    RETURN(NVML_SUCCESS);
}

static nvmlReturn_t codec_util(nvmlDevice_t device, unsigned ns_bit, unsigned *util, unsigned *period) {
    ENTER_DEVICE(device, ns_bit);
    if (!util || !period) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *util = 0;
    *period = (unsigned)g_sc.sample_period_us;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                    unsigned int *samplingPeriodUs) {
    return codec_util(device, NS_ENCODER, utilization, samplingPeriodUs);
}

EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                    unsigned int *samplingPeriodUs) {
    return codec_util(device, NS_DECODER, utilization, samplingPeriodUs);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                             unsigned int *temp) {
    ENTER_DEVICE(device, NS_TEMPERATURE);
    if (!temp || sensorType != NVML_TEMPERATURE_GPU) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *temp = g->temperature_c;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature) {
    ENTER_DEVICE(device, NS_TEMPERATURE);
    if (!temperature) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (temperature->version != nvmlTemperature_v1) RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (temperature->sensorType != NVML_TEMPERATURE_GPU) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    temperature->temperature = (int)g->temperature_c;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    ENTER_DEVICE(device, NS_POWER);
    if (!power) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *power = g->power_mw;
    RETURN(NVML_SUCCESS);
}

static nvmlReturn_t power_limit(nvmlDevice_t device, unsigned *limit) {
    ENTER_DEVICE(device, NS_POWER_LIMIT);
    if (!limit) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *limit = g->power_limit_mw;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    return power_limit(device, limit);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    return power_limit(device, limit);
}

/* ---------------------------------------------------------------- processes */

/*
 * The sizing protocol every NVML list call shares: a count of 0 (or a NULL array) asks for the
 * size, answered SUCCESS when the list is empty and INSUFFICIENT_SIZE with the needed count
 * otherwise. The entry size differs per version, so the caller passes it.
 */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned types, unsigned *count, void *out,
                                      size_t entry_size) {
    ENTER_DEVICE(device, NS_PROCESSES);
    if (!count) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = 0;
    for (unsigned i = 0; i < g->n_procs; i++) n += (g->procs[i].types & types) != 0;
    if (n == 0) {
        *count = 0;
        RETURN(NVML_SUCCESS);
    }
    if (!out || *count < n) {
        *count = n;
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (unsigned i = 0; i < g->n_procs; i++) {
        const struct fake_proc *p = &g->procs[i];
        if (!(p->types & types)) continue;
        if (entry_size == sizeof(nvmlProcessInfo_v1_t)) {
            nvmlProcessInfo_v1_t *e = (nvmlProcessInfo_v1_t *)out + k;
            e->pid = p->pid;
            e->usedGpuMemory = p->used_bytes;
        } else {
            nvmlProcessInfo_t *e = (nvmlProcessInfo_t *)out + k;
            e->pid = p->pid;
            e->usedGpuMemory = p->used_bytes;
            e->gpuInstanceId = 0xFFFFFFFFu; /* not a MIG device */
            e->computeInstanceId = 0xFFFFFFFFu;
        }
        k++;
    }
    *count = k;
    RETURN(NVML_SUCCESS);
}

#define PROCESS_EXPORTS(kind, bits) \
    EXPORT nvmlReturn_t nvmlDeviceGet##kind##RunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, \
                                                                 nvmlProcessInfo_t *infos) { \
        return running_processes(device, bits, infoCount, infos, sizeof *infos); \
    } \
    EXPORT nvmlReturn_t nvmlDeviceGet##kind##RunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount, \
                                                                 nvmlProcessInfo_v2_t *infos) { \
        return running_processes(device, bits, infoCount, infos, sizeof *infos); \
    } \
    EXPORT nvmlReturn_t nvmlDeviceGet##kind##RunningProcesses(nvmlDevice_t device, unsigned int *infoCount, \
                                                              nvmlProcessInfo_v1_t *infos) { \
        return running_processes(device, bits, infoCount, infos, sizeof *infos); \
    }

PROCESS_EXPORTS(Compute, PROC_COMPUTE)
PROCESS_EXPORTS(Graphics, PROC_GRAPHICS)
/* MPS is not modelled: no process ever runs under an MPS server here. */
PROCESS_EXPORTS(MPSCompute, 0)

static unsigned long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* NVML timestamps are CPU (Unix epoch) microseconds */
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

/*
 * The driver samples per-process utilisation once per period and returns only samples newer than
 * lastSeenTimeStamp from processes that used the GPU. Stamping every sample with "now, rounded
 * down to the period" reproduces what callers see: re-polling within one period, or a process
 * that does nothing, gives NOT_FOUND.
 */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                    unsigned int *processSamplesCount,
                                                    unsigned long long lastSeenTimeStamp) {
    ENTER_DEVICE(device, NS_PROCESS_UTILIZATION);
    if (!processSamplesCount) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long period = g_sc.sample_period_us;
    unsigned long long stamp = now_us() / period * period;
    unsigned n = 0;
    if (stamp > lastSeenTimeStamp)
        for (unsigned i = 0; i < g->n_procs; i++) n += g->procs[i].sm_util || g->procs[i].mem_util;
    if (n == 0) {
        *processSamplesCount = 0;
        RETURN(NVML_ERROR_NOT_FOUND);
    }
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (unsigned i = 0; i < g->n_procs; i++) {
        const struct fake_proc *p = &g->procs[i];
        if (!p->sm_util && !p->mem_util) continue;
        nvmlProcessUtilizationSample_t *s = &utilization[k++];
        s->pid = p->pid;
        s->timeStamp = stamp;
        s->smUtil = p->sm_util;
        s->memUtil = p->mem_util;
        s->encUtil = 0;
        s->decUtil = 0;
    }
    *processSamplesCount = k;
    RETURN(NVML_SUCCESS);
}

/* ---------------------------------------------------------------- MIG: never enabled here */

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    ENTER_DEVICE(device, 0);
    if (!isMigDevice) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *isMigDevice = 0;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    ENTER_DEVICE(migDevice, 0);
    (void)device;
    RETURN(NVML_ERROR_INVALID_ARGUMENT); /* a full GPU's handle is not a MIG handle */
}

/* ---------------------------------------------------------------- queried by gpustat/nvitop, not modelled */

/* Each checks the handle like a real query (so lost GPUs say GPU_IS_LOST), then NOT_SUPPORTED. */
#define NOT_SUPPORTED_EXPORT(fn, ...) \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, __VA_ARGS__) { \
        ENTER_DEVICE(device, 0); \
        (void)g; \
        RETURN(NVML_ERROR_NOT_SUPPORTED); \
    }

NOT_SUPPORTED_EXPORT(nvmlDeviceGetFanSpeed, unsigned int *speed)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetClockInfo, nvmlClockType_t type, unsigned int *clock)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetMaxClockInfo, nvmlClockType_t type, unsigned int *clock)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetComputeMode, nvmlComputeMode_t *mode)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetDisplayActive, nvmlEnableState_t *isActive)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetDisplayMode, nvmlEnableState_t *display)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetDriverModel_v2, nvmlDriverModel_t *current, nvmlDriverModel_t *pending)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetDriverModel, nvmlDriverModel_t *current, nvmlDriverModel_t *pending)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetGpuInstanceId, unsigned int *id)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetComputeInstanceId, unsigned int *id)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetMaxMigDeviceCount, unsigned int *count)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetMigDeviceHandleByIndex, unsigned int index, nvmlDevice_t *migDevice)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetMigMode, unsigned int *currentMode, unsigned int *pendingMode)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetPcieThroughput, nvmlPcieUtilCounter_t counter, unsigned int *value)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetPerformanceState, nvmlPstates_t *pState)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetPersistenceMode, nvmlEnableState_t *mode)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetTotalEccErrors, nvmlMemoryErrorType_t errorType,
                     nvmlEccCounterType_t counterType, unsigned long long *eccCounts)

/* Batched field queries (nvitop asks for NVLink counts): each field says NOT_SUPPORTED. */
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    ENTER_DEVICE(device, 0);
    if (valuesCount < 0 || (valuesCount > 0 && !values)) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long t = now_us();
    for (int i = 0; i < valuesCount; i++) {
        values[i].timestamp = (long long)t;
        values[i].latencyUsec = 0;
        values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
    RETURN(NVML_SUCCESS);
}

/*
 * Deliberately NOT exported: nvmlDeviceGetConfComputeMemSizeInfo and
 * nvmlDeviceGetRunningProcessDetailList. nvitop switches to a legacy process struct (and scrambles
 * pids) when the first exists without the second; exporting neither keeps it on the 24-byte v3
 * layout this library fills.
 */
