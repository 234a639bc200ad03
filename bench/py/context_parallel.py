"""Context parallelism on several GPUs (NCCL): ffpa.distributed against one GPU.

    torchrun --nproc_per_node=W bench/py/context_parallel.py [--check] [--shapes N:H ...]

With --check: ring and all-gather results (output and gradients, causal and
not, GQA, an uneven length) against one GPU's libffpa on the whole sequence,
bf16 tolerance. Then the ring's ceiling (point-to-point GB/s to the next
rank while receiving from the previous, 4, 64 and 512 MB). Then, per shape
(B=1, D=512, causal, bf16, zigzag layout): forward and forward+backward time of ring_attention on W GPUs, and with
W == 1 the plain one-GPU call (ffpa.attention_with_lse on the whole
sequence, the baseline). TFLOP/s count the causal attention's FLOPs (4 N^2 D
H / 2 forward, 2.5x that backward) once, whatever the GPU count. One CSV
line per measurement on rank 0: mode,world,N,H,D,variant,pass,ms,tflops.
"""

import argparse
import datetime
import faulthandler
import os
import sys
import time

for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1")):  # the machines' rule: no NVLink multicast
    os.environ[_name] = _value

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ffpa  # noqa: E402
import ffpa.distributed as cp  # noqa: E402


def log(*args):
    if dist.get_rank() == 0:
        print(*args, flush=True)


def check(world, dev):
    """Distributed results against one GPU's over the whole sequence."""
    failures = 0
    cases = [("ring", True, 2, 8, 2, 4099, 512, None), ("ring", False, 1, 4, 4, 3000, 256, None),
             ("allgather", True, 1, 16, 1, 5001, 576, None), ("ring", True, 1, 4, 2, 2053, 128, "contiguous"),
             ("allgather", False, 2, 4, 2, 1500, 512, "contiguous")]
    for variant, causal, b, hq, hkv, n, d, layout in cases:
        gen = torch.Generator(device=dev).manual_seed(n)
        q = torch.randn(b, hq, n, d, device=dev, generator=gen, dtype=torch.bfloat16)
        k = torch.randn(b, hkv, n, d, device=dev, generator=gen, dtype=torch.bfloat16)
        v = torch.randn(b, hkv, n, d, device=dev, generator=gen, dtype=torch.bfloat16)
        do = torch.randn(b, hq, n, d, device=dev, generator=gen, dtype=torch.bfloat16)
        full = [t.clone().requires_grad_() for t in (q, k, v)]
        ref, _ = ffpa.attention_with_lse(*full, is_causal=causal, enable_gqa=hq != hkv)
        ref.backward(do)
        parts = [cp.shard(t, causal=causal, layout=layout).requires_grad_() for t in (q, k, v)]
        fn = cp.ring_attention if variant == "ring" else cp.allgather_kv_attention
        out = fn(*parts, causal=causal, layout=layout)
        out.backward(cp.shard(do, causal=causal, layout=layout))
        got = [cp.unshard(t, n, causal=causal, layout=layout) for t in (out.detach(),) + tuple(p.grad for p in parts)]
        want = [ref.detach()] + [t.grad for t in full]
        for label, g, w in zip(("out", "dq", "dk", "dv"), got, want):
            err = ((g.float() - w.float()).abs().max() / w.float().abs().max().clamp(min=1)).item()
            ok = err <= 3e-2 and not torch.isnan(g).any().item()
            failures += 0 if ok else 1
            log("check,%d,%s,%s,%s,B%d Hq%d Hkv%d N%d D%d,%s,err %.2e,%s"
                % (world, variant, "causal" if causal else "full", layout or "default", b, hq, hkv, n, d, label,
                   err, "ok" if ok else "FAIL"))
    return failures


HANG_S = 150


def timed(fn, reps):
    """Seconds per call: the slowest rank's, after one warm-up call. Each
    measurement re-arms the hang timer (every rank prints its stack and exits
    if this one takes longer than HANG_S)."""
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    fn()
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    elapsed = torch.tensor([(time.perf_counter() - start) / reps], device="cuda")
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()


def ring_bandwidth(world, dev, megabytes, reps):
    """The ring's ceiling: one block of `megabytes` sent to the next rank while
    one arrives from the previous (one batch_isend_irecv, as the ring's steps),
    GB/s per rank in each direction."""
    if world == 1:
        return
    rank = dist.get_rank()
    send = torch.empty(megabytes << 20, dtype=torch.uint8, device=dev)
    recv = torch.empty_like(send)

    def step():
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()

    t = timed(step, reps)
    log("ceiling,%d,p2p %d MB,%.2f ms,%.1f GB/s" % (world, megabytes, t * 1e3, send.numel() / t / 1e9))


def bench(world, dev, n, h, d, reps, variants, forward_only=False):
    flops_fwd = 4.0 * n * n * d * h / 2
    gen = torch.Generator(device=dev).manual_seed(1)
    full = [torch.randn(1, h, n, d, device=dev, generator=gen, dtype=torch.bfloat16) for _ in range(4)]
    rows = []
    if world == 1:
        q, k, v = (t.requires_grad_() for t in full[:3])
        do = full[3]
        fwd = lambda: ffpa.attention_with_lse(q, k, v, is_causal=True)  # noqa: E731
        both = lambda: fwd()[0].backward(do)  # noqa: E731
        rows.append(("single", fwd, both))
    parts = [cp.shard(t, causal=True) for t in full]
    del full
    q, k, v = (t.requires_grad_() for t in parts[:3])
    do = parts[3]
    for variant in (v for v in variants if v != "none"):
        fn = cp.ring_attention if variant == "ring" else cp.allgather_kv_attention
        fwd = lambda fn=fn: fn(q, k, v, causal=True)  # noqa: E731
        both = lambda fwd=fwd: fwd().backward(do)  # noqa: E731
        rows.append((variant, fwd, both))
    for variant, fwd, both in rows:
        with torch.no_grad():
            t_fwd = timed(fwd, reps)
        log("bench,%d,%d,%d,%d,%s,fwd,%.2f,%.1f" % (world, n, h, d, variant, t_fwd * 1e3, flops_fwd / t_fwd / 1e12))
        if forward_only:
            continue
        t_both = timed(both, reps)
        log("bench,%d,%d,%d,%d,%s,fwd+bwd,%.2f,%.1f"
            % (world, n, h, d, variant, t_both * 1e3, 3.5 * flops_fwd / t_both / 1e12))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--shapes", nargs="*", default=["131072:8"], help="N:H (B=1, D=512, causal)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--variants", default="ring,allgather")
    parser.add_argument("--ladder", action="store_true",
                        help="first time the ring forward at N = 8k, 16k, ... up to each shape's N (finds the size "
                             "where a run stops making progress)")
    parser.add_argument("--hang-s", type=int, default=150,
                        help="seconds after which every rank prints its Python stack and exits (a hang's where)")
    args = parser.parse_args()
    global HANG_S
    HANG_S = args.hang_s
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local),
                            timeout=datetime.timedelta(seconds=args.hang_s))
    world = dist.get_world_size()
    dev = torch.device("cuda", local)
    log("# %d x %s, torch %s, libffpa %s" % (world, torch.cuda.get_device_name(dev), torch.__version__,
                                            ffpa.library_version()))
    failures = check(world, dev) if args.check else 0
    for megabytes in (4, 64, 512):
        ring_bandwidth(world, dev, megabytes, args.reps)
    for shape in args.shapes:
        n, h = (int(x) for x in shape.split(":"))
        if args.ladder:
            size = 8192
            while size < n:
                bench(world, dev, size, h, 512, 1, ["ring"], forward_only=True)
                size *= 2
        bench(world, dev, n, h, 512, args.reps, args.variants.split(","))
    faulthandler.cancel_dump_traceback_later()
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
