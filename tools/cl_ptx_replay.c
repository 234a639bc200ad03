/*
 * Replays an OpenCL forward kernel (kernels/fwd_mma.cl's ffpa_fwd_mma,
 * fwd_tiled.cl's ffpa_fwd_tiled: the same arguments) from the PTX that
 * NVIDIA's OpenCL driver left in the program cache, through the CUDA driver
 * API, so that Nsight Compute (which does not see OpenCL launches) can
 * profile the very code the OpenCL run executes.
 *
 *   cl_ptx_replay PTX KERNEL BR B,H,N,D [reps]
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
 * Built as tools/cl-ptx-replay where both the CUDA toolkit and the OpenCL
 * plugin are (GPU machines; tools/meson.build). The params struct is the
 * OpenCL host's (cl_params.h), so it cannot drift from the kernel's layout.
 */
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

int main(int argc, char **argv)
{
    long b, h, n, d;
    if (argc < 5 || sscanf(argv[4], "%ld,%ld,%ld,%ld", &b, &h, &n, &d) != 4) {
        fprintf(stderr, "usage: cl_ptx_replay PTX KERNEL BR B,H,N,D [reps]\n");
        return 2;
    }
    const char *kernel = argv[2];
    const int br = atoi(argv[3]), reps = argc > 5 ? atoi(argv[5]) : 10;
    char *ptx = read_text(argv[1]);
    const int wg = reqntid(ptx, kernel);
    if (wg <= 0 || br <= 0) {
        fprintf(stderr, "cl_ptx_replay: %s has no entry %s with .reqntid (or BR %s is not a row count)\n", argv[1],
                kernel, argv[3]);
        return 1;
    }

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, ptx));
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
    CHECK(cuMemAlloc(&dummy, 256));
    CHECK(cuMemcpyHtoD(qkv, host, 3 * elems * 2));
    CHECK(cuMemsetD8(o, 0xff, elems * 2)); /* poison: NaNs where nothing is written */
    CHECK(cuMemsetD8(dummy, 0, 256));

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

    /* Rows of the first and last head against float64. */
    uint16_t *out = malloc(elems * 2);
    CHECK(cuMemcpyDtoH(out, o, elems * 2));
    double worst = 0.0;
    const long check_rows[] = {0, 1, n / 2 + 3, n - 1};
    double *s = malloc((size_t)n * sizeof *s);
    for (int hh = 0; hh < 2; ++hh)
        for (int r = 0; r < 4; ++r) {
            const long head = hh ? b * h - 1 : 0, i = check_rows[r];
            const uint16_t *q = host + (size_t)(head * n + i) * d, *k = host + elems + (size_t)head * n * d,
                           *v = host + 2 * elems + (size_t)head * n * d;
            double mx = -INFINITY, sum = 0.0;
            for (long j = 0; j < n; ++j) {
                double dot = 0.0;
                for (long c = 0; c < d; ++c)
                    dot += ffpa_bf16_to_f32(q[c]) * ffpa_bf16_to_f32(k[j * d + c]);
                s[j] = dot * p.scale;
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
    printf("check: 8 rows x %ld columns, max |error| %.3g: %s\n", d, worst, worst < 2e-2 ? "ok" : "FAIL");

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
    return worst < 2e-2 ? 0 : 1;
}
