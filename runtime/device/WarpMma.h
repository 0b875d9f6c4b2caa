//===- WarpMma.h - A warp's tensor-core tiles, on the GPU and the host -*- C++
//-*-===//
//
// The warp-level matrix multiply-accumulate the bf16 fused attention is
// built from (FlashMmaBodies.h): PTX `mma.sync.aligned.m16n8k16.row.col.
// f32.bf16.bf16.f32`, D[16x8] = A[16x16] B[16x8] + C, bf16 operands, fp32
// accumulators, one warp of 32 lanes sharing the operands by a fixed
// layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"): with g = lane / 4
// and t = lane % 4,
//
//   C, D  element i (0..3):        row g + 8 (i / 2),  column 2t + i % 2;
//   A     register r (0..3), half: row g + 8 (r % 2),  column 2t + 8 (r / 2)
//                                  + half;
//   B     register r (0..1), half: row 2t + 8 r + half, column g;
//
// a register holding two bf16 keeps the lower-indexed one in its low 16
// bits. Code written against this header holds `Lanes::kLanes` lanes: on
// the GPU one, its own (DeviceLanes), on the host all 32 of a warp at once
// (HostLanes), so the unit tests run the very code the kernels run, with
// the fragments laid out lane by lane as the hardware lays them: an A
// assembled from the wrong accumulator elements, or a B loaded from the
// wrong row, gives wrong products on the host too. The host's mma gathers
// the whole A, B and C from the 32 lanes by the layout above, multiplies,
// and scatters D back; its quad reductions combine lanes in the order the
// GPU's shuffles do (bitwise the same sums).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_WARPMMA_H
#define MIMO_RUNTIME_DEVICE_WARPMMA_H

#include "runtime/device/KernelBodies.h"

#include <cstdint>
#include <cstring>

namespace mimo::device::mma {

inline constexpr int kWarpSize = 32;

#if defined(__CUDACC__)
/// A GPU thread: it holds its own lane. (Its functions are __host__
/// __device__ for nvcc's host pass, which compiles the templates that use
/// them but never runs them.)
struct DeviceLanes {
  static constexpr int kLanes = 1;
  MIMO_HD static int lane(int) {
#if defined(__CUDA_ARCH__)
    return static_cast<int>(threadIdx.x) & 31;
#else
    return 0;
#endif
  }
};
#endif

/// The host: it holds a whole warp, lane l at index l. (Its functions are
/// __host__ __device__ too, for nvcc, which compiles the host runners of
/// FlashMmaBodies.h in every file that includes it.)
struct HostLanes {
  static constexpr int kLanes = kWarpSize;
  MIMO_HD static int lane(int l) { return l; }
};

//===--- The m16n8k16 layouts
//----------------------------------------------===//
MIMO_HD inline int cRow(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
MIMO_HD inline int cCol(int lane, int i) { return 2 * (lane & 3) + (i & 1); }
MIMO_HD inline int aRow(int lane, int r) { return (lane >> 2) + 8 * (r & 1); }
MIMO_HD inline int aCol(int lane, int r, int half) {
  return 2 * (lane & 3) + 8 * (r >> 1) + half;
}
MIMO_HD inline int bRow(int lane, int r, int half) {
  return 2 * (lane & 3) + 8 * r + half;
}
MIMO_HD inline int bCol(int lane) { return lane >> 2; }

/// The accumulators of a 16x8 fp32 tile, the operands of a 16x16 (A) and a
/// 16x8 (B) bf16 tile, each lane's share.
template <class L> struct Acc {
  float x[L::kLanes][4];
};
template <class L> struct FragA {
  uint32_t x[L::kLanes][4];
};
template <class L> struct FragB {
  uint32_t x[L::kLanes][2];
};

template <class L> MIMO_HD inline void zero(Acc<L> &c) {
  for (int l = 0; l < L::kLanes; ++l)
    for (int i = 0; i < 4; ++i)
      c.x[l][i] = 0.0f;
}

/// Two floats rounded to bf16 (ties to even; NaN stays NaN), lo in the low
/// half: on the GPU one conversion instruction (PTX: the first source goes
/// to the upper half), on the host roundToBf16's bits.
MIMO_HD inline uint32_t pack(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t bits;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(hi), "f"(lo));
  return bits;
#else
  return static_cast<uint32_t>(bodies::bf16Bits(lo)) |
         (static_cast<uint32_t>(bodies::bf16Bits(hi)) << 16);
#endif
}
MIMO_HD inline uint32_t load32(const uint16_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

/// 16 bytes (eight bf16), both addresses 16-byte aligned: one vector load
/// and store on the GPU.
struct alignas(16) Bits128 {
  uint32_t w[4];
};
MIMO_HD inline Bits128 load128(const uint16_t *p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const Bits128 *>(p);
#else
  Bits128 v;
  memcpy(&v, p, sizeof(v));
  return v;
#endif
}
MIMO_HD inline void store128(uint16_t *p, const Bits128 &v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<Bits128 *>(p) = v;
#else
  memcpy(p, &v, sizeof(v));
#endif
}

//===--- Operands from shared memory (bf16 bits, row-major, `pitch` per row)
//-===//
// Every operand load is one `ldmatrix.x4`: four 8x8 matrices of bf16, each
// of 8 rows of 16 bytes (16-byte aligned). Lane 8 i + r gives the address
// of row r of matrix i; lane 4 r + w receives in register i the values at
// row r, columns 2w and 2w + 1 of matrix i, or with `.trans` the values at
// rows 2w and 2w + 1 of column r (PTX ISA, "ldmatrix"). The host runs the
// same row addresses through that rule, so an operand whose rows are
// misplaced reads wrong values on the host too.

/// out[lane][i] of ldmatrix.x4 (Trans: .trans), matrix i's row r at
/// rowOf(i, r).
#if defined(__CUDACC__)
template <bool Trans, class Rows>
MIMO_HD inline void ldmatrix4(uint32_t (&out)[1][4], Rows rowOf) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int lane = DeviceLanes::lane(0);
  const auto address = static_cast<unsigned>(
      __cvta_generic_to_shared(rowOf(lane >> 3, lane & 7)));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(out[0][0]), "=r"(out[0][1]), "=r"(out[0][2]),
                   "=r"(out[0][3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(out[0][0]), "=r"(out[0][1]), "=r"(out[0][2]),
                   "=r"(out[0][3])
                 : "r"(address));
#elif defined(__CUDA_ARCH__)
  // Below sm_80 the bf16 mma that reads these does not exist either.
  (void)out, (void)rowOf;
  __trap();
#else
  (void)out, (void)rowOf;
#endif
}
#endif
template <bool Trans, class Rows>
MIMO_HD inline void ldmatrix4(uint32_t (&out)[kWarpSize][4], Rows rowOf) {
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const int r = lane >> 2, w = lane & 3;
    for (int i = 0; i < 4; ++i) {
      if (Trans)
        out[lane][i] = static_cast<uint32_t>(rowOf(i, 2 * w)[r]) |
                       (static_cast<uint32_t>(rowOf(i, 2 * w + 1)[r]) << 16);
      else
        out[lane][i] = load32(rowOf(i, r) + 2 * w);
    }
  }
}

/// A = the 16x16 tile at `tile`: matrices (rows 0-7, columns 0-7), (8-15,
/// 0-7), (0-7, 8-15), (8-15, 8-15) are a0..a3.
template <class L>
MIMO_HD inline void loadA(FragA<L> &a, const uint16_t *tile, int pitch) {
  ldmatrix4<false>(a.x, [&](int i, int r) {
    return tile + (r + 8 * (i & 1)) * pitch + 8 * (i >> 1);
  });
}
/// How a B operand's 16x16 tile (two n-tiles of 8) lies in shared memory:
/// its rows are n (B[k][n] = tile[n][k]: the keys of a score product, a
/// register's two halves neighbours in a row) or k (B[k][n] = tile[k][n]:
/// the values of P V, a register's halves from two rows, hence .trans).
enum class BRows { N, K };

/// Two B operands side by side in n, B0 (n 0-7) and B1 (n 8-15), from the
/// tile at `tile`: matrix i is n-half i / 2, k-half i % 2, i.e. B0's
/// registers 0 and 1, then B1's.
template <BRows Rows, class L>
MIMO_HD inline void loadB2(FragB<L> &b0, FragB<L> &b1, const uint16_t *tile,
                           int pitch) {
  uint32_t x[L::kLanes][4];
  ldmatrix4<Rows == BRows::K>(x, [&](int i, int r) {
    const int n = 8 * (i >> 1), k = 8 * (i & 1);
    return Rows == BRows::N ? tile + (n + r) * pitch + k
                            : tile + (k + r) * pitch + n;
  });
  for (int l = 0; l < L::kLanes; ++l) {
    b0.x[l][0] = x[l][0];
    b0.x[l][1] = x[l][1];
    b1.x[l][0] = x[l][2];
    b1.x[l][1] = x[l][3];
  }
}

/// The A operand holding two accumulator tiles side by side, rounded to
/// bf16: columns 0-7 from `left`, 8-15 from `right` (FlashAttention's reuse
/// of a score tile's registers as the next product's operand: the C and A
/// layouts put the same (row, column) in the same lane).
template <class L>
MIMO_HD inline void accToA(FragA<L> &a, const Acc<L> &left,
                           const Acc<L> &right) {
  for (int l = 0; l < L::kLanes; ++l) {
    a.x[l][0] = pack(left.x[l][0], left.x[l][1]);
    a.x[l][1] = pack(left.x[l][2], left.x[l][3]);
    a.x[l][2] = pack(right.x[l][0], right.x[l][1]);
    a.x[l][3] = pack(right.x[l][2], right.x[l][3]);
  }
}

//===--- The product
//---------------------------------------------------------===//
#if defined(__CUDACC__)
/// c += a b on the tensor cores.
MIMO_HD inline void mma(Acc<DeviceLanes> &c, const FragA<DeviceLanes> &a,
                        const FragB<DeviceLanes> &b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // bf16 mma needs sm_80 (mimo-run refuses older GPUs before this runs).
  (void)c, (void)a, (void)b;
  __trap();
#elif defined(__CUDA_ARCH__)
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c.x[0][0]), "+f"(c.x[0][1]), "+f"(c.x[0][2]),
                 "+f"(c.x[0][3])
               : "r"(a.x[0][0]), "r"(a.x[0][1]), "r"(a.x[0][2]), "r"(a.x[0][3]),
                 "r"(b.x[0][0]), "r"(b.x[0][1]));
#else
  (void)c, (void)a, (void)b;
#endif
}
#endif

/// c += a b as the warp computes it: products of bf16 (exact in fp32)
/// summed in fp32, gathered from and scattered to the lanes by the layout.
MIMO_HD inline void mma(Acc<HostLanes> &c, const FragA<HostLanes> &a,
                        const FragB<HostLanes> &b) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int half = 0; half < 2; ++half)
        A[aRow(lane, r)][aCol(lane, r, half)] =
            bodies::widen(static_cast<uint16_t>(a.x[lane][r] >> (16 * half)));
    for (int r = 0; r < 2; ++r)
      for (int half = 0; half < 2; ++half)
        B[bRow(lane, r, half)][bCol(lane)] =
            bodies::widen(static_cast<uint16_t>(b.x[lane][r] >> (16 * half)));
    for (int i = 0; i < 4; ++i)
      C[cRow(lane, i)][cCol(lane, i)] = c.x[lane][i];
  }
  for (int lane = 0; lane < kWarpSize; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int row = cRow(lane, i), col = cCol(lane, i);
      float s = C[row][col];
      for (int k = 0; k < 16; ++k)
        s += A[row][k] * B[k][col];
      c.x[lane][i] = s;
    }
}

//===--- Reductions over the four lanes that share a row
//---------------------===//
#if defined(__CUDACC__)
MIMO_HD inline void quadMax(float (&v)[1]) {
#if defined(__CUDA_ARCH__)
  for (int mask = 1; mask <= 2; mask <<= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v[0], mask);
    v[0] = other > v[0] ? other : v[0];
  }
#else
  (void)v;
#endif
}
MIMO_HD inline void quadSum(float (&v)[1]) {
#if defined(__CUDA_ARCH__)
  for (int mask = 1; mask <= 2; mask <<= 1)
    v[0] += __shfl_xor_sync(0xffffffffu, v[0], mask);
#else
  (void)v;
#endif
}
/// The largest of the warp's values (every lane gets it).
MIMO_HD inline int64_t warpMax(const int64_t (&lanes)[1]) {
  int64_t v = lanes[0];
#if defined(__CUDA_ARCH__)
  for (int mask = 16; mask >= 1; mask >>= 1) {
    const int64_t other = __shfl_xor_sync(0xffffffffu, v, mask);
    v = other > v ? other : v;
  }
#endif
  return v;
}
#endif

/// The host's quad reductions: lane l combines with l ^ 1, then l ^ 2, in
/// the shuffles' order, with the GPU's comparisons.
MIMO_HD inline void quadMax(float (&v)[kWarpSize]) {
  for (int mask = 1; mask <= 2; mask <<= 1) {
    float next[kWarpSize];
    for (int l = 0; l < kWarpSize; ++l)
      next[l] = v[l ^ mask] > v[l] ? v[l ^ mask] : v[l];
    memcpy(v, next, sizeof(next));
  }
}
MIMO_HD inline void quadSum(float (&v)[kWarpSize]) {
  for (int mask = 1; mask <= 2; mask <<= 1) {
    float next[kWarpSize];
    for (int l = 0; l < kWarpSize; ++l)
      next[l] = v[l] + v[l ^ mask];
    memcpy(v, next, sizeof(next));
  }
}
MIMO_HD inline int64_t warpMax(const int64_t (&v)[kWarpSize]) {
  int64_t m = v[0];
  for (int l = 1; l < kWarpSize; ++l)
    m = v[l] > m ? v[l] : m;
  return m;
}

} // namespace mimo::device::mma

#endif // MIMO_RUNTIME_DEVICE_WARPMMA_H
