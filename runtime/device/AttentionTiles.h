//===- AttentionTiles.h - Attention as tiles of one segment -----*- C++ -*-===//
//
// The one description of how attention is cut into tiles, for every device
// that computes it tile by tile (the CPU device today; a fused GPU kernel
// reads the same plan). A call's queries and keys carry a position and a
// segment (a sample, a packed sequence, or a sample's padding); query i may
// attend key j iff they share a segment and, when causal, kpos[j] <=
// qpos[i] (cpu/Kernels.h). So:
//
//  1. Regroup by segment: a query only meets keys of its own segment, and
//     the segments of an [S, B] lane are interleaved token by token.
//  2. Within a segment, order queries and keys by position (CP zigzag and
//     gathered keys arrive out of order). Then the keys a query may attend
//     are a prefix of the segment's keys, cut at its position.
//  3. Cut the queries into blocks of kQueryBlock and the keys into tiles of
//     kKeyBlock. Against a query block, a key tile is Full (every pair
//     allowed), Partial (the cut runs through it) or Empty (skipped); when
//     causal, the non-empty tiles are a prefix: about half the work.
//
// Everything here is index arithmetic on the host; a kernel gathers the
// rows it names.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_ATTENTIONTILES_H
#define MIMO_RUNTIME_DEVICE_ATTENTIONTILES_H

#include <cstdint>
#include <vector>

namespace mimo::device::tiles {

inline constexpr int64_t kQueryBlock = 64;
inline constexpr int64_t kKeyBlock = 64;

enum class TileMask : uint8_t { Full, Partial, Empty };

/// The mask of a tile whose queries have positions in [qlo, qhi] and keys
/// in [klo, khi] (one segment).
inline TileMask classify(int64_t qlo, int64_t qhi, int64_t klo, int64_t khi,
                         bool causal) {
  if (!causal || khi <= qlo)
    return TileMask::Full;
  if (klo > qhi)
    return TileMask::Empty;
  return TileMask::Partial;
}

/// One segment's queries and keys, each in increasing position (ties in
/// token order), with their positions.
struct Segment {
  std::vector<int64_t> queries, keys;    // token indices
  std::vector<int64_t> queryPos, keyPos; // their positions
  /// Keys query q (an index into `queries`) may attend: [0, cut(q)).
  int64_t cut(int64_t q, bool causal) const;
  /// Keys a block of queries [begin, end) needs: those of its last query
  /// (positions increase), the non-empty tiles' keys.
  int64_t span(int64_t begin, int64_t end, bool causal) const {
    return end > begin ? cut(end - 1, causal) : 0;
  }
};

/// The segments of one attention call that hold at least one query, in
/// increasing segment id.
std::vector<Segment> segmentsOf(const int64_t *qpos, const int64_t *qseg,
                                const int64_t *kpos, const int64_t *kseg,
                                int64_t Tq, int64_t Tk);

} // namespace mimo::device::tiles

#endif // MIMO_RUNTIME_DEVICE_ATTENTIONTILES_H
