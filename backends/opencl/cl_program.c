/* Built and cached OpenCL programs. See cl_program.h. */
#include "cl_program.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "env.h"

#define MAX_PROGRAMS 64

typedef struct built {
    uint64_t key;
    cl_program program;
} built;

static built programs[MAX_PROGRAMS];
static int n_programs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; ++s)
        h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
    return (h ^ 0xFF) * 0x100000001B3ull; /* a separator, so "ab"+"c" differs from "a"+"bc" */
}

/* The cache folder (created), or 0 when the disk cache is off or unusable. */
static int cache_dir(char *buf, size_t len)
{
    const char *env = ffpa_env_string("FFPA_OPENCL_CACHE");
    if (env && !*env)
        return 0;
    int n;
    if (env)
        n = snprintf(buf, len, "%s", env);
    else if (ffpa_env_string("XDG_CACHE_HOME"))
        n = snprintf(buf, len, "%s/ffpa/opencl", ffpa_env_string("XDG_CACHE_HOME"));
    else if (ffpa_env_string("HOME"))
        n = snprintf(buf, len, "%s/.cache/ffpa/opencl", ffpa_env_string("HOME"));
    else
        return 0;
    if (n <= 0 || (size_t)n >= len)
        return 0;
    /* mkdir -p */
    for (char *p = buf + 1; *p; ++p)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return 0;
            *p = '/';
        }
    return mkdir(buf, 0755) == 0 || errno == EEXIST;
}

static cl_program from_binary(const ffpa_cl_device *dev, const char *path, const char *options)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *bin = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (bin = malloc((size_t)size)) && fread(bin, 1, (size_t)size, f) != (size_t)size) {
        free(bin);
        bin = NULL;
    }
    fclose(f);
    if (!bin)
        return NULL;
    size_t bytes = (size_t)size;
    cl_int status = CL_SUCCESS, e = CL_SUCCESS;
    const unsigned char *bins[1] = {bin};
    cl_program p = clCreateProgramWithBinary(dev->context, 1, &dev->device, &bytes, bins, &status, &e);
    free(bin);
    if (e != CL_SUCCESS || status != CL_SUCCESS)
        return NULL;
    if (clBuildProgram(p, 1, &dev->device, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static void to_binary(const ffpa_cl_device *dev, cl_program p, const char *path)
{
    size_t bytes = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bytes, &bytes, NULL) != CL_SUCCESS || bytes == 0)
        return;
    unsigned char *bin = malloc(bytes);
    unsigned char *bins[1] = {bin};
    if (bin && clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS) {
        /* Written beside, then renamed: a concurrent process sees all of it or none. */
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        if (f) {
            int ok = fwrite(bin, 1, bytes, f) == bytes;
            ok = fclose(f) == 0 && ok;
            if (!ok || rename(tmp, path) != 0)
                unlink(tmp);
        }
    }
    (void)dev;
    free(bin);
}

static ffpa_status from_source(const ffpa_cl_device *dev, const char *source, const char *options, cl_program *out,
                               char *err, size_t err_len)
{
    cl_int e = CL_SUCCESS;
    cl_program p = clCreateProgramWithSource(dev->context, 1, &source, NULL, &e);
    if (e != CL_SUCCESS) {
        snprintf(err, err_len, "opencl: creating the program: %s", ffpa_cl_error_string(e));
        return FFPA_ERR_DEVICE;
    }
    e = clBuildProgram(p, 1, &dev->device, options, NULL, NULL);
    if (e != CL_SUCCESS) {
        char log[1024] = "";
        clGetProgramBuildInfo(p, dev->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        log[sizeof log - 1] = '\0';
        for (char *c = log; *c; ++c) /* one line of message */
            if (*c == '\n')
                *c = ' ';
        snprintf(err, err_len, "opencl: building the kernels (options \"%s\") failed: %s; build log: %s", options,
                 ffpa_cl_error_string(e), log);
        clReleaseProgram(p);
        return FFPA_ERR_DEVICE;
    }
    *out = p;
    return FFPA_OK;
}

/* The sources are the embedded static strings (embed_cl.py): each one's
 * hash is taken once, not on every launch (tens of KiB per launch). Called
 * with the lock held. */
static uint64_t source_hash(const char *source)
{
    static struct {
        const char *source;
        uint64_t hash;
    } known[8];
    static int n_known;
    for (int i = 0; i < n_known; ++i)
        if (known[i].source == source)
            return known[i].hash;
    const uint64_t h = fnv1a(0xCBF29CE484222325ull, source);
    if (n_known < (int)(sizeof known / sizeof known[0])) {
        known[n_known].source = source;
        known[n_known++].hash = h;
    }
    return h;
}

ffpa_status ffpa_cl_program(const ffpa_cl_device *dev, const char *source, const char *base_options, cl_program *out,
                            char *err, size_t err_len)
{
    char options[512];
    const char *extra = ffpa_env_string("FFPA_OPENCL_BUILD_OPTIONS");
    snprintf(options, sizeof options, "%s%s%s", base_options, extra ? " " : "", extra ? extra : "");

    pthread_mutex_lock(&lock);
    const uint64_t src = source_hash(source);
    const uint64_t key = fnv1a(fnv1a(src, dev->cache_key), options);
    for (int i = 0; i < n_programs; ++i)
        if (programs[i].key == key) {
            *out = programs[i].program;
            pthread_mutex_unlock(&lock);
            return FFPA_OK;
        }
    char dir[400], path[512];
    cl_program p = NULL;
    const int cached = cache_dir(dir, sizeof dir);
    if (cached) {
        snprintf(path, sizeof path, "%s/%016llx.bin", dir, (unsigned long long)key);
        p = from_binary(dev, path, options);
    }
    ffpa_status s = FFPA_OK;
    if (!p && (s = from_source(dev, source, options, &p, err, err_len)) == FFPA_OK && cached)
        to_binary(dev, p, path);
    if (s == FFPA_OK) {
        if (n_programs < MAX_PROGRAMS)
            programs[n_programs++] = (built){key, p};
        /* else: this call's program is used and kept, just not looked up again */
        *out = p;
    }
    pthread_mutex_unlock(&lock);
    return s;
}
