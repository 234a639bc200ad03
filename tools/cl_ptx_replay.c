/*
 * Replays an OpenCL forward kernel (kernels/fwd_mma.cl's ffpa_fwd_mma,
 * fwd_tiled.cl's ffpa_fwd_tiled: the same arguments) from the PTX that
 * NVIDIA's OpenCL driver left in the program cache, through the CUDA driver
 * API, so that Nsight Compute (which does not see OpenCL launches) can
 * profile the very code the OpenCL run executes.
 *
 *   [FFPA_REPLAY_OPENCL=1|2] cl_ptx_replay PTX KERNEL BR B,H,N,D [reps]
 *
 * PTX: a cache file of FFPA_OPENCL_CACHE with its NULs removed (the driver
 * stores the program's PTX text), built for the D given; KERNEL: its entry;
 * BR: the kernel's query rows a work-group (fwd_mma: 16 WM, 64 at D = 512
 * under the plan's 4x2 warps); the work-group size comes from the entry's
 * .reqntid. Dense bf16 q, k, v, o [B, H, N, D], no mask: the shape of the
 * issue's figure. It checks rows of O against a float64 reference, then
 * times `reps` launches (CUDA events) and prints TFLOP/s, to be set beside
 * the OpenCL run's.
 *
 * FFPA_REPLAY_CACHE_MODE=cg|ca JITs the PTX with that default cache policy
 * for global loads (L2 only / L1 too), FFPA_REPLAY_CARVEOUT=percent and
 * FFPA_REPLAY_PREFER_L1=1 set the L1 / shared-memory split.
 *
 * FFPA_REPLAY_OPENCL=1 launches the same PTX through OpenCL instead (the
 * NVIDIA platform's clCreateProgramWithBinary, these arguments and one
 * buffer for q, k and v as here); =2 with q, k and v in three buffers, as
 * ffpa's launch has them. FFPA_REPLAY_OPENCL_OPTIONS: the build options of
 * that binary (default -cl-nv-verbose: the JIT's ptxas figures printed). Where the OpenCL run is slower than the replay,
 * that tells NVIDIA's OpenCL with this kernel (1 slow) from ffpa's launch
 * and buffers (1 fast) apart (docs/notes/opencl.md).
 *
 * FFPA_REPLAY_JIT_ONLY=cuda|opencl (PTX the only argument): one JIT, no
 * launch; its SASS lands in the driver's compute cache (see main).
 *
 * FFPA_REPLAY_TRACE=1 instruments the PTX first: work-item 0 of every
 * work-group counts itself in and out of a per-multiprocessor counter
 * (%smid, atomics into the otherwise unused ALiBi argument's buffer), and
 * the check launch's deepest count per multiprocessor is printed for either
 * launch: how many work-groups each multiprocessor really ran at once,
 * which no occupancy query of the OpenCL launch can say.
 *
 * Built as tools/cl-ptx-replay where both the CUDA toolkit and the OpenCL
 * plugin are (GPU machines; tools/meson.build). The params struct is the
 * OpenCL host's (cl_params.h), so it cannot drift from the kernel's layout.
 */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <cuda.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/opencl/kernels/cl_params.h"
#include "dtype.h"

#define CHECK(call)                                                                                                \
    do {                                                                                                           \
        CUresult r_ = (call);                                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                                  \
            const char *s_ = "?";                                                                                  \
            cuGetErrorString(r_, &s_);                                                                             \
            fprintf(stderr, "cl_ptx_replay: %s: %s\n", #call, s_);                                                 \
            exit(1);                                                                                               \
        }                                                                                                          \
    } while (0)

#define CL_CHECK(call)                                                                                             \
    do {                                                                                                           \
        cl_int e_ = (call);                                                                                        \
        if (e_ != CL_SUCCESS) {                                                                                    \
            fprintf(stderr, "cl_ptx_replay: %s: OpenCL error %d\n", #call, (int)e_);                              \
            exit(1);                                                                                               \
        }                                                                                                          \
    } while (0)

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) {
        perror(path);
        exit(1);
    }
    s[n] = 0;
    fclose(f);
    return s;
}

/* The work-group size the kernel demands (its entry's .reqntid). */
static int reqntid(const char *ptx, const char *kernel)
{
    char entry[128];
    snprintf(entry, sizeof entry, ".entry %s(", kernel);
    const char *e = strstr(ptx, entry);
    const char *r = e ? strstr(e, ".reqntid") : NULL;
    return r ? atoi(r + strlen(".reqntid")) : 0;
}

/* FFPA_REPLAY_TRACE: counters after the ALiBi argument's address (unused
 * here): [0, 256) the groups resident on multiprocessor i now, [256, 512)
 * the most at once, [512, 768) all it ran. */
enum { kTraceSms = 256, kTraceBytes = 3 * kTraceSms * 4 };
static const int kTraceParam = 7; /* ffpa_fwd_{tiled,mma}'s alibib */

static char *trace_append(char *o, const char *text)
{
    const size_t n = strlen(text);
    memcpy(o, text, n);
    return o + n;
}

/* The PTX with the count in at the entry body's first instruction and the
 * count out before each ret (work-item 0 only). NULL if the entry or its
 * parameter is not found. */
static char *trace_ptx(const char *ptx, const char *kernel)
{
    char entry[128], param[160];
    snprintf(entry, sizeof entry, ".entry %s(", kernel);
    snprintf(param, sizeof param, "%s_param_%d", kernel, kTraceParam);
    const char *e = strstr(ptx, entry);
    const char *close = e ? strchr(e, ')') : NULL;
    const char *body = close ? strchr(close, '{') : NULL;
    if (!body || !strstr(e, param))
        return NULL;
    char *out = malloc(strlen(ptx) * 2 + 65536), *o = out;
    memcpy(o, ptx, (size_t)(body - ptx + 1));
    o += body - ptx + 1;
    const char *c = body + 1;
    int depth = 1, placed = 0, label = 0;
    char text[1024];
    while (*c && depth > 0) {
        const char *eol = strchr(c, '\n');
        const size_t len = eol ? (size_t)(eol - c + 1) : strlen(c);
        const char *t = c;
        while (t < c + len && (*t == ' ' || *t == '\t'))
            ++t;
        const int blank = t == c + len || *t == '\n' || *t == '\r';
        if (!placed && !blank && *t != '.' && *t != '{' && *t != '}' && strncmp(t, "//", 2) != 0) {
            snprintf(text, sizeof text,
                     "{\n.reg .b32 %%trw<4>;\n.reg .b64 %%trd<2>;\n.reg .pred %%trq;\nmov.u32 %%trw0, %%tid.x;\n"
                     "setp.ne.u32 %%trq, %%trw0, 0;\n@%%trq bra TRACE_IN;\nld.param.u64 %%trd0, [%s];\n"
                     "cvta.to.global.u64 %%trd0, %%trd0;\nmov.u32 %%trw1, %%smid;\nmul.wide.u32 %%trd1, %%trw1, 4;\n"
                     "add.u64 %%trd1, %%trd0, %%trd1;\natom.global.add.u32 %%trw2, [%%trd1], 1;\n"
                     "add.u32 %%trw2, %%trw2, 1;\natom.global.max.u32 %%trw3, [%%trd1+%d], %%trw2;\n"
                     "atom.global.add.u32 %%trw3, [%%trd1+%d], 1;\nTRACE_IN:\n}\n",
                     param, kTraceSms * 4, 2 * kTraceSms * 4);
            o = trace_append(o, text);
            placed = 1;
        }
        /* ret; or @%p ret; or @!%p ret; */
        const char *r = strstr(t, "ret;");
        if (placed && r && r < c + len && (r == t || *t == '@')) {
            snprintf(text, sizeof text,
                     "{\n.reg .b32 %%trx<2>;\n.reg .b64 %%trz<2>;\n.reg .pred %%trp;\nmov.u32 %%trx0, %%tid.x;\n"
                     "setp.ne.u32 %%trp, %%trx0, 0;\n@%%trp bra TRACE_OUT%d;\nld.param.u64 %%trz0, [%s];\n"
                     "cvta.to.global.u64 %%trz0, %%trz0;\nmov.u32 %%trx1, %%smid;\nmul.wide.u32 %%trz1, %%trx1, 4;\n"
                     "add.u64 %%trz1, %%trz0, %%trz1;\nred.global.add.u32 [%%trz1], 4294967295;\nTRACE_OUT%d:\n}\n",
                     label, param, label);
            if (*t == '@') { /* the count out only where it returns */
                char pred[64] = "", skip[128];
                sscanf(t + 1, "%63[^ \t]", pred);
                snprintf(skip, sizeof skip, "@%s%s bra TRACE_KEEP%d;\n", pred[0] == '!' ? "" : "!",
                         pred[0] == '!' ? pred + 1 : pred, label);
                o = trace_append(o, skip);
                o = trace_append(o, text);
                snprintf(skip, sizeof skip, "ret;\nTRACE_KEEP%d:\n", label);
                o = trace_append(o, skip);
                ++label;
                c += len;
                continue;
            }
            o = trace_append(o, text);
            ++label;
        }
        for (const char *k = c; k < c + len; ++k)
            depth += *k == '{' ? 1 : *k == '}' ? -1 : 0;
        memcpy(o, c, len);
        o += len;
        c += len;
    }
    o = trace_append(o, c);
    *o = 0;
    return placed ? out : (free(out), NULL);
}

/* The deepest count per multiprocessor: how many held k groups at once. */
static void trace_report(const char *launch, const uint32_t *cnt)
{
    int hist[65] = {0}, sms = 0;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int i = 0; i < kTraceSms; ++i) {
        const uint32_t ran = cnt[2 * kTraceSms + i];
        if (!ran)
            continue;
        ++sms;
        lo = ran < lo ? ran : lo;
        hi = ran > hi ? ran : hi;
        const uint32_t m = cnt[kTraceSms + i];
        ++hist[m > 64 ? 64 : m];
    }
    printf("trace (%s): %d multiprocessors ran %u-%u work-groups each; most at once:", launch, sms, lo, hi);
    for (int k = 0; k <= 64; ++k)
        if (hist[k])
            printf(" %d on %d", k, hist[k]);
    printf("\n");
}

/* Rows of the first and last head of out against float64; prints and
 * returns the largest error (infinite where a NaN, the poison, is left). */
static double check_rows(const uint16_t *host, const uint16_t *out, long b, long h, long n, long d, float scale)
{
    const size_t elems = (size_t)(b * h * n * d);
    double worst = 0.0;
    const long rows[] = {0, 1, n / 2 + 3, n - 1};
    double *s = malloc((size_t)n * sizeof *s);
    for (int hh = 0; hh < 2; ++hh)
        for (int r = 0; r < 4; ++r) {
            const long head = hh ? b * h - 1 : 0, i = rows[r];
            const uint16_t *q = host + (size_t)(head * n + i) * d, *k = host + elems + (size_t)head * n * d,
                           *v = host + 2 * elems + (size_t)head * n * d;
            double mx = -INFINITY, sum = 0.0;
            for (long j = 0; j < n; ++j) {
                double dot = 0.0;
                for (long c = 0; c < d; ++c)
                    dot += ffpa_bf16_to_f32(q[c]) * ffpa_bf16_to_f32(k[j * d + c]);
                s[j] = dot * scale;
                mx = fmax(mx, s[j]);
            }
            for (long j = 0; j < n; ++j)
                sum += s[j] = exp(s[j] - mx);
            for (long c = 0; c < d; ++c) {
                double ref = 0.0;
                for (long j = 0; j < n; ++j)
                    ref += s[j] * ffpa_bf16_to_f32(v[j * d + c]);
                const double got = ffpa_bf16_to_f32(out[(size_t)(head * n + i) * d + c]), err = fabs(got - ref / sum);
                worst = isnan(got) ? INFINITY : fmax(worst, err);
            }
        }
    free(s);
    printf("check: 8 rows x %ld columns, max |error| %.3g: %s\n", d, worst, worst < 2e-2 ? "ok" : "FAIL");
    return worst;
}

/* FFPA_REPLAY_OPENCL: the PTX through NVIDIA's OpenCL, the same arguments;
 * separate: q, k and v in three buffers. Returns the check's error. */
/* NVIDIA's OpenCL platform: its GPU, a context and the PTX built as a
 * program binary (the driver's JIT runs in clBuildProgram). */
typedef struct nv_opencl {
    cl_device_id dev;
    cl_context ctx;
    cl_program prog;
} nv_opencl;

static nv_opencl opencl_build(const char *ptx)
{
    nv_opencl o = {0};
    cl_platform_id pl[8];
    cl_uint np = 0;
    CL_CHECK(clGetPlatformIDs(8, pl, &np));
    for (cl_uint i = 0; i < np && !o.dev; ++i) {
        char name[256] = "";
        clGetPlatformInfo(pl[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
        if (!strstr(name, "NVIDIA") || clGetDeviceIDs(pl[i], CL_DEVICE_TYPE_GPU, 1, &o.dev, NULL) != CL_SUCCESS)
            o.dev = 0;
    }
    if (!o.dev) {
        fprintf(stderr, "cl_ptx_replay: no NVIDIA OpenCL GPU (an .icd in OCL_ICD_VENDORS?)\n");
        exit(1);
    }
    cl_int e;
    o.ctx = clCreateContext(NULL, 1, &o.dev, NULL, NULL, &e);
    CL_CHECK(e);
    const size_t len = strlen(ptx) + 1;
    const unsigned char *bin = (const unsigned char *)ptx;
    cl_int status;
    o.prog = clCreateProgramWithBinary(o.ctx, 1, &o.dev, &len, &bin, &status, &e);
    CL_CHECK(e);
    /* NVIDIA's JIT of the PTX happens here: -cl-nv-verbose makes its build
     * log carry ptxas's registers, stack and spills for the OpenCL build,
     * to set beside the CUDA driver's; -cl-nv-maxrregcount=N or
     * -cl-nv-opt-level=N (cl_nv_compiler_options) test what it chose. */
    const char *opts = getenv("FFPA_REPLAY_OPENCL_OPTIONS");
    if (!opts)
        opts = "-cl-nv-verbose";
    const cl_int built = clBuildProgram(o.prog, 1, &o.dev, opts, NULL, NULL);
    char log[4096] = "";
    clGetProgramBuildInfo(o.prog, o.dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    printf("OpenCL build (%s): %s\n", opts, log[0] ? log : "(empty log)");
    CL_CHECK(built);
    return o;
}

static double opencl_replay(const char *ptx, const char *kernel, int wg, size_t groups, ffpa_cl_fwd_params p,
                            const ffpa_cl_kv_params *kv, const uint16_t *host, long b, long h, long n, long d,
                            int reps, int separate)
{
    const nv_opencl nv = opencl_build(ptx);
    const cl_device_id dev = nv.dev;
    const cl_context ctx = nv.ctx;
    const cl_program prog = nv.prog;
    cl_int e;
    cl_command_queue q = clCreateCommandQueueWithProperties(
        ctx, dev, (cl_queue_properties[]){CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0}, &e);
    CL_CHECK(e);
    cl_kernel k = clCreateKernel(prog, kernel, &e);
    CL_CHECK(e);
    cl_ulong local_bytes = 0, private_bytes = 0;
    size_t wg_max = 0;
    clGetKernelWorkGroupInfo(k, dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local_bytes, &local_bytes, NULL);
    clGetKernelWorkGroupInfo(k, dev, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof private_bytes, &private_bytes, NULL);
    clGetKernelWorkGroupInfo(k, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg_max, &wg_max, NULL);
    printf("OpenCL kernel: %llu bytes local, %llu bytes private a work-item, at most %zu work-items a group\n",
           (unsigned long long)local_bytes, (unsigned long long)private_bytes, wg_max);

    const size_t elems = (size_t)(b * h * n * d);
    cl_mem qkv[3], o, dummy;
    const int nbuf = separate ? 3 : 1;
    for (int i = 0; i < nbuf; ++i) {
        const size_t count = separate ? elems : 3 * elems;
        qkv[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, count * 2,
                                (void *)(host + (size_t)i * elems), &e);
        CL_CHECK(e);
    }
    if (!separate)
        qkv[1] = qkv[2] = qkv[0];
    else
        p.k_off = p.v_off = 0;
    o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, elems * 2, NULL, &e);
    CL_CHECK(e);
    dummy = clCreateBuffer(ctx, CL_MEM_READ_WRITE, kTraceBytes, NULL, &e);
    CL_CHECK(e);
    const uint8_t poison = 0xff, zero = 0;
    CL_CHECK(clEnqueueFillBuffer(q, o, &poison, 1, 0, elems * 2, 0, NULL, NULL));
    CL_CHECK(clEnqueueFillBuffer(q, dummy, &zero, 1, 0, kTraceBytes, 0, NULL, NULL));
    const struct {
        size_t size;
        const void *value;
    } args[] = {{sizeof p, &p},        {sizeof(cl_mem), &qkv[0]}, {sizeof(cl_mem), &qkv[1]}, {sizeof(cl_mem), &qkv[2]},
                {sizeof(cl_mem), &o},  {sizeof(cl_mem), &dummy},  {sizeof(cl_mem), &dummy},  {sizeof(cl_mem), &dummy},
                {sizeof(cl_mem), &dummy}, {sizeof *kv, kv},       {sizeof(cl_mem), &dummy},  {sizeof(cl_mem), &dummy}};
    for (cl_uint i = 0; i < sizeof args / sizeof args[0]; ++i)
        CL_CHECK(clSetKernelArg(k, i, args[i].size, args[i].value));
    const size_t local = (size_t)wg, global = groups * local;
    CL_CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
    uint16_t *out = malloc(elems * 2);
    CL_CHECK(clEnqueueReadBuffer(q, o, CL_TRUE, 0, elems * 2, out, 0, NULL, NULL));
    const double worst = check_rows(host, out, b, h, n, d, p.scale);
    free(out);
    if (getenv("FFPA_REPLAY_TRACE")) {
        uint32_t cnt[3 * kTraceSms];
        CL_CHECK(clEnqueueReadBuffer(q, dummy, CL_TRUE, 0, kTraceBytes, cnt, 0, NULL, NULL));
        trace_report("OpenCL", cnt);
    }

    cl_event first = NULL, last = NULL;
    for (int r = 0; r < reps; ++r) {
        cl_event ev;
        CL_CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev));
        if (!first)
            first = ev;
        else if (last)
            clReleaseEvent(last);
        if (ev != first)
            last = ev;
    }
    CL_CHECK(clFinish(q));
    cl_ulong t0 = 0, t1 = 0;
    CL_CHECK(clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL));
    CL_CHECK(clGetEventProfilingInfo(last ? last : first, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL));
    const double ms = (double)(t1 - t0) / 1e6 / (reps > 0 ? reps : 1);
    printf("time (OpenCL, %s): %.3f ms, %.1f TFLOP/s (B=%ld H=%ld N=%ld D=%ld)\n",
           separate ? "three buffers" : "one buffer", ms, 4.0 * b * h * n * n * d / (ms * 1e9), b, h, n, d);
    return worst;
}

/* Device 0's primary context, made current. */
static void cuda_context(void)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
}

int main(int argc, char **argv)
{
    /* FFPA_REPLAY_JIT_ONLY=cuda|opencl: only the one JIT of the PTX (any
     * program of the OpenCL cache), its SASS left in the driver's compute
     * cache (CUDA_CACHE_PATH, which NVIDIA's OpenCL honours too): bench/gpu.sh's
     * opencl-sass step sets the two side by side. */
    const char *jit_only = getenv("FFPA_REPLAY_JIT_ONLY");
    if (jit_only && argc >= 2) {
        char *text = read_text(argv[1]);
        if (strcmp(jit_only, "opencl") == 0) {
            opencl_build(text);
        } else {
            CUmodule jm;
            cuda_context();
            CHECK(cuModuleLoadData(&jm, text));
            printf("CUDA driver JIT: done\n");
        }
        free(text);
        return 0;
    }
    long b, h, n, d;
    if (argc < 5 || sscanf(argv[4], "%ld,%ld,%ld,%ld", &b, &h, &n, &d) != 4) {
        fprintf(stderr, "usage: cl_ptx_replay PTX KERNEL BR B,H,N,D [reps]\n");
        return 2;
    }
    const char *kernel = argv[2];
    const int br = atoi(argv[3]), reps = argc > 5 ? atoi(argv[5]) : 10;
    char *ptx = read_text(argv[1]);
    const int wg = reqntid(ptx, kernel);
    if (getenv("FFPA_REPLAY_TRACE")) {
        char *traced = trace_ptx(ptx, kernel);
        if (!traced) {
            fprintf(stderr, "cl_ptx_replay: cannot instrument %s (no %s_param_%d?)\n", kernel, kernel, kTraceParam);
            return 1;
        }
        free(ptx);
        ptx = traced;
        printf("PTX instrumented: work-groups counted per multiprocessor\n");
    }
    if (wg <= 0 || br <= 0) {
        fprintf(stderr, "cl_ptx_replay: %s has no entry %s with .reqntid (or BR %s is not a row count)\n", argv[1],
                kernel, argv[3]);
        return 1;
    }

    CUmodule mod;
    CUfunction fn;
    cuda_context();
    /* FFPA_REPLAY_CACHE_MODE=cg|ca: the JIT's default cache policy for
     * global loads (ptxas -dlcm): cg caches them in L2 only. Does the OpenCL
     * driver's JIT choose L2-only where the CUDA driver caches in L1? */
    const char *cache_mode = getenv("FFPA_REPLAY_CACHE_MODE");
    if (cache_mode) {
        CUjit_option jo[1] = {CU_JIT_CACHE_MODE};
        void *jv[1] = {(void *)(uintptr_t)(strcmp(cache_mode, "cg") == 0   ? CU_JIT_CACHE_OPTION_CG
                                           : strcmp(cache_mode, "ca") == 0 ? CU_JIT_CACHE_OPTION_CA
                                                                           : CU_JIT_CACHE_OPTION_NONE)};
        CHECK(cuModuleLoadDataEx(&mod, ptx, 1, jo, jv));
        printf("JIT cache mode for global loads: %s\n", cache_mode);
    } else {
        CHECK(cuModuleLoadData(&mod, ptx));
    }
    CHECK(cuModuleGetFunction(&fn, mod, kernel));
    /* FFPA_REPLAY_CARVEOUT=percent (the shared-memory share of L1 asked
     * for) and FFPA_REPLAY_PREFER_L1=1: to find which configuration the
     * OpenCL driver's launch matches where the replay's time differs. */
    const char *carveout = getenv("FFPA_REPLAY_CARVEOUT");
    if (carveout)
        CHECK(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, atoi(carveout)));
    if (getenv("FFPA_REPLAY_PREFER_L1"))
        CHECK(cuFuncSetCacheConfig(fn, CU_FUNC_CACHE_PREFER_L1));
    int regs, smem;
    CHECK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
    CHECK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn));
    int per_sm = 0;
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, wg, 0));
    printf("kernel: %d work-items, %d registers, %d bytes static local memory, %d work-groups a multiprocessor\n", wg,
           regs, smem, per_sm);

    const size_t elems = (size_t)(b * h * n * d);
    uint16_t *host = malloc(3 * elems * sizeof *host);
    srand(12345);
    for (size_t i = 0; i < 3 * elems; ++i)
        host[i] = ffpa_f32_to_bf16((float)rand() / RAND_MAX * 2.0f - 1.0f);
    CUdeviceptr qkv, o, dummy;
    CHECK(cuMemAlloc(&qkv, 3 * elems * 2));
    CHECK(cuMemAlloc(&o, elems * 2));
    CHECK(cuMemAlloc(&dummy, kTraceBytes));
    CHECK(cuMemcpyHtoD(qkv, host, 3 * elems * 2));
    CHECK(cuMemsetD8(o, 0xff, elems * 2)); /* poison: NaNs where nothing is written */
    CHECK(cuMemsetD8(dummy, 0, kTraceBytes));

    ffpa_cl_fwd_params p;
    ffpa_cl_kv_params kv;
    memset(&p, 0, sizeof p);
    memset(&kv, 0, sizeof kv);
    p.q_off = 0;
    p.k_off = (int64_t)elems;
    p.v_off = 2 * (int64_t)elems;
    p.q_sb = p.k_sb = p.v_sb = p.o_sb = h * n * d;
    p.q_sh = p.k_sh = p.v_sh = p.o_sh = n * d;
    p.q_sn = p.k_sn = p.v_sn = p.o_sn = d;
    p.q_sd = p.k_sd = p.v_sd = p.o_sd = 1;
    p.batch = (int)b;
    p.hq = (int)h;
    p.group = 1;
    p.nq = p.nkv = (int)n;
    p.dqk = p.dv = (int)d;
    p.q_blocks = (int)((n + br - 1) / br);
    p.splits = 1;
    p.o_dt = 1; /* bf16 */
    p.pack = 1;
    p.window_left = p.window_right = -1;
    p.scale = (float)(1.0 / sqrt((double)d));

    CUdeviceptr qb = qkv, kb = qkv, vb = qkv; /* offsets in the params locate k and v */
    void *args[] = {&p, &qb, &kb, &vb, &o, &dummy, &dummy, &dummy, &dummy, &kv, &dummy, &dummy};
    const unsigned grid = (unsigned)(p.q_blocks * h * b);
    CHECK(cuLaunchKernel(fn, grid, 1, 1, (unsigned)wg, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());

    uint16_t *out = malloc(elems * 2);
    CHECK(cuMemcpyDtoH(out, o, elems * 2));
    const double worst = check_rows(host, out, b, h, n, d, p.scale);
    if (getenv("FFPA_REPLAY_TRACE")) {
        uint32_t cnt[3 * kTraceSms];
        CHECK(cuMemcpyDtoH(cnt, dummy, kTraceBytes));
        trace_report("CUDA driver", cnt);
    }

    CUevent t0, t1;
    CHECK(cuEventCreate(&t0, 0));
    CHECK(cuEventCreate(&t1, 0));
    CHECK(cuEventRecord(t0, NULL));
    for (int r = 0; r < reps; ++r)
        CHECK(cuLaunchKernel(fn, grid, 1, 1, (unsigned)wg, 1, 1, 0, NULL, args, NULL));
    CHECK(cuEventRecord(t1, NULL));
    CHECK(cuEventSynchronize(t1));
    float ms;
    CHECK(cuEventElapsedTime(&ms, t0, t1));
    ms /= (float)(reps > 0 ? reps : 1);
    printf("time: %.3f ms, %.1f TFLOP/s (B=%ld H=%ld N=%ld D=%ld)\n", ms, 4.0 * b * h * n * n * d / (ms * 1e9), b, h,
           n, d);
    const char *via_opencl = getenv("FFPA_REPLAY_OPENCL");
    if (via_opencl && *via_opencl && strcmp(via_opencl, "0") != 0) {
        const double ocl = opencl_replay(ptx, kernel, wg, grid, p, &kv, host, b, h, n, d, reps, atoi(via_opencl) == 2);
        return worst < 2e-2 && ocl < 2e-2 ? 0 : 1;
    }
    return worst < 2e-2 ? 0 : 1;
}
