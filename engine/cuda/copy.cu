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
// Addresses: src = seg.src + (in_base[f] & seg.src_mask); dst = seg.dst + (out_delta[o] & seg.dst_mask),
// f = seg.field & 0xffff, o = seg.field >> 16 (the output slot: f for this rank's own output, one slot
// per field and push destination, so each destination's out= may sit at its own place, user_memory.py). A launch may move several fields (arrays of the same boxes): each has its operand
// pointer (in_base[f]) and its output's offset from its engine-owned result (out_delta[f]), passed
// by value in one Bases argument -- the only kernel parameter a rebind changes, so rebinding every
// field is one node update; the segment table itself (in device memory) is written once, at plan
// time. A peer's result is reached through its NVSHMEM peer pointer, baked into seg.dst. The Bases
// argument is __grid_constant__ (sm_70+): indexed in place, never copied.
//
// Blocks are split among segments (seg.blk_begin / seg.blk_count); a block finds its segment by
// binary search, then walks it grid-stride, REDIST_ILP independent vectors per thread per step.
// Divisions by runtime extents use precomputed magic numbers (valid below 2^31; the host splits
// larger segments). kernels.py appends `extern "C"` wrappers instantiating the templates below.
//
// Two kinds of kernel share the copy loop:
//  * plain (copy_segments): the copy alone; a graph orders it with NVSHMEM barriers ("barrier").
//  * epoch (epoch_segments): the barrier-free protocol ("epoch", see DESIGN.md). Each rank keeps a
//    control block on the symmetric heap: its epoch counter, block counters, and per peer a credit
//    (written by a destination: "you may write epoch e"), an arrival (written by a source: "my
//    epoch-e stores into you are done") and a put signal (NVSHMEM's signal word of put-with-signal).
//    Every block reads e = epoch + 1; the first block to run posts the credits (atomicMax on a
//    "posted" word, so no block depends on another being resident and the peers see one store
//    each, not one per block); a block whose segment goes to a peer
//    waits for that peer's credit, an unpack block for its source's signal; the last block to
//    finish (block counter, after a system fence) posts the arrivals, waits for its sources'
//    arrivals and bumps the epoch. Stores of flags are st.release.sys, loads ld.acquire.sys.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

#define REDIST_MAXD 8
#define REDIST_MAXF 8
#define REDIST_MAXO 64
#define REDIST_BLOCK 256
#define REDIST_ILP 1

struct Bases {
    u64 in_base[REDIST_MAXF];   // per field: the bound operand's address
    i64 out_delta[REDIST_MAXO]; // per output slot: the bound output's offset from the engine-owned result there
};

struct Seg {
    u64 src;                    // input-relative offset (src_mask = ~0) or absolute address (src_mask = 0)
    u64 dst;                    // absolute address; out_delta is added when dst_mask = ~0
    u64 src_mask;
    u64 dst_mask;
    u64 bytes;                  // payload of this segment
    u32 row_bytes;              // contiguous bytes per row
    u32 peer;                   // the other rank (push/pack: destination, unpack: source); ~0 for local
    u32 blk_begin;              // first block of the grid that works on this segment
    u32 blk_count;              // number of blocks that work on it
    u32 run_mul[5];             // magic numbers for dividing by row_bytes / V, V = 1 << index
    u32 run_shr[5];
    u32 ext[REDIST_MAXD];       // outer extents, outermost first, right-aligned (unused leading ones = 1)
    u32 ext_mul[REDIST_MAXD];
    u32 ext_shr[REDIST_MAXD];
    i64 sstride[REDIST_MAXD];   // byte strides, source side
    i64 dstride[REDIST_MAXD];   // byte strides, destination side
    u32 tile_a;                 // transposing segment: the dimension contiguous on the source side; ~0: none
    u32 field;                  // low 16 bits: the field whose operand base applies; high 16: the output slot (Bases)
};
static_assert(sizeof(Seg) == 328, "Seg layout must match engine/cuda/kernels.py SEG_DTYPE");

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

#define REDIST_NONE 0xffffffffu
#define REDIST_CTL_EPOCH 0
#define REDIST_CTL_DONE 1  // two u32 block counters: [0] copy kernel, [1] unpack kernel
#define REDIST_CTL_POSTED 2 // the last epoch whose credits a block of the copy kernel posted
#define REDIST_CTL_PEERS 3  // then credit[P], arrive[P], signal[P]

__device__ __forceinline__ void redist_st_release(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ u64 redist_ld_acquire(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void redist_wait_at_least(const u64* p, u64 e) {
    while (redist_ld_acquire(p) < e) __nanosleep(64);
}

__device__ __forceinline__ int redist_find_segment(const Seg* __restrict__ table, int nsegs, u32 b) {
    int lo = 0, hi = nsegs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (table[mid].blk_begin <= b) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// The shared memory of every tile routine: one dynamic buffer, as large as the largest tile (64 x
// 65 8-byte elements, kernels.TILE_SHARED_BYTES), given only to launches that have transposing
// segments (launch_list.KernelStep.shared_bytes): a static one would cost every copy kernel
// occupancy, and two routines with buffers of their own would pass 48 KiB.
#define REDIST_TILE_SHARED_BYTES (64 * 65 * 8)
__device__ __forceinline__ char* redist_tile_memory() {
    extern __shared__ __align__(16) char redist_dynamic_shared[];
    return redist_dynamic_shared;
}

// tile edge: 64 elements (runs of 64 elements per row on both sides), 32 for 16-byte elements
// (a 64 x 65 tile of them would pass the 48 KiB of static shared memory)
template <int V> struct TileEdge { static constexpr u32 value = V >= 16 ? 32 : 64; };

// The walk of a transposing segment's square tiles (edge TILE) over dimension tile_a and the
// innermost one, times every index of the others: how many there are, and where tile t starts
// (its element offsets on both sides, and its first a and b). Tile indices stay below 2^31 (so do
// the segment's units), so 32-bit magic divisions serve.
template <int NOUT, u32 TILE>
struct TileWalk {
    int ka;
    u32 na, nb, ta, tb, ntiles;
    i64 sa, sb, da, db;  // byte strides of a (tile_a) and b (the innermost dimension), both sides

    __device__ __forceinline__ explicit TileWalk(const Seg* __restrict__ sg) : ka((int)sg->tile_a) {
        na = sg->ext[ka];
        nb = sg->ext[REDIST_MAXD - 1];
        sa = sg->sstride[ka];
        sb = sg->sstride[REDIST_MAXD - 1];
        da = sg->dstride[ka];
        db = sg->dstride[REDIST_MAXD - 1];
        ta = (na + TILE - 1) / TILE;
        tb = (nb + TILE - 1) / TILE;
        ntiles = ta * tb;
#pragma unroll
        for (int k = REDIST_MAXD - NOUT; k < REDIST_MAXD - 1; ++k)
            if (k != ka) ntiles *= sg->ext[k];
    }

    __device__ __forceinline__ void at(const Seg* __restrict__ sg, u32 t, i64& so, i64& dso, u32& a0, u32& b0) const {
        u32 r = t / tb;
        const u32 jb = t - r * tb;
        const u32 q = r / ta;
        const u32 ja = r - q * ta;
        r = q;
        so = 0;
        dso = 0;
#pragma unroll
        for (int k = REDIST_MAXD - 2; k >= REDIST_MAXD - NOUT; --k) {
            if (k == ka) continue;
            const u32 qk = redist_fdiv(r, sg->ext_mul[k], sg->ext_shr[k]);
            const u32 idx = r - qk * sg->ext[k];
            r = qk;
            so += (i64)idx * sg->sstride[k];
            dso += (i64)idx * sg->dstride[k];
        }
        a0 = ja * TILE;
        b0 = jb * TILE;
    }
};

// A transposing segment (one-element rows of V bytes; the innermost dimension contiguous on the
// destination side, dimension tile_a on the source side): square tiles through shared memory,
// read along tile_a and written along the innermost dimension, so both sides are coalesced. The
// block's 256 threads are TILE x (256 / TILE); tiles are dealt to the segment's blocks round-robin.
template <int V, int NOUT>
__device__ __forceinline__ void redist_tile_segment(const Seg* __restrict__ sg, u32 b, u64 src0, u64 dst0) {
    typedef typename VecT<V>::T T;
    constexpr u32 REDIST_TILE = TileEdge<V>::value;
    static_assert(sizeof(T) * REDIST_TILE * (REDIST_TILE + 1) <= REDIST_TILE_SHARED_BYTES, "the tile must fit");
    T (*tile)[REDIST_TILE + 1] = reinterpret_cast<T (*)[REDIST_TILE + 1]>(redist_tile_memory());
    const TileWalk<NOUT, REDIST_TILE> walk(sg);
    const u32 na = walk.na, nb = walk.nb, tx = threadIdx.x % REDIST_TILE, ty = threadIdx.x / REDIST_TILE;
    const i64 sa = walk.sa, sb = walk.sb, da = walk.da, db = walk.db;
    for (u32 t = b - sg->blk_begin; t < walk.ntiles; t += sg->blk_count) {
        i64 so, dso;
        u32 a0, b0;
        walk.at(sg, t, so, dso, a0, b0);
#pragma unroll
        for (u32 k = 0; k < REDIST_TILE / (REDIST_BLOCK / REDIST_TILE); ++k) {  // read: a varies across the warp
            const u32 i = ty + k * (REDIST_BLOCK / REDIST_TILE);
            const u32 ai = a0 + tx, bi = b0 + i;
            if (ai < na && bi < nb) tile[i][tx] = *reinterpret_cast<const T*>(src0 + so + (i64)ai * sa + (i64)bi * sb);
        }
        __syncthreads();
#pragma unroll
        for (u32 k = 0; k < REDIST_TILE / (REDIST_BLOCK / REDIST_TILE); ++k) {  // write: b varies across the warp
            const u32 i = ty + k * (REDIST_BLOCK / REDIST_TILE);
            const u32 ai = a0 + i, bi = b0 + tx;
            if (ai < na && bi < nb) *reinterpret_cast<T*>(dst0 + dso + (i64)ai * da + (i64)bi * db) = tile[tx][i];
        }
        __syncthreads();
    }
}

// A transposing segment of E-byte elements (E = 4 or 8) moved with 16-byte accesses on both sides,
// in groups of G = 16 / E neighbours, through a 64 x 64 tile of elements: each thread reads G groups
// along tile_a (contiguous on the source side) at rows b ... b + G - 1, transposes that G x G block
// in registers and stores it as G 16-byte entries, each a group along the innermost dimension
// (contiguous on the destination side), which the write phase stores as they are. Entry bg of tile
// row a sits at column bg ^ ((a / G) & 7), so the stores (rows G apart across the warp) and the loads
// (one row) of shared memory are free of bank conflicts. The launch's vector rule
// (launch_list.Segment.max_vec) guarantees 16-byte alignment of every group start; the elements of
// a partial group at an edge go word by word.
template <u32 E, int NOUT>
__device__ __forceinline__ void redist_tile_groups(const Seg* __restrict__ sg, u32 b, u64 src0, u64 dst0) {
    constexpr u32 TILE = 64, G = 16 / E, W = E / 4, GROUPS = TILE / G, ROWS = REDIST_BLOCK / GROUPS;
    static_assert(sizeof(uint4) * TILE * GROUPS <= REDIST_TILE_SHARED_BYTES, "the tile must fit");
    uint4 (*tile)[GROUPS] = reinterpret_cast<uint4 (*)[GROUPS]>(redist_tile_memory());
    const TileWalk<NOUT, TILE> w(sg);
    const u32 tx = threadIdx.x % GROUPS, ty = threadIdx.x / GROUPS;
    for (u32 t = b - sg->blk_begin; t < w.ntiles; t += sg->blk_count) {
        i64 so, dso;
        u32 a0, b0;
        w.at(sg, t, so, dso, a0, b0);
#pragma unroll
        for (u32 k = 0; k < GROUPS / ROWS; ++k) {  // read: groups along a across the warp, rows b ... b + G - 1
            const u32 bg = ty + k * ROWS, ai = a0 + G * tx, bi = b0 + G * bg;
            if (ai < w.na && bi < w.nb) {
                const char* p = reinterpret_cast<const char*>(src0 + so + (i64)ai * w.sa + (i64)bi * w.sb);
                u32 in[G][4] = {};
                if (ai + G <= w.na) {  // whole groups: one 16-byte load per row
#pragma unroll
                    for (u32 r = 0; r < G; ++r)
                        if (bi + r < w.nb) {
                            const uint4 v = *reinterpret_cast<const uint4*>(p + (i64)r * w.sb);
                            in[r][0] = v.x, in[r][1] = v.y, in[r][2] = v.z, in[r][3] = v.w;
                        }
                } else {  // a partial group: word by word
#pragma unroll
                    for (u32 r = 0; r < G; ++r)
#pragma unroll
                        for (u32 c = 0; c < G; ++c)
#pragma unroll
                            for (u32 q = 0; q < W; ++q)
                                if (bi + r < w.nb && ai + c < w.na)
                                    in[r][c * W + q] = *reinterpret_cast<const u32*>(p + (i64)r * w.sb + c * E + 4 * q);
                }
                const u32 col = bg ^ (tx & 7);  // rows G tx ... G tx + G - 1 share the swizzle
#pragma unroll
                for (u32 c = 0; c < G; ++c) {  // entry c: element c of every row, a pair or quad along b
                    u32 o[4];
#pragma unroll
                    for (u32 r = 0; r < G; ++r)
#pragma unroll
                        for (u32 q = 0; q < W; ++q) o[r * W + q] = in[r][c * W + q];
                    tile[G * tx + c][col] = make_uint4(o[0], o[1], o[2], o[3]);
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (u32 k = 0; k < TILE / ROWS; ++k) {  // write: groups along b across the warp
            const u32 a = ty + k * ROWS, ai = a0 + a, bi = b0 + G * tx;
            if (ai < w.na && bi < w.nb) {
                const uint4 v = tile[a][tx ^ ((a / G) & 7)];
                char* p = reinterpret_cast<char*>(dst0 + dso + (i64)ai * w.da + (i64)bi * w.db);
                if (bi + G <= w.nb) {
                    *reinterpret_cast<uint4*>(p) = v;
                } else {  // a partial group: word by word
                    const u32 o[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (u32 c = 0; c < G; ++c)
#pragma unroll
                        for (u32 q = 0; q < W; ++q)
                            if (bi + c < w.nb) *reinterpret_cast<u32*>(p + c * E + 4 * q) = o[c * W + q];
                }
            }
        }
        __syncthreads();
    }
}

// One block's share of one segment: rows of the segment, grid-stride over the segment's blocks.
template <int V, int LOGV, u32 RUN_BYTES, int NOUT>
__device__ __forceinline__ void redist_copy_segment(const Seg* __restrict__ sg, u32 b, const Bases& bases) {
    typedef typename VecT<V>::T T;
    // field f's bases: an index into the __grid_constant__ argument (read in place from the
    // parameter space; without __grid_constant__ a run-time index would copy the whole argument
    // into local memory in every thread, and an unrolled select costs 1.6x at 16 MB)
    const u32 f = sg->field & 0xffffu;
    const u64 in = bases.in_base[f];
    const i64 out = bases.out_delta[sg->field >> 16];
    const u64 src0 = sg->src + (in & sg->src_mask);
    const u64 dst0 = sg->dst + ((u64)out & sg->dst_mask);
    // Tile routines are compiled only into the families whose rows they can meet (a fixed run length
    // names the element size): a routine compiled in but never run still costs the kernel registers
    // (the 16-byte family at V = 16: 58 with the pair and quad routines in, 46 without).
    if constexpr (NOUT >= 2 && (RUN_BYTES == 0 || RUN_BYTES == V)) {
        if (sg->tile_a != REDIST_NONE && sg->row_bytes == V) {  // the same for the whole block
            redist_tile_segment<V, NOUT>(sg, b, src0, dst0);
            return;
        }
    }
    if constexpr (NOUT >= 2 && V == 16 && (RUN_BYTES == 0 || RUN_BYTES == 8)) {
        if (sg->tile_a != REDIST_NONE && sg->row_bytes == 8) {  // 8-byte elements in pairs
            redist_tile_groups<8, NOUT>(sg, b, src0, dst0);
            return;
        }
    }
    if constexpr (NOUT >= 2 && V == 16 && (RUN_BYTES == 0 || RUN_BYTES == 4)) {
        if (sg->tile_a != REDIST_NONE && sg->row_bytes == 4) {  // 4-byte elements in quads
            redist_tile_groups<4, NOUT>(sg, b, src0, dst0);
            return;
        }
    }
    if constexpr (RUN_BYTES != 0 && RUN_BYTES < V) {
        return;  // only groups of 4- or 8-byte transposing rows run at V = 16 in a family of such rows
    } else {
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
}

// The plain kernel: the copy alone.
template <int V, int LOGV, u32 RUN_BYTES, int NOUT>
__device__ __forceinline__ void copy_segments(const Bases& bases, const Seg* __restrict__ table, int nsegs) {
    const u32 b = blockIdx.x;
    const Seg* sg = table + redist_find_segment(table, nsegs, b);
    redist_copy_segment<V, LOGV, RUN_BYTES, NOUT>(sg, b, bases);
}

// The epoch kernels. UNPACK = 0: the copy kernel (local, push and pack segments; credits, arrivals);
// UNPACK = 1: the unpack kernel of the put path (waits for each source's put signal).
// proto: [ncredit] addresses of my credit slot in each source's control block,
//        [narrive] addresses of my arrival slot in each push destination's control block,
//        [nwait]   ranks of the push sources whose arrivals I wait for.
// wait = 0 (sync_symmetric_memory=False) skips the push credit waits (never a pack's); bump = 1 in the
// graph's last kernel.
template <int V, int LOGV, u32 RUN_BYTES, int NOUT, int UNPACK>
__device__ __forceinline__ void epoch_segments(const Bases& bases, const Seg* __restrict__ table, int nsegs, u64* ctl, const u64* __restrict__ proto, int nranks,
                                               int ncredit, int narrive, int nwait, int wait, int bump) {
    __shared__ u64 e_sh;
    __shared__ int last_sh;
    const u32 b = blockIdx.x;
    if (threadIdx.x == 0) {
        const u64 e = *(volatile u64*)(ctl + REDIST_CTL_EPOCH) + 1;
        e_sh = e;
        // the first block to run posts the credits (an L2 atomic; the others skip them)
        if (!UNPACK && ncredit > 0 && atomicMax(ctl + REDIST_CTL_POSTED, e) < e) {
            for (int i = 0; i < ncredit; ++i) redist_st_release((u64*)proto[i], e);
        }
    }
    __syncthreads();
    const u64 e = e_sh;
    if (nsegs > 0) {
        const Seg* sg = table + redist_find_segment(table, nsegs, b);
        if (threadIdx.x == 0 && sg->peer != REDIST_NONE) {
            if (UNPACK) {
                redist_wait_at_least(ctl + REDIST_CTL_PEERS + 2 * nranks + sg->peer, e);
            } else if (wait || sg->dst_mask == 0) {
                // a pack into send staging always waits: the put after this kernel overwrites the
                // destination's receive staging, which must be unpacked first
                redist_wait_at_least(ctl + REDIST_CTL_PEERS + sg->peer, e);
            }
        }
        __syncthreads();
        redist_copy_segment<V, LOGV, RUN_BYTES, NOUT>(sg, b, bases);
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {  // a one-block grid (tiny plans) needs no block counter
        u32* done = reinterpret_cast<u32*>(ctl + REDIST_CTL_DONE) + UNPACK;
        last_sh = gridDim.x == 1 || atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last_sh && threadIdx.x == 0) {
        __threadfence_system();
        if (!UNPACK) {
            for (int j = 0; j < narrive; ++j) redist_st_release((u64*)proto[ncredit + j], e);
            for (int i = 0; i < nwait; ++i)
                redist_wait_at_least(ctl + REDIST_CTL_PEERS + nranks + proto[ncredit + narrive + i], e);
        }
        if (gridDim.x > 1) reinterpret_cast<u32*>(ctl + REDIST_CTL_DONE)[UNPACK] = 0;
        if (bump) {
            __threadfence();
            *(volatile u64*)(ctl + REDIST_CTL_EPOCH) = e;
        }
    }
}
