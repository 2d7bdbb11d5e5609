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
/* GPM: nvidia-ml-py's c_nvmlGpmMetric_t is {c_uint metricId, c_int nvmlReturn, c_double value,
 * {c_char_p shortName, longName, unit}} and c_nvmlGpmMetricsGet_t is {version, numMetrics, sample1,
 * sample2, metrics[NVML_GPM_METRIC_MAX]}; tests/unit/test_nvml_efficiency.py checks the Python side
 * against the same numbers and NVML_GPM_METRIC_MAX against this header's. */
static_assert(sizeof(nvmlGpmMetric_t) == 40, "metricId, nvmlReturn, value, 3 name pointers");
static_assert(offsetof(nvmlGpmMetric_t, nvmlReturn) == 4, "nvmlReturn follows metricId");
static_assert(offsetof(nvmlGpmMetric_t, value) == 8, "value is a double at 8");
static_assert(offsetof(nvmlGpmMetric_t, metricInfo) == 16, "metricInfo after value");
static_assert(offsetof(nvmlGpmMetricsGet_t, numMetrics) == 4, "numMetrics follows version");
static_assert(offsetof(nvmlGpmMetricsGet_t, sample1) == 8, "sample1 at 8");
static_assert(offsetof(nvmlGpmMetricsGet_t, sample2) == 16, "sample2 at 16");
static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24, "metrics[] at 24");
static_assert(sizeof(nvmlGpmMetricsGet_t) == 24 + 40 * NVML_GPM_METRIC_MAX, "no tail padding");
static_assert(sizeof(nvmlGpmSupport_t) == 8, "{version, isSupportedDevice}");
/* nvmlFieldValue_t: nvidia-ml-py's c_nvmlFieldValue_t and the sidecar's reader (sources/nvml/direct.py). */
static_assert(sizeof(nvmlFieldValue_t) == 40, "fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, value");
static_assert(offsetof(nvmlFieldValue_t, scopeId) == 4, "scopeId follows fieldId");
static_assert(offsetof(nvmlFieldValue_t, timestamp) == 8, "timestamp at 8");
static_assert(offsetof(nvmlFieldValue_t, latencyUsec) == 16, "latencyUsec at 16");
static_assert(offsetof(nvmlFieldValue_t, valueType) == 24, "valueType at 24");
static_assert(offsetof(nvmlFieldValue_t, nvmlReturn) == 28, "nvmlReturn at 28");
static_assert(offsetof(nvmlFieldValue_t, value) == 32, "value union at 32");
static_assert(NVML_FI_DEV_POWER_AVERAGE == 185 && NVML_FI_DEV_POWER_INSTANT == 186, "power field ids");
static_assert(NVML_FI_DEV_POWER_CURRENT_LIMIT == 190 && NVML_FI_DEV_GPU_TEMP == 308, "limit, temperature ids");
static_assert(NVML_GPM_METRICS_GET_VERSION == 1 && NVML_GPM_SUPPORT_VERSION == 1, "versions nvidia-ml-py sends");

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
    NS_CLOCK_EVENT_REASONS = 1u << 12, /* both the event- and the older throttle-reasons call */
    NS_SM_CLOCK = 1u << 13, /* nvmlDeviceGetClockInfo(SM) (and GRAPHICS, the same domain on GPUs we model) */
    NS_MEM_CLOCK = 1u << 14,
    NS_SM_CLOCK_MAX = 1u << 15, /* nvmlDeviceGetMaxClockInfo, every domain */
    NS_PCIE_GEN = 1u << 16,
    NS_PCIE_GEN_MAX = 1u << 17,
    NS_PCIE_WIDTH = 1u << 18,
    NS_PCIE_WIDTH_MAX = 1u << 19,
    NS_MIG_MODE = 1u << 20, /* also what a GPU without a "mig_mode" key answers */
    NS_ENERGY = 1u << 21, /* nvmlDeviceGetTotalEnergyConsumption */
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
    {"clock_event_reasons", NS_CLOCK_EVENT_REASONS},
    {"sm_clock", NS_SM_CLOCK},
    {"mem_clock", NS_MEM_CLOCK},
    {"sm_clock_max", NS_SM_CLOCK_MAX},
    {"pcie_gen", NS_PCIE_GEN},
    {"pcie_gen_max", NS_PCIE_GEN_MAX},
    {"pcie_width", NS_PCIE_WIDTH},
    {"pcie_width_max", NS_PCIE_WIDTH_MAX},
    {"mig_mode", NS_MIG_MODE},
    {"energy", NS_ENERGY},
};

#define PROC_COMPUTE 1u
#define PROC_GRAPHICS 2u

#define MAX_MIG 8 /* A100/H100 split into at most 7 */
#define NO_ID 0xFFFFFFFFu /* NVML's "not a MIG instance" in process entries */

struct fake_proc {
    unsigned pid;
    unsigned long long used_bytes; /* ULLONG_MAX = not available (NVML_VALUE_NOT_AVAILABLE) */
    unsigned sm_util, mem_util;
    unsigned types;
    unsigned gi, ci; /* MIG GPU / compute instance ids, NO_ID without MIG */
};

struct fake_mig {
    char uuid[STR_LEN];
    unsigned gi, ci;
    unsigned long long mem_total, mem_used; /* bytes */
};

/* Per GPM metric id: absent (0.0 on a GPM GPU), a value, or NOT_SUPPORTED for that metric. */
enum { GPM_ZERO = 0, GPM_VALUE = 1, GPM_NOT_SUPPORTED = 2 };

struct fake_gpu {
    char name[STR_LEN], uuid[STR_LEN], serial[STR_LEN], pci_bus_id[STR_LEN];
    unsigned pci_domain, pci_bus, pci_device;
    unsigned pci_device_id, pci_subsystem_id;
    unsigned long long mem_total, mem_used, mem_reserved; /* bytes */
    unsigned util_gpu, util_mem, temperature_c, power_mw, power_limit_mw;
    unsigned long long energy_mj; /* the energy counter when first asked (or asked after this changed) */
    int cc_major, cc_minor;
    int lost;
    unsigned not_supported;
    unsigned long long clock_event_reasons; /* nvmlClocksEventReason* bits */
    int throttle_reasons_only; /* an older driver: only nvmlDeviceGetCurrentClocksThrottleReasons */
    unsigned sm_clock_mhz, sm_clock_max_mhz, mem_clock_mhz, mem_clock_max_mhz;
    unsigned pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
    int gpm_supported;
    unsigned char gpm_state[NVML_GPM_METRIC_MAX];
    double gpm_value[NVML_GPM_METRIC_MAX];
    int mig_mode; /* 0 disabled, 1 enabled; -1 (or not_supported mig_mode): a GPU without MIG */
    int mig_unprivileged; /* the caller is not root: the parent handle's process lists say NO_PERMISSION */
    unsigned mig_max_devices, n_mig;
    struct fake_mig migs[MAX_MIG];
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
    unsigned mig; /* 0: the GPU itself; k + 1: its MIG device k */
};

static struct nvmlDevice_st g_handles[MAX_GPUS];
static struct nvmlDevice_st g_mig_handles[MAX_GPUS][MAX_MIG];

/* A GPM sample: which GPU it was read from and when. Real samples hold counter snapshots; the
 * simulated metrics are the scenario's rates, so a sample only has to prove it was filled. */
#define GPM_SAMPLE_MAGIC 0x47504d53u
struct nvmlGpmSample_st {
    unsigned magic;
    int gpu; /* -1 until nvmlGpmSampleGet fills it */
    unsigned long long t_us;
};
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
    /* A100-SXM4 clocks and link; an idle-looking GPU with no clock event reason active. */
    g->sm_clock_mhz = g->sm_clock_max_mhz = 1410;
    g->mem_clock_mhz = g->mem_clock_max_mhz = 1593;
    g->pcie_gen = g->pcie_gen_max = 4;
    g->pcie_width = g->pcie_width_max = 16;
    g->mig_mode = 0; /* an A100: MIG-capable, disabled; not_supported mig_mode for a GPU without MIG */
    g->mig_max_devices = 7;
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
        else if (!strcmp(key, "energy_mj")) g->energy_mj = u;
        else if (!strcmp(key, "compute_capability")) sscanf(val, "%d.%d", &g->cc_major, &g->cc_minor);
        else if (!strcmp(key, "lost")) g->lost = u != 0;
        else if (!strcmp(key, "clock_event_reasons")) g->clock_event_reasons = u;
        else if (!strcmp(key, "throttle_reasons_only")) g->throttle_reasons_only = u != 0;
        else if (!strcmp(key, "sm_clock_mhz")) g->sm_clock_mhz = (unsigned)u;
        else if (!strcmp(key, "sm_clock_max_mhz")) g->sm_clock_max_mhz = (unsigned)u;
        else if (!strcmp(key, "mem_clock_mhz")) g->mem_clock_mhz = (unsigned)u;
        else if (!strcmp(key, "mem_clock_max_mhz")) g->mem_clock_max_mhz = (unsigned)u;
        else if (!strcmp(key, "pcie_gen")) g->pcie_gen = (unsigned)u;
        else if (!strcmp(key, "pcie_gen_max")) g->pcie_gen_max = (unsigned)u;
        else if (!strcmp(key, "pcie_width")) g->pcie_width = (unsigned)u;
        else if (!strcmp(key, "pcie_width_max")) g->pcie_width_max = (unsigned)u;
        else if (!strcmp(key, "gpm_supported")) g->gpm_supported = u != 0;
        else if (!strcmp(key, "gpm")) { /* "gpm METRIC_ID VALUE" */
            unsigned id;
            double v;
            if (sscanf(val, "%u %lf", &id, &v) == 2 && id < NVML_GPM_METRIC_MAX) {
                g->gpm_state[id] = GPM_VALUE;
                g->gpm_value[id] = v;
            }
        } else if (!strcmp(key, "gpm_not_supported")) {
            if (u < NVML_GPM_METRIC_MAX) g->gpm_state[u] = GPM_NOT_SUPPORTED;
        } else if (!strcmp(key, "mig_mode")) g->mig_mode = (int)strtol(val, NULL, 0);
        else if (!strcmp(key, "mig_unprivileged")) g->mig_unprivileged = u != 0;
        /* As a buggy driver may: any count (indices past the devices held here answer NOT_FOUND). */
        else if (!strcmp(key, "mig_max_devices")) g->mig_max_devices = u < 0xFFFFFFFFu ? (unsigned)u : 0xFFFFFFFFu;
        else if (!strcmp(key, "mig") && g->n_mig < MAX_MIG) { /* "mig UUID GI CI TOTAL_MIB USED_MIB" */
            struct fake_mig *m = &g->migs[g->n_mig];
            unsigned long long total = 0, used = 0;
            if (sscanf(val, "%95s %u %u %llu %llu", m->uuid, &m->gi, &m->ci, &total, &used) == 5) {
                m->mem_total = total * MIB;
                m->mem_used = used * MIB;
                g->n_mig++;
            }
        }
        else if (!strcmp(key, "not_supported")) {
            for (size_t i = 0; i < sizeof ns_names / sizeof ns_names[0]; i++)
                if (!strcmp(val, ns_names[i].name)) g->not_supported |= ns_names[i].bit;
        } else if (!strcmp(key, "proc") && g->n_procs < MAX_PROCS) {
            long long used_mib = -1;
            struct fake_proc *p = &g->procs[g->n_procs];
            p->gi = p->ci = NO_ID;
            if (sscanf(val, "%u %lld %u %u %u %u %u", &p->pid, &used_mib, &p->sm_util, &p->mem_util, &p->types,
                       &p->gi, &p->ci) >= 5) {
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

/* A MIG device handle: its parent GPU, and the MIG device in *mig. NULL when the handle is not one
 * of ours or its MIG device no longer exists (MIG turned off, instance destroyed). */
static struct fake_gpu *lookup_mig(nvmlDevice_t dev, struct fake_mig **mig) {
    uintptr_t p = (uintptr_t)dev, base = (uintptr_t)g_mig_handles;
    if (p < base || p >= base + sizeof g_mig_handles || (p - base) % sizeof g_mig_handles[0][0]) return NULL;
    const struct nvmlDevice_st *h = dev;
    if (h->index >= g_sc.n_gpus || h->mig == 0) return NULL;
    struct fake_gpu *g = &g_sc.gpus[h->index];
    if (g->mig_mode != 1 || h->mig > g->n_mig) return NULL;
    *mig = &g->migs[h->mig - 1];
    return g;
}

/* Prologue for the queries that accept a GPU or a MIG device handle: g is the (parent) GPU, m the
 * MIG device or NULL. */
#define ENTER_ANY_DEVICE(dev, ns_bit) \
    ENTER_SYSTEM(); \
    struct fake_mig *m = NULL; \
    struct fake_gpu *g = lookup(dev); \
    if (!g) g = lookup_mig(dev, &m); \
    if (!g) RETURN(NVML_ERROR_INVALID_ARGUMENT); \
    if (g->lost) RETURN(NVML_ERROR_GPU_IS_LOST); \
    if ((ns_bit) && (g->not_supported & (unsigned)(ns_bit))) RETURN(NVML_ERROR_NOT_SUPPORTED)

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
    ENTER_ANY_DEVICE(device, 0);
    RETURN(put_str(uuid, length, m ? m->uuid : g->uuid));
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
    ENTER_ANY_DEVICE(device, NS_MEMORY);
    if (!memory) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (m) { /* a MIG device: its own slice of memory */
        memory->total = m->mem_total;
        memory->used = m->mem_used;
        memory->free = m->mem_total > m->mem_used ? m->mem_total - m->mem_used : 0;
        RETURN(NVML_SUCCESS);
    }
    /* v1 "used" counts the driver's reservation too; v2 reports it separately. */
    unsigned long long used = g->mem_used + g->mem_reserved;
    memory->total = g->mem_total;
    memory->used = used;
    memory->free = g->mem_total > used ? g->mem_total - used : 0;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    ENTER_ANY_DEVICE(device, NS_MEMORY | NS_MEMORY_V2);
    if (!memory) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != nvmlMemory_v2) RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (m) {
        memory->total = m->mem_total;
        memory->reserved = 0;
        memory->used = m->mem_used;
        memory->free = m->mem_total > m->mem_used ? m->mem_total - m->mem_used : 0;
        RETURN(NVML_SUCCESS);
    }
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
    /* Real drivers: GPU utilisation is not reported for a MIG-enabled GPU (nvitop issue #5). */
    if (g->mig_mode == 1) RETURN(NVML_ERROR_NOT_SUPPORTED);
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

/*
 * nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver was loaded, "for Volta or newer
 * fully supported devices" (nvml.h); NOT_SUPPORTED below compute capability 7.0. The counter grows by
 * the power the GPU reports times the time between two queries (CLOCK_MONOTONIC), the power being
 * what it reads at the later query; it starts at the scenario's energy_mj, and starts there again
 * when a rewrite changes energy_mj (a driver reloaded). Kept per GPU index across scenario reloads.
 */
static struct {
    int started;
    unsigned long long start_mj; /* the energy_mj it started from */
    double mj;
    unsigned long long last_us;
} g_energy[MAX_GPUS];

static unsigned long long monotonic_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    ENTER_DEVICE(device, NS_ENERGY);
    if (!energy) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (g->cc_major < 7) RETURN(NVML_ERROR_NOT_SUPPORTED);
    unsigned i = (unsigned)(g - g_sc.gpus);
    unsigned long long t = monotonic_us();
    if (!g_energy[i].started || g_energy[i].start_mj != g->energy_mj) {
        g_energy[i].started = 1;
        g_energy[i].start_mj = g->energy_mj;
        g_energy[i].mj = (double)g->energy_mj;
    } else {
        g_energy[i].mj += (double)g->power_mw * (double)(t - g_energy[i].last_us) / 1e6;
    }
    g_energy[i].last_us = t;
    *energy = (unsigned long long)g_energy[i].mj;
    RETURN(NVML_SUCCESS);
}

/* ---------------------------------------------------------------- processes */

/* Whether a process appears in a list of `types` asked on the GPU (m NULL) or on MIG device m. */
static int proc_listed(const struct fake_proc *p, unsigned types, const struct fake_mig *m) {
    if (!(p->types & types)) return 0;
    return !m || (p->gi == m->gi && p->ci == m->ci);
}

/*
 * The sizing protocol every NVML list call shares: a count of 0 (or a NULL array) asks for the
 * size, answered SUCCESS when the list is empty and INSUFFICIENT_SIZE with the needed count
 * otherwise. The entry size differs per version, so the caller passes it.
 */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned types, unsigned *count, void *out,
                                      size_t entry_size) {
    ENTER_ANY_DEVICE(device, NS_PROCESSES);
    if (!count) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    /* nvml.h: "In MIG mode, if device handle is provided, the API returns aggregate information,
     * only if the caller has appropriate privileges. Per-instance information can be queried by
     * using specific MIG device handles." An unprivileged caller gets NO_PERMISSION on the parent. */
    if (!m && g->mig_mode == 1 && g->mig_unprivileged) RETURN(NVML_ERROR_NO_PERMISSION);
    unsigned n = 0;
    for (unsigned i = 0; i < g->n_procs; i++) n += proc_listed(&g->procs[i], types, m);
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
        if (!proc_listed(p, types, m)) continue;
        if (entry_size == sizeof(nvmlProcessInfo_v1_t)) {
            nvmlProcessInfo_v1_t *e = (nvmlProcessInfo_v1_t *)out + k;
            e->pid = p->pid;
            e->usedGpuMemory = p->used_bytes;
        } else {
            nvmlProcessInfo_t *e = (nvmlProcessInfo_t *)out + k;
            e->pid = p->pid;
            e->usedGpuMemory = p->used_bytes;
            e->gpuInstanceId = g->mig_mode == 1 ? p->gi : NO_ID; /* NO_ID: not on a MIG device */
            e->computeInstanceId = g->mig_mode == 1 ? p->ci : NO_ID;
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
    /* nvml.h: "On MIG-enabled GPUs, querying process utilization is not currently supported." */
    if (g->mig_mode == 1) RETURN(NVML_ERROR_NOT_SUPPORTED);
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

/* ---------------------------------------------------------------- clocks, clock event reasons, PCIe link */

static nvmlReturn_t clock_of(nvmlDevice_t device, nvmlClockType_t type, unsigned *clock, int max) {
    ENTER_DEVICE(device, 0);
    if (!clock) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (max && (g->not_supported & NS_SM_CLOCK_MAX)) RETURN(NVML_ERROR_NOT_SUPPORTED);
    switch (type) {
    case NVML_CLOCK_GRAPHICS: /* the graphics and SM domains run at one clock on the GPUs modelled */
    case NVML_CLOCK_SM:
        if (!max && (g->not_supported & NS_SM_CLOCK)) RETURN(NVML_ERROR_NOT_SUPPORTED);
        *clock = max ? g->sm_clock_max_mhz : g->sm_clock_mhz;
        RETURN(NVML_SUCCESS);
    case NVML_CLOCK_MEM:
        if (!max && (g->not_supported & NS_MEM_CLOCK)) RETURN(NVML_ERROR_NOT_SUPPORTED);
        *clock = max ? g->mem_clock_max_mhz : g->mem_clock_mhz;
        RETURN(NVML_SUCCESS);
    case NVML_CLOCK_VIDEO:
        RETURN(NVML_ERROR_NOT_SUPPORTED); /* not modelled */
    default:
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    return clock_of(device, type, clock, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    return clock_of(device, type, clock, 1);
}

/*
 * A driver that predates nvmlDeviceGetCurrentClocksEventReasons (renamed from ...ThrottleReasons in
 * the 535 series) does not export it; nvidia-ml-py then raises FUNCTION_NOT_FOUND from its symbol
 * lookup. One library cannot un-export a symbol per scenario, so with `throttle_reasons_only` the
 * new name answers NVML_ERROR_FUNCTION_NOT_FOUND itself: the same exception for a Python caller.
 */
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    ENTER_DEVICE(device, NS_CLOCK_EVENT_REASONS);
    if (g->throttle_reasons_only) RETURN(NVML_ERROR_FUNCTION_NOT_FOUND);
    if (!reasons) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *reasons = g->clock_event_reasons;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    ENTER_DEVICE(device, NS_CLOCK_EVENT_REASONS);
    if (!reasons) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *reasons = g->clock_event_reasons; /* the same bits under their older names */
    RETURN(NVML_SUCCESS);
}

#define PCIE_EXPORT(fn, ns_bit, member) \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *value) { \
        ENTER_DEVICE(device, ns_bit); \
        if (!value) RETURN(NVML_ERROR_INVALID_ARGUMENT); \
        *value = g->member; \
        RETURN(NVML_SUCCESS); \
    }

PCIE_EXPORT(nvmlDeviceGetCurrPcieLinkGeneration, NS_PCIE_GEN, pcie_gen)
PCIE_EXPORT(nvmlDeviceGetMaxPcieLinkGeneration, NS_PCIE_GEN_MAX, pcie_gen_max)
PCIE_EXPORT(nvmlDeviceGetCurrPcieLinkWidth, NS_PCIE_WIDTH, pcie_width)
PCIE_EXPORT(nvmlDeviceGetMaxPcieLinkWidth, NS_PCIE_WIDTH_MAX, pcie_width_max)

/* ---------------------------------------------------------------- GPM (Hopper and newer) */

/* A GPU without the `gpm` scenario key answers isSupportedDevice = 0, as pre-Hopper GPUs do. */
EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport) {
    ENTER_ANY_DEVICE(device, 0);
    (void)m;
    if (!gpmSupport) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION) RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    gpmSupport->isSupportedDevice = g->gpm_supported ? 1 : 0;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample) {
    if (!gpmSample) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlGpmSample_st *sample = calloc(1, sizeof *sample);
    if (!sample) return NVML_ERROR_MEMORY;
    sample->magic = GPM_SAMPLE_MAGIC;
    sample->gpu = -1;
    *gpmSample = sample;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
    if (!gpmSample || gpmSample->magic != GPM_SAMPLE_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    gpmSample->magic = 0; /* a double free is then INVALID_ARGUMENT (unless the memory was reused) */
    free(gpmSample);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
    ENTER_DEVICE(device, 0);
    if (!gpmSample || gpmSample->magic != GPM_SAMPLE_MAGIC) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->gpm_supported) RETURN(NVML_ERROR_NOT_SUPPORTED);
    gpmSample->gpu = (int)(g - g_sc.gpus);
    gpmSample->t_us = now_us();
    RETURN(NVML_SUCCESS);
}

/* Metrics from two filled samples of one GPU: the scenario's rates, whatever the interval. */
EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) {
    ENTER_SYSTEM();
    if (!metricsGet) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION) RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    const struct nvmlGpmSample_st *s1 = metricsGet->sample1, *s2 = metricsGet->sample2;
    if (metricsGet->numMetrics > NVML_GPM_METRIC_MAX || !s1 || !s2 || s1->magic != GPM_SAMPLE_MAGIC ||
        s2->magic != GPM_SAMPLE_MAGIC || s1->gpu < 0 || s1->gpu != s2->gpu || (unsigned)s1->gpu >= g_sc.n_gpus)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    const struct fake_gpu *g = &g_sc.gpus[s1->gpu];
    for (unsigned i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &metricsGet->metrics[i];
        unsigned id = metric->metricId;
        metric->metricInfo.shortName = metric->metricInfo.longName = metric->metricInfo.unit = NULL;
        metric->value = 0.0;
        if (id == 0 || id >= NVML_GPM_METRIC_MAX) metric->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        else if (g->gpm_state[id] == GPM_NOT_SUPPORTED) metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        else {
            metric->nvmlReturn = NVML_SUCCESS;
            metric->value = g->gpm_state[id] == GPM_VALUE ? g->gpm_value[id] : 0.0;
        }
    }
    RETURN(NVML_SUCCESS);
}

/* ---------------------------------------------------------------- MIG */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    ENTER_DEVICE(device, NS_MIG_MODE);
    if (!currentMode || !pendingMode) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (g->mig_mode < 0) RETURN(NVML_ERROR_NOT_SUPPORTED); /* a GPU without MIG */
    *currentMode = *pendingMode = (unsigned)g->mig_mode;
    RETURN(NVML_SUCCESS);
}

/* The most MIG devices the GPU can hold (7 on A100/H100), not how many exist now. */
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    ENTER_DEVICE(device, 0);
    if (!count) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (g->mig_mode < 0) RETURN(NVML_ERROR_NOT_SUPPORTED);
    *count = g->mig_mode == 1 ? g->mig_max_devices : 0;
    RETURN(NVML_SUCCESS);
}

/* Indices below the maximum without a MIG device answer NOT_FOUND (nvml.h). */
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice) {
    ENTER_DEVICE(device, 0);
    if (!migDevice) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (g->mig_mode < 0) RETURN(NVML_ERROR_NOT_SUPPORTED);
    if (g->mig_mode == 0 || index >= g->mig_max_devices) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= g->n_mig) RETURN(NVML_ERROR_NOT_FOUND);
    unsigned gi = (unsigned)(g - g_sc.gpus);
    g_mig_handles[gi][index].index = gi;
    g_mig_handles[gi][index].mig = index + 1;
    *migDevice = &g_mig_handles[gi][index];
    RETURN(NVML_SUCCESS);
}

static nvmlReturn_t instance_id(nvmlDevice_t device, unsigned *id, int compute) {
    ENTER_SYSTEM();
    struct fake_mig *m = NULL;
    struct fake_gpu *g = lookup(device);
    if (g) RETURN(g->lost ? NVML_ERROR_GPU_IS_LOST : NVML_ERROR_NOT_SUPPORTED); /* not a MIG device handle */
    g = lookup_mig(device, &m);
    if (!g || !id) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (g->lost) RETURN(NVML_ERROR_GPU_IS_LOST);
    *id = compute ? m->ci : m->gi;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    return instance_id(device, id, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    return instance_id(device, id, 1);
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    ENTER_ANY_DEVICE(device, 0);
    if (!isMigDevice) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *isMigDevice = m != NULL;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    ENTER_ANY_DEVICE(migDevice, 0);
    if (!device || !m) RETURN(NVML_ERROR_INVALID_ARGUMENT); /* a full GPU's handle is not a MIG handle */
    *device = &g_handles[g - g_sc.gpus];
    RETURN(NVML_SUCCESS);
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
NOT_SUPPORTED_EXPORT(nvmlDeviceGetComputeMode, nvmlComputeMode_t *mode)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetDisplayActive, nvmlEnableState_t *isActive)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetDisplayMode, nvmlEnableState_t *display)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetDriverModel_v2, nvmlDriverModel_t *current, nvmlDriverModel_t *pending)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetDriverModel, nvmlDriverModel_t *current, nvmlDriverModel_t *pending)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetPcieThroughput, nvmlPcieUtilCounter_t counter, unsigned int *value)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetPerformanceState, nvmlPstates_t *pState)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetPersistenceMode, nvmlEnableState_t *mode)
NOT_SUPPORTED_EXPORT(nvmlDeviceGetTotalEccErrors, nvmlMemoryErrorType_t errorType,
                     nvmlEccCounterType_t counterType, unsigned long long *eccCounts)

/*
 * Batched field queries (nvml.h, nvmlDeviceGetFieldValues): each entry's fieldId (scopeId ignored)
 * is answered in its own nvmlReturn, with timestamp, latencyUsec and valueType; the call returns
 * SUCCESS even when every field failed. Modelled, from the scenario: NVML_FI_DEV_POWER_INSTANT and
 * NVML_FI_DEV_POWER_AVERAGE (mW, UINT; the average "supported on Ampere (except GA100) or newer":
 * compute capability 8.6 and up here, NOT_SUPPORTED below), NVML_FI_DEV_POWER_CURRENT_LIMIT (the
 * enforced limit, mW, UINT) and NVML_FI_DEV_GPU_TEMP (DOUBLE, degrees C), each NOT_SUPPORTED with its
 * getter's not_supported name (power, power_limit, temperature). Every other field is NOT_SUPPORTED
 * (nvitop asks for NVLink counts). A lost GPU fails the whole call, like every query of it.
 */
static void field_value(const struct fake_gpu *g, nvmlFieldValue_t *v) {
    v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    switch (v->fieldId) {
    case NVML_FI_DEV_POWER_AVERAGE:
        if (g->cc_major * 10 + g->cc_minor < 86) return;
        /* fall through: the same power, averaged over a second the driver's own way */
    case NVML_FI_DEV_POWER_INSTANT:
        if (g->not_supported & NS_POWER) return;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = g->power_mw;
        break;
    case NVML_FI_DEV_POWER_CURRENT_LIMIT:
        if (g->not_supported & NS_POWER_LIMIT) return;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = g->power_limit_mw;
        break;
    case NVML_FI_DEV_GPU_TEMP:
        if (g->not_supported & NS_TEMPERATURE) return;
        v->valueType = NVML_VALUE_TYPE_DOUBLE;
        v->value.dVal = (double)g->temperature_c;
        break;
    default:
        return;
    }
    v->nvmlReturn = NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    ENTER_DEVICE(device, 0);
    if (valuesCount < 0 || (valuesCount > 0 && !values)) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long t = now_us();
    for (int i = 0; i < valuesCount; i++) {
        values[i].timestamp = (long long)t;
        values[i].latencyUsec = 0;
        field_value(g, &values[i]);
    }
    RETURN(NVML_SUCCESS);
}

/*
 * Deliberately NOT exported: nvmlDeviceGetConfComputeMemSizeInfo and
 * nvmlDeviceGetRunningProcessDetailList. nvitop switches to a legacy process struct (and scrambles
 * pids) when the first exists without the second; exporting neither keeps it on the 24-byte v3
 * layout this library fills.
 */
