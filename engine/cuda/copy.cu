// SPDX-License-Identifier: Apache-2.0
//
// redist CUDA backend: the one copy kernel (see engine/cuda/DESIGN.md).
//
// One launch moves any number of *segments*. A segment is a strided copy of rows: `bytes`
// bytes in rows of `row_bytes` contiguous bytes, the rows indexed by up to REDIST_MAXD outer
// dimensions with byte strides on each side. Everything is in bytes, so one kernel serves every
// element size; the element size only shows through the vector width V (1, 2, 4, 8 or 16 bytes
// per load/store), which must divide every row length, stride and base address of the launch.
//
// Addresses: src = seg.src + (in_base & seg.src_mask); dst = seg.dst + (out_delta & seg.dst_mask).
// So the operand pointer (in_base) and the output's offset from the engine-owned result
// (out_delta) are the only kernel parameters that a rebind changes; the segment table itself
// (in device memory) is written once, at plan time. A peer's result is reached through its
// NVSHMEM peer pointer, baked into seg.dst.
//
// Blocks are split among segments (seg.blk_begin / seg.blk_count); a block finds its segment by
// binary search, then walks it grid-stride, REDIST_ILP independent vectors per thread per step.
// Divisions by runtime extents use precomputed magic numbers (valid below 2^31; the host splits
// larger segments). lower.py appends `extern "C"` wrappers instantiating copy_segments<...>.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

#define REDIST_MAXD 8
#define REDIST_BLOCK 256
#define REDIST_ILP 4

struct Seg {
    u64 src;                    // input-relative offset (src_mask = ~0) or absolute address (src_mask = 0)
    u64 dst;                    // absolute address; out_delta is added when dst_mask = ~0
    u64 src_mask;
    u64 dst_mask;
    u64 bytes;                  // payload of this segment
    u32 row_bytes;              // contiguous bytes per row
    u32 nouter;                 // outer dimensions in use (informational)
    u32 blk_begin;              // first block of the grid that works on this segment
    u32 blk_count;              // number of blocks that work on it
    u32 run_mul[5];             // magic numbers for dividing by row_bytes / V, V = 1 << index
    u32 run_shr[5];
    u32 ext[REDIST_MAXD];       // outer extents, outermost first, right-aligned (unused leading ones = 1)
    u32 ext_mul[REDIST_MAXD];
    u32 ext_shr[REDIST_MAXD];
    i64 sstride[REDIST_MAXD];   // byte strides, source side
    i64 dstride[REDIST_MAXD];   // byte strides, destination side
};
static_assert(sizeof(Seg) == 320, "Seg layout must match engine/cuda/kernels.py SEG_DTYPE");

template <int V> struct VecT;
template <> struct VecT<1> { typedef unsigned char T; };
template <> struct VecT<2> { typedef unsigned short T; };
template <> struct VecT<4> { typedef unsigned int T; };
template <> struct VecT<8> { typedef uint2 T; };
template <> struct VecT<16> { typedef uint4 T; };

// n / d for n < 2^31, with (mul, shr) from kernels.fast_divmod_params(d); mul == 0 means d == 1.
__device__ __forceinline__ u32 redist_fdiv(u32 n, u32 mul, u32 shr) {
    return mul ? (__umulhi(n, mul) >> shr) : n;
}

template <int V, int LOGV, u32 RUN_BYTES, int NOUT>
__device__ __forceinline__ void copy_segments(const char* in_base, i64 out_delta, const Seg* __restrict__ table,
                                              int nsegs) {
    typedef typename VecT<V>::T T;
    const u32 b = blockIdx.x;
    int lo = 0, hi = nsegs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (table[mid].blk_begin <= b) lo = mid; else hi = mid - 1;
    }
    const Seg* sg = table + lo;
    const u64 src0 = sg->src + ((u64)in_base & sg->src_mask);
    const u64 dst0 = sg->dst + ((u64)out_delta & sg->dst_mask);
    const u64 units = sg->bytes >> LOGV;
    u32 ru, rmul = 0, rshr = 0;
    if (RUN_BYTES != 0) {
        ru = RUN_BYTES / V;
    } else {
        ru = sg->row_bytes >> LOGV;
        rmul = sg->run_mul[LOGV];
        rshr = sg->run_shr[LOGV];
    }
    u32 ext[NOUT > 0 ? NOUT : 1], emul[NOUT > 0 ? NOUT : 1], eshr[NOUT > 0 ? NOUT : 1];
    i64 ss[NOUT > 0 ? NOUT : 1], ds[NOUT > 0 ? NOUT : 1];
#pragma unroll
    for (int k = 0; k < NOUT; ++k) {
        const int kk = REDIST_MAXD - NOUT + k;
        ext[k] = sg->ext[kk];
        emul[k] = sg->ext_mul[kk];
        eshr[k] = sg->ext_shr[kk];
        ss[k] = sg->sstride[kk];
        ds[k] = sg->dstride[kk];
    }
    const u64 step = (u64)sg->blk_count * (REDIST_BLOCK * REDIST_ILP);
    for (u64 base = (u64)(b - sg->blk_begin) * (REDIST_BLOCK * REDIST_ILP) + threadIdx.x; base < units;
         base += step) {
        T v[REDIST_ILP];
        T* d[REDIST_ILP];
#pragma unroll
        for (int i = 0; i < REDIST_ILP; ++i) {
            const u64 g64 = base + (u64)i * REDIST_BLOCK;
            d[i] = 0;
            if (g64 < units) {
                const u32 g = (u32)g64;
                u32 row, u;
                if (NOUT == 0) {
                    row = 0;
                    u = g;
                } else if (RUN_BYTES != 0) {
                    row = g / ru;
                    u = g - row * ru;
                } else {
                    row = redist_fdiv(g, rmul, rshr);
                    u = g - row * ru;
                }
                i64 so = 0, dso = 0;
                u32 r = row;
#pragma unroll
                for (int k = NOUT - 1; k >= 1; --k) {
                    const u32 q = redist_fdiv(r, emul[k], eshr[k]);
                    const u32 idx = r - q * ext[k];
                    so += (i64)idx * ss[k];
                    dso += (i64)idx * ds[k];
                    r = q;
                }
                if (NOUT >= 1) {
                    so += (i64)r * ss[0];
                    dso += (i64)r * ds[0];
                }
                v[i] = *reinterpret_cast<const T*>(src0 + (u64)so + (u64)u * V);
                d[i] = reinterpret_cast<T*>(dst0 + (u64)dso + (u64)u * V);
            }
        }
#pragma unroll
        for (int i = 0; i < REDIST_ILP; ++i) {
            if (d[i]) *d[i] = v[i];
        }
    }
}
