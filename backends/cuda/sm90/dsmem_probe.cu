/*
 * dsmem_probe: what the sm90 forward's Split-D exchange can cost at best.
 * Each CTA of a 2-CTA cluster runs `wgs` warpgroups; each warpgroup swaps a
 * 64 x 64 fp32 tile (16 KiB, the partial S of one consumer and key tile)
 * with its partner warpgroup in the peer CTA, exactly as sm90_exchange.cuh
 * does (st.async into the peer's slot completing on its mbarrier, the
 * receiver adds and frees the slot remotely), `iters` times.
 *   slots = 1: send t, receive t (the kernel's current order: latency + transfer)
 *   slots = 2: send t+1 before receiving t (throughput: the transfer overlaps)
 *   bulk:      the tile is staged in local shared memory and one thread
 *              sends it with cp.async.bulk.shared::cluster (the TMA engine)
 * Prints cycles per swap and the DSMEM bytes each SM sends per cycle, with
 * one cluster alone and with the whole GPU busy.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Ibackends/cuda -Ibackends/cuda/sm90 \
 *        backends/cuda/sm90/dsmem_probe.cu -o dsmem_probe && ./dsmem_probe
 */
#include <cstdio>
#include <cuda_runtime.h>

#include "sm90_arch.cuh"

using namespace ffpa::sm90;

constexpr int kTileBytes = 64 * 64 * 4;

struct Bars {
    uint64_t full[2][2], empty[2][2]; /* [warpgroup][slot] */
};

/* Every CTA's barriers exist before a peer arrives on them. */
__device__ void init_bars(Bars *bars)
{
#if FFPA_SM90_DEVICE
    if (threadIdx.x == 0) {
        for (int w = 0; w < 2; ++w)
            for (int s = 0; s < 2; ++s) {
                mbar_init(&bars->full[w][s], 1);
                mbar_init(&bars->empty[w][s], 4);
            }
        fence_barrier_init();
    }
    cluster_sync();
#endif
}

/* Where this thread's warpgroup and its peer are; barriers initialised. */
struct ProbeCta {
    Bars *bars;
    float4 *slots;
    int wg, tid;
    uint32_t peer;
    __device__ explicit ProbeCta(uint8_t *smem)
        : bars(reinterpret_cast<Bars *>(smem)), slots(reinterpret_cast<float4 *>(smem + 1024)),
          wg(threadIdx.x / 128), tid(threadIdx.x % 128), peer(cluster_rank() ^ 1u)
    {
        init_bars(bars);
    }
};

/* Each warpgroup records its cycles; the sums keep the reads alive. */
__device__ void finish(long long t0, long long *cycles, float *sink, float acc, int wg, int tid)
{
#if FFPA_SM90_DEVICE
    const long long t1 = clock64();
    if (tid == 0)
        cycles[blockIdx.x * 2 + wg] = t1 - t0;
    sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
    cluster_sync();
#endif
}

template <int kSlots>
__global__ void __cluster_dims__(2, 1, 1) swap_kernel(int iters, long long *cycles, float *sink)
{
#if FFPA_SM90_DEVICE
    extern __shared__ __align__(1024) uint8_t smem[];
    const ProbeCta c(smem);
    Bars *bars = c.bars;
    float4 *slots = c.slots;
    const int wg = c.wg, tid = c.tid;
    const uint32_t peer = c.peer;
    float v[32], acc = 0.0f;
    for (int i = 0; i < 32; ++i)
        v[i] = (float)(tid + i);
    auto slot = [&](int t) { return slots + (size_t)(wg * 2 + t % kSlots) * (kTileBytes / 16); };
    auto send = [&](int t) {
        const int s = t % kSlots;
        if (t >= kSlots)
            mbar_wait_cluster(&bars->empty[wg][s], ((t / kSlots) - 1) & 1);
        for (int q = 0; q < 8; ++q)
            st_async_remote_v4(slot(t) + q * 128 + tid, &bars->full[wg][s], peer, v[4 * q], v[4 * q + 1],
                               v[4 * q + 2], v[4 * q + 3]);
        if (tid == 0)
            mbar_arrive_expect_tx(&bars->full[wg][s], kTileBytes);
    };
    auto receive = [&](int t) {
        const int s = t % kSlots;
        mbar_wait_cluster(&bars->full[wg][s], (t / kSlots) & 1);
        for (int q = 0; q < 8; ++q) {
            const float4 x = slot(t)[q * 128 + tid];
            acc += x.x + x.y + x.z + x.w;
        }
        __syncwarp();
        if ((tid & 31) == 0)
            mbar_arrive_remote(&bars->empty[wg][s], peer);
    };
    const long long t0 = clock64();
    if (kSlots == 1) {
        for (int t = 0; t < iters; ++t) {
            send(t);
            receive(t);
        }
    } else {
        send(0);
        for (int t = 0; t < iters; ++t) {
            if (t + 1 < iters)
                send(t + 1);
            receive(t);
        }
    }
    finish(t0, cycles, sink, acc, wg, tid);
#endif
}

/* The bulk-copy variant: 128 threads store to a local staging tile, one
 * thread copies it to the peer's slot (complete_tx on the peer's barrier). */
__global__ void __cluster_dims__(2, 1, 1) bulk_kernel(int iters, long long *cycles, float *sink)
{
#if FFPA_SM90_DEVICE
    extern __shared__ __align__(1024) uint8_t smem[];
    const ProbeCta c(smem);
    Bars *bars = c.bars;
    float4 *slots = c.slots;
    const int wg = c.wg, tid = c.tid;
    const uint32_t peer = c.peer;
    float acc = 0.0f;
    float4 *stage = slots + (size_t)(wg * 2 + 1) * (kTileBytes / 16); /* slot 1 of the warpgroup: staging */
    float4 *inbox = slots + (size_t)(wg * 2) * (kTileBytes / 16);
    const long long t0 = clock64();
    for (int t = 0; t < iters; ++t) {
        for (int q = 0; q < 8; ++q)
            stage[q * 128 + tid] = make_float4((float)t, (float)q, (float)tid, 1.0f);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        named_barrier_sync(1 + wg, 128);
        if (tid == 0) {
            if (t > 0)
                mbar_wait_cluster(&bars->empty[wg][0], (t - 1) & 1);
            mbar_arrive_expect_tx(&bars->full[wg][0], kTileBytes);
            asm volatile("{\n.reg .b32 rd, rb;\n"
                         "mapa.shared::cluster.u32 rd, %0, %2;\n"
                         "mapa.shared::cluster.u32 rb, %1, %2;\n"
                         "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [rd], [%3], %4, [rb];\n"
                         "cp.async.bulk.commit_group;\n"
                         "cp.async.bulk.wait_group.read 0;\n}\n" ::"r"(smem_u32(inbox)),
                         "r"(smem_u32(&bars->full[wg][0])), "r"(peer), "r"(smem_u32(stage)), "r"(kTileBytes)
                         : "memory");
        }
        mbar_wait_cluster(&bars->full[wg][0], t & 1);
        for (int q = 0; q < 8; ++q) {
            const float4 x = inbox[q * 128 + tid];
            acc += x.x + x.y + x.z + x.w;
        }
        __syncwarp();
        if ((tid & 31) == 0)
            mbar_arrive_remote(&bars->empty[wg][0], peer);
        named_barrier_sync(1 + wg, 128); /* the staging tile is free (tid 0 waited for the copy's reads) */
    }
    finish(t0, cycles, sink, acc, wg, tid);
#endif
}

template <int kSlots> static void probe(int clusters, int wgs, int sms)
{
    const int iters = 2000, blocks = 2 * clusters;
    long long *cyc;
    float *sink;
    cudaMalloc(&cyc, sizeof(long long) * blocks * 2);
    cudaMemset(cyc, 0, sizeof(long long) * blocks * 2);
    cudaMalloc(&sink, sizeof(float) * blocks * 256);
    const size_t smem = 1024 + 4 * (size_t)kTileBytes;
    auto kernel = kSlots == 0 ? bulk_kernel : swap_kernel<kSlots == 0 ? 1 : kSlots>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    for (int rep = 0; rep < 2; ++rep)
        kernel<<<blocks, 128 * wgs, smem>>>(iters, cyc, sink);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("error %s\n", cudaGetErrorString(e));
        return;
    }
    long long h[2 * 264] = {0};
    cudaMemcpy(h, cyc, sizeof(long long) * blocks * 2, cudaMemcpyDeviceToHost);
    double mean = 0;
    int n = 0;
    for (int b = 0; b < blocks; ++b)
        for (int w = 0; w < wgs; ++w)
            mean += (double)h[2 * b + w], ++n;
    mean /= n;
    const double per_swap = mean / iters;
    printf("%s  clusters %3d (%3d of %d SMs)  warpgroups/CTA %d : %6.0f cycles per swap, %5.1f B/cycle sent per SM\n",
           kSlots == 0 ? "bulk   " : kSlots == 1 ? "slots 1" : "slots 2", clusters, blocks, sms, wgs, per_swap, wgs * kTileBytes / per_swap);
    cudaFree(cyc);
    cudaFree(sink);
}

int main()
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    for (int wgs = 1; wgs <= 2; ++wgs)
        for (int clusters : {1, sms / 2}) {
            probe<1>(clusters, wgs, sms);
            probe<2>(clusters, wgs, sms);
            probe<0>(clusters, wgs, sms);
        }
    return 0;
}
