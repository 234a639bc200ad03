/*
 * The Hopper (sm_90a) instruction layer of the WGMMA/TMA forward: mbarriers,
 * bulk tensor copies (TMA), wgmma fences and shared-memory descriptors,
 * register reallocation, cluster addressing and asynchronous remote stores.
 * Inline PTX only (PTX ISA 8.x); the kernel pieces beside this file call
 * these names and nothing vendor-specific of their own.
 *
 * Built on top of the generic layer (../arch_sm80.cuh: fragment types, exp2,
 * quad reductions, packing), which Hopper executes too.
 */
#ifndef FFPA_CUDA_SM90_ARCH_CUH
#define FFPA_CUDA_SM90_ARCH_CUH

#include <cuda.h> /* CUtensorMap (a 128-byte opaque struct; no driver library is linked) */
#include <stdint.h>

#include "../arch_sm80.cuh"

/* Device code of the Hopper path exists only in the sm_90a pass. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FFPA_SM90_DEVICE 1
#else
#define FFPA_SM90_DEVICE 0
#endif

namespace ffpa {
namespace sm90 {

using arch::smem_u32;

/* The dynamic shared memory aligned up to kAlign bytes (128-byte swizzled
 * tiles want 1024-byte aligned atoms), as pointer arithmetic on the extern
 * array rather than an integer round trip: the compiler then still knows
 * the pointer is shared, and plain loads and stores through it become
 * LDS/STS, not generic LD/ST (which wait on the long scoreboard). */
template <unsigned kAlign> FFPA_DEV uint8_t *aligned_dynamic_smem()
{
    extern __shared__ uint8_t smem_dyn[];
    return smem_dyn + ((kAlign - (smem_u32(smem_dyn) & (kAlign - 1u))) & (kAlign - 1u));
}

/* ------------------------------------------------------------ mbarrier */

FFPA_DEV void mbar_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}

/* Makes barrier initialisation visible to the async proxy and the cluster. */
FFPA_DEV void fence_barrier_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

FFPA_DEV void mbar_arrive(uint64_t *bar)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_u32(bar))
                 : "memory");
}

/* `count` arrivals at once (one thread standing for a consumer's warps). */
FFPA_DEV void mbar_arrive_n(uint64_t *bar, uint32_t count)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(smem_u32(bar)),
                 "r"(count)
                 : "memory");
}

/* Arrive and announce `bytes` of asynchronous transactions for this phase. */
FFPA_DEV void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(
                     smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

/* Arrive on the barrier at the same offset in CTA `rank` of the cluster. */
FFPA_DEV void mbar_arrive_remote(uint64_t *bar, uint32_t rank)
{
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(smem_u32(bar)),
                 "r"(rank)
                 : "memory");
}

/* Spin until the phase with the given parity has completed; SEM picks the
 * acquire scope ("" = CTA, the default). */
#define FFPA_SM90_MBAR_WAIT(SEM)                                                                       \
    asm volatile("{\n.reg .pred done;\n"                                                              \
                 "WAIT_%=:\n"                                                                        \
                 "mbarrier.try_wait.parity" SEM ".shared::cta.b64 done, [%0], %1;\n"                  \
                 "@!done bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),                                     \
                 "r"(parity)                                                                         \
                 : "memory")

FFPA_DEV void mbar_wait(uint64_t *bar, uint32_t parity) { FFPA_SM90_MBAR_WAIT(""); }

/* The same with cluster-scope acquire (the arrivals came from a peer CTA). */
FFPA_DEV void mbar_wait_cluster(uint64_t *bar, uint32_t parity) { FFPA_SM90_MBAR_WAIT(".acquire.cluster"); }

/* Orders this thread's generic-proxy shared-memory writes before later
 * async-proxy reads (wgmma operands written with st.shared). */
FFPA_DEV void fence_proxy_async_shared()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* ----------------------------------------------------------------- TMA */

FFPA_DEV void prefetch_tensormap(const CUtensorMap *map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/* 4-D tile (c0 fastest) into shared memory, completing on bar. */
FFPA_DEV void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_u32(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar))
                 : "memory");
}

/* 4-D tile of fp32 in shared memory added element-wise into global memory
 * by the TMA unit (elements outside the tensor are skipped); completes in
 * this thread's bulk async-group (bulk_commit, bulk_wait*). */
FFPA_DEV void tma_reduce_add_4d(const void *src, const CUtensorMap *map, int c0, int c1, int c2, int c3)
{
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
                 " [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(src))
                 : "memory");
}

FFPA_DEV void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

/* This thread's bulk groups have read their shared-memory sources (they may be overwritten). */
FFPA_DEV void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

/* This thread's bulk groups are complete, their global writes performed;
 * the proxy fence orders them before this thread's later generic accesses
 * (a release that publishes them). */
FFPA_DEV void bulk_wait_all()
{
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/* --------------------------------------------------------------- wgmma */

FFPA_DEV void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
FFPA_DEV void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending> FFPA_DEV void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/* Keeps the compiler from moving reads/writes of accumulator registers
 * across the asynchronous wgmma window. */
template <int N> FFPA_DEV void fence_operands(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(d[i])::"memory");
}

/*
 * Shared-memory matrix descriptor for the 128-byte swizzle (tiles written by
 * TMA with CU_TENSOR_MAP_SWIZZLE_128B: rows of 64 16-bit elements, atoms of
 * 8 rows = 1024 bytes, atom-aligned). lbo/sbo in bytes:
 *   K-major  (Q, K): lbo unused (1), sbo = 1024 (next 8 rows);
 *   MN-major (V):    lbo = next 64 columns, sbo = 1024 (next 8 k-rows).
 * Advancing along K inside a 128-byte row adds bytes to the start address
 * (the hardware applies the swizzle to the absolute address, as TMA does).
 */
FFPA_DEV uint64_t make_desc_sw128(uint32_t smem_addr, uint32_t lbo, uint32_t sbo)
{
    uint64_t d = 0;
    d |= (uint64_t)((smem_addr & 0x3FFFF) >> 4);
    d |= (uint64_t)((lbo & 0x3FFFF) >> 4) << 16;
    d |= (uint64_t)((sbo & 0x3FFFF) >> 4) << 32;
    d |= (uint64_t)1 << 62; /* 128B swizzle */
    return d;
}

/* desc + bytes along the start address (no carry out of its 14-bit field
 * for shared addresses below 256 KiB). Opaque to the compiler on purpose:
 * otherwise it hoists every loop-invariant descriptor of the unrolled wgmma
 * sequence into its own register pair (d320: 20 Q descriptors) and spills. */
FFPA_DEV uint64_t desc_advance(uint64_t desc, uint32_t bytes)
{
    uint64_t r;
    asm volatile("add.s64 %0, %1, %2;\n" : "=l"(r) : "l"(desc), "l"((uint64_t)(bytes >> 4)));
    return r;
}

/* -------------------------------------------------- registers, barriers */

template <int kRegs> FFPA_DEV void setmaxnreg_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs> FFPA_DEV void setmaxnreg_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

/* Named barrier among `threads` threads (ids 1..15; 0 is __syncthreads). */
FFPA_DEV void named_barrier_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* The same, for threads that meet at the barrier from different
 * instructions (two warpgroups' handoff points): bar.sync is
 * barrier.sync.aligned, which PTX allows only where every participant
 * executes the same instruction; synccheck flags the rest. */
FFPA_DEV void named_barrier_sync_unaligned(int id, int threads)
{
    __syncwarp();
    asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* Arrive without waiting (the other side of a producer/consumer pair). */
FFPA_DEV void named_barrier_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* Two fp32 adds into global memory as one 8-byte reduction (no return;
 * addr 8-byte aligned). */
FFPA_DEV void red_add_v2(float *addr, float a, float b)
{
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b) : "memory");
}

/* One fp32 add into global memory (no return). */
FFPA_DEV void red_add(float *addr, float a)
{
    asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr), "f"(a) : "memory");
}

/* Two adds into a pair of 16-bit values (addr 4-byte aligned), rounded to
 * T: gradients accumulated in the output dtype (FFPA_GRAD_ACCUM_OUTPUT). */
template <typename T> FFPA_DEV void red_add_pair(T *addr, float a, float b);

template <> FFPA_DEV void red_add_pair<arch::f16>(arch::f16 *addr, float a, float b)
{
    const uint32_t v = arch::pack_f32x2<arch::f16>(a, b);
    asm volatile("red.global.add.noftz.f16x2 [%0], %1;\n" ::"l"(addr), "r"(v) : "memory");
}

template <> FFPA_DEV void red_add_pair<arch::bf16>(arch::bf16 *addr, float a, float b)
{
    const uint32_t v = arch::pack_f32x2<arch::bf16>(a, b);
    asm volatile("red.global.add.noftz.bf16x2 [%0], %1;\n" ::"l"(addr), "r"(v) : "memory");
}

/* -------------------------------------------------------------- cluster */

FFPA_DEV uint32_t cluster_rank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

/* Every thread of every CTA of the cluster (release/acquire). */
FFPA_DEV void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}

/* 16 bytes into CTA `rank`'s shared memory at the offset of local_dst; the
 * write completes on that CTA's barrier at the offset of local_bar (tx bytes). */
FFPA_DEV void st_async_remote_v4(void *local_dst, uint64_t *local_bar, uint32_t rank, float a, float b, float c,
                                 float d)
{
    asm volatile("{\n.reg .b32 rd, rb;\n"
                 "mapa.shared::cluster.u32 rd, %0, %2;\n"
                 "mapa.shared::cluster.u32 rb, %1, %2;\n"
                 "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [rd], {%3, %4, %5, %6}, [rb];\n}\n" ::"r"(
                     smem_u32(local_dst)),
                 "r"(smem_u32(local_bar)), "r"(rank), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}

/* The same for 8 bytes. */
FFPA_DEV void st_async_remote_v2(void *local_dst, uint64_t *local_bar, uint32_t rank, float a, float b)
{
    asm volatile("{\n.reg .b32 rd, rb;\n"
                 "mapa.shared::cluster.u32 rd, %0, %2;\n"
                 "mapa.shared::cluster.u32 rb, %1, %2;\n"
                 "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [rd], {%3, %4}, [rb];\n}\n" ::"r"(
                     smem_u32(local_dst)),
                 "r"(smem_u32(local_bar)), "r"(rank), "f"(a), "f"(b)
                 : "memory");
}

/* The same for one 32-bit word (a packed pair of 16-bit values). */
FFPA_DEV void st_async_remote_b32(void *local_dst, uint64_t *local_bar, uint32_t rank, uint32_t v)
{
    asm volatile("{\n.reg .b32 rd, rb;\n"
                 "mapa.shared::cluster.u32 rd, %0, %2;\n"
                 "mapa.shared::cluster.u32 rb, %1, %2;\n"
                 "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [rd], %3, [rb];\n}\n" ::"r"(
                     smem_u32(local_dst)),
                 "r"(smem_u32(local_bar)), "r"(rank), "r"(v)
                 : "memory");
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
