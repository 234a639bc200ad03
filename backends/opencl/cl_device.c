/* The OpenCL device of the process. See cl_device.h. */
#include "cl_device.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

#define MAX_PLATFORMS 16
#define MAX_DEVICES 64

static ffpa_cl_device dev;
static int opened;       /* dev is usable */
static char opened_choice[128]; /* FFPA_OPENCL_DEVICE when dev was opened */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

const char *ffpa_cl_error_string(int error)
{
    static const struct {
        int code;
        const char *name;
    } names[] = {{0, "CL_SUCCESS"},
                 {-1, "CL_DEVICE_NOT_FOUND"},
                 {-2, "CL_DEVICE_NOT_AVAILABLE"},
                 {-3, "CL_COMPILER_NOT_AVAILABLE"},
                 {-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
                 {-5, "CL_OUT_OF_RESOURCES"},
                 {-6, "CL_OUT_OF_HOST_MEMORY"},
                 {-11, "CL_BUILD_PROGRAM_FAILURE"},
                 {-30, "CL_INVALID_VALUE"},
                 {-33, "CL_INVALID_DEVICE"},
                 {-34, "CL_INVALID_CONTEXT"},
                 {-36, "CL_INVALID_COMMAND_QUEUE"},
                 {-38, "CL_INVALID_MEM_OBJECT (a pointer not from ffpa_malloc on this backend)"},
                 {-42, "CL_INVALID_BINARY"},
                 {-43, "CL_INVALID_BUILD_OPTIONS"},
                 {-44, "CL_INVALID_PROGRAM"},
                 {-45, "CL_INVALID_PROGRAM_EXECUTABLE"},
                 {-46, "CL_INVALID_KERNEL_NAME"},
                 {-48, "CL_INVALID_KERNEL"},
                 {-49, "CL_INVALID_ARG_INDEX"},
                 {-50, "CL_INVALID_ARG_VALUE"},
                 {-51, "CL_INVALID_ARG_SIZE"},
                 {-52, "CL_INVALID_KERNEL_ARGS"},
                 {-54, "CL_INVALID_WORK_GROUP_SIZE"},
                 {-61, "CL_INVALID_BUFFER_SIZE"},
                 {-1001, "CL_PLATFORM_NOT_FOUND_KHR"}};
    static __thread char other[48];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (names[i].code == error)
            return names[i].name;
    snprintf(other, sizeof other, "OpenCL error %d", error);
    return other;
}

static void info_string(cl_device_id d, cl_device_info what, char *buf, size_t len)
{
    buf[0] = '\0';
    if (clGetDeviceInfo(d, what, len, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[len - 1] = '\0';
}

static void platform_string(cl_platform_id p, cl_platform_info what, char *buf, size_t len)
{
    buf[0] = '\0';
    if (clGetPlatformInfo(p, what, len, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[len - 1] = '\0';
}

static int contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; ++hay) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            ++i;
        if (i == n)
            return 1;
    }
    return n == 0;
}

typedef struct candidate {
    cl_platform_id platform;
    cl_device_id device;
    int platform_index, device_index;
    cl_device_type type;
    char label[256]; /* "<platform> <device>" */
} candidate;

static int list_devices(candidate *out, int max, char *err, size_t err_len)
{
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int e = clGetPlatformIDs(MAX_PLATFORMS, platforms, &np);
    if (e == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (e == CL_SUCCESS && np == 0)) {
        snprintf(err, err_len,
                 "no OpenCL platform: the ICD loader found none (install one, e.g. Debian's pocl-opencl-icd, or "
                 "point OCL_ICD_VENDORS at a folder of .icd files)");
        return -1;
    }
    if (e != CL_SUCCESS) {
        snprintf(err, err_len, "opencl: listing the platforms: %s", ffpa_cl_error_string(e));
        return -1;
    }
    int n = 0;
    for (cl_uint p = 0; p < np && p < MAX_PLATFORMS; ++p) {
        cl_device_id devices[MAX_DEVICES];
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devices, &nd) != CL_SUCCESS)
            continue;
        char pname[96];
        platform_string(platforms[p], CL_PLATFORM_NAME, pname, sizeof pname);
        for (cl_uint d = 0; d < nd && d < MAX_DEVICES && n < max; ++d) {
            candidate *c = &out[n++];
            c->platform = platforms[p];
            c->device = devices[d];
            c->platform_index = (int)p;
            c->device_index = (int)d;
            c->type = 0;
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof c->type, &c->type, NULL);
            char dname[128];
            info_string(devices[d], CL_DEVICE_NAME, dname, sizeof dname);
            snprintf(c->label, sizeof c->label, "%s %s", pname, dname);
        }
    }
    if (n == 0) {
        snprintf(err, err_len, "no OpenCL device on the %u platform(s) found", (unsigned)np);
        return -1;
    }
    return n;
}

/* The candidate FFPA_OPENCL_DEVICE names, or -1 with the list in err. */
static int choose(const candidate *c, int n, const char *choice, char *err, size_t err_len)
{
    if (!choice || !*choice) {
        for (int i = 0; i < n; ++i)
            if (c[i].type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR))
                return i;
        return 0;
    }
    int p, d;
    char tail;
    if (sscanf(choice, "%d:%d%c", &p, &d, &tail) == 2) {
        for (int i = 0; i < n; ++i)
            if (c[i].platform_index == p && c[i].device_index == d)
                return i;
    } else if (sscanf(choice, "%d%c", &d, &tail) == 1) {
        if (d >= 0 && d < n)
            return d;
    } else {
        for (int i = 0; i < n; ++i)
            if (contains_nocase(c[i].label, choice))
                return i;
    }
    size_t used = (size_t)snprintf(err, err_len, "FFPA_OPENCL_DEVICE=%s: no such device; expected one of:", choice);
    for (int i = 0; i < n && used < err_len; ++i)
        used += (size_t)snprintf(err + used, err_len - used, " %d (%d:%d) \"%s\"%s", i, c[i].platform_index,
                                 c[i].device_index, c[i].label, i + 1 < n ? "," : "");
    return -1;
}

/* 10 major + minor for an NVIDIA device (cl_nv_device_attribute_query's
 * CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV / MINOR_NV, named by value: not
 * every header set has cl_ext.h's NVIDIA names); 0 for any other. */
static int nvidia_compute_capability(cl_device_id d)
{
    size_t len = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || len == 0)
        return 0;
    char *ext = malloc(len + 1);
    int has = ext && clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, len, ext, NULL) == CL_SUCCESS &&
              (ext[len] = '\0', strstr(ext, "cl_nv_device_attribute_query") != NULL);
    free(ext);
    cl_uint major = 0, minor = 0;
    if (!has || clGetDeviceInfo(d, 0x4000, sizeof major, &major, NULL) != CL_SUCCESS ||
        clGetDeviceInfo(d, 0x4001, sizeof minor, &minor, NULL) != CL_SUCCESS)
        return 0;
    return (int)(10 * major + minor);
}

static int open_device(const candidate *c, char *err, size_t err_len)
{
    cl_int e = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)c->platform, 0};
    dev.platform = c->platform;
    dev.device = c->device;
    dev.context = clCreateContext(props, 1, &c->device, NULL, NULL, &e);
    if (e != CL_SUCCESS) {
        snprintf(err, err_len, "opencl: creating a context on %s: %s", c->label, ffpa_cl_error_string(e));
        return 0;
    }
    dev.queue = clCreateCommandQueue(dev.context, c->device, 0, &e);
    if (e != CL_SUCCESS) {
        clReleaseContext(dev.context);
        snprintf(err, err_len, "opencl: creating a queue on %s: %s", c->label, ffpa_cl_error_string(e));
        return 0;
    }
    char dname[128], pname[96], dver[96], drv[64], pver[96];
    info_string(c->device, CL_DEVICE_NAME, dname, sizeof dname);
    info_string(c->device, CL_DEVICE_VERSION, dver, sizeof dver);
    info_string(c->device, CL_DRIVER_VERSION, drv, sizeof drv);
    platform_string(c->platform, CL_PLATFORM_NAME, pname, sizeof pname);
    platform_string(c->platform, CL_PLATFORM_VERSION, pver, sizeof pver);
    dev.is_gpu = (c->type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
    dev.nv_cc = nvidia_compute_capability(c->device);
    snprintf(dev.name, sizeof dev.name, "%.80s (%.40s, %s)", dname, pname,
             dev.is_gpu ? "GPU" : (c->type & CL_DEVICE_TYPE_CPU) ? "CPU" : "other");
    snprintf(dev.cache_key, sizeof dev.cache_key, "%s|%s|%s|%s|%s", dname, dver, drv, pname, pver);
    return 1;
}

const ffpa_cl_device *ffpa_cl_device_get(char *err, size_t err_len)
{
    const char *choice = ffpa_env_string("FFPA_OPENCL_DEVICE");
    const ffpa_cl_device *result = NULL;
    pthread_mutex_lock(&lock);
    if (opened) {
        if (strcmp(opened_choice, choice ? choice : "") == 0)
            result = &dev;
        else
            snprintf(err, err_len,
                     "FFPA_OPENCL_DEVICE=%s after this process opened %s (FFPA_OPENCL_DEVICE=%s); expected one "
                     "device per process",
                     choice ? choice : "(unset)", dev.name, opened_choice[0] ? opened_choice : "(unset)");
    } else {
        candidate all[MAX_DEVICES];
        int n = list_devices(all, MAX_DEVICES, err, err_len);
        int i = n > 0 ? choose(all, n, choice, err, err_len) : -1;
        if (i >= 0 && open_device(&all[i], err, err_len)) {
            opened = 1;
            snprintf(opened_choice, sizeof opened_choice, "%s", choice ? choice : "");
            result = &dev;
        }
    }
    pthread_mutex_unlock(&lock);
    return result;
}

cl_command_queue ffpa_cl_queue(void *stream)
{
    return stream ? (cl_command_queue)stream : dev.queue;
}

void ffpa_cl_fill_caps(const ffpa_cl_device *d, ffpa_backend_caps *caps)
{
    memset(caps, 0, sizeof *caps);
    snprintf(caps->device_name, sizeof caps->device_name, "%s", d->name);
    caps->dtype_mask = (1u << FFPA_F16) | (1u << FFPA_BF16) | (1u << FFPA_F32);
    caps->max_head_dim = FFPA_MAX_HEAD_DIM;
    caps->has_backward = 1;
    caps->variants = FFPA_VARIANT_WINDOW | FFPA_VARIANT_SOFTCAP | FFPA_VARIANT_ALIBI;
    ffpa_device_limits *lim = &caps->limits;
    cl_uint units = 1;
    cl_ulong local = 0;
    size_t wg = 1;
    clGetDeviceInfo(d->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    clGetDeviceInfo(d->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    clGetDeviceInfo(d->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    lim->is_gpu = d->is_gpu;
    lim->sm_count = (int)units;
    lim->warp_size = 32;
    /* FFPA_OPENCL_LOCAL_MEM: at most this many bytes of local memory per
     * work-group (a device's own limit when smaller), for the tile planner. */
    const long cap = ffpa_env_long("FFPA_OPENCL_LOCAL_MEM", 0, 0, 1L << 30, NULL);
    if (cap > 0 && (cl_ulong)cap < local)
        local = (cl_ulong)cap;
    lim->smem_per_block = (size_t)local;
    lim->smem_per_sm = (size_t)local;
    lim->max_threads_per_block = (int)wg;
}
