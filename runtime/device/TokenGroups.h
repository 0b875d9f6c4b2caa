//===- TokenGroups.h - A batch's tokens grouped by embedding row -*- C++
//-*-===//
//
// The embedding's backward adds each token's output gradient into the table
// row it looked up. Grouped on the host by row (ids outside the rank's
// vocabulary shard dropped, each group's tokens in order), the device can
// give every (row, column) its own thread that adds its tokens in order:
// deterministic, no atomics, every output written by one thread, and the
// same additions in the same order as a loop over the tokens, so both
// devices give the bits of the reference kernel (cpu/Kernels.h).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_TOKENGROUPS_H
#define MIMO_RUNTIME_DEVICE_TOKENGROUPS_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mimo::device {

/// Group g: table row rows[g] (relative to the shard), its tokens
/// tokens[offsets[g] .. offsets[g + 1]) in increasing order.
struct TokenGroupsView {
  const int64_t *rows = nullptr, *offsets = nullptr, *tokens = nullptr;
  int64_t groups = 0;
};

/// The groups of `ids` in one int64 array, [rows | offsets | tokens], for
/// one upload; groups by increasing row.
struct TokenGroups {
  std::vector<int64_t> packed;
  int64_t groups = 0;

  static TokenGroups of(const int64_t *ids, int64_t n, int64_t vocabBegin,
                        int64_t vocabEnd) {
    TokenGroups out;
    const int64_t rows = vocabEnd > vocabBegin ? vocabEnd - vocabBegin : 0;
    std::vector<int64_t> count(static_cast<size_t>(rows), 0);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i)
      if (ids[i] >= vocabBegin && ids[i] < vocabEnd) {
        if (count[static_cast<size_t>(ids[i] - vocabBegin)]++ == 0)
          ++out.groups;
        ++kept;
      }
    const int64_t G = out.groups;
    out.packed.assign(static_cast<size_t>(2 * G + 1 + kept), 0);
    int64_t *rowOf = out.packed.data(), *offsets = rowOf + G;
    // Where each used row's group starts, rows in increasing order.
    std::vector<int64_t> next(static_cast<size_t>(rows), -1);
    int64_t g = 0, start = 0;
    for (int64_t r = 0; r < rows; ++r)
      if (count[static_cast<size_t>(r)] > 0) {
        rowOf[g] = r;
        offsets[g] = start;
        next[static_cast<size_t>(r)] = start;
        start += count[static_cast<size_t>(r)];
        ++g;
      }
    offsets[G] = start;
    int64_t *tokens = offsets + G + 1;
    for (int64_t i = 0; i < n; ++i)
      if (ids[i] >= vocabBegin && ids[i] < vocabEnd)
        tokens[next[static_cast<size_t>(ids[i] - vocabBegin)]++] = i;
    return out;
  }

  /// The groups in `data`, a copy of `packed` (on a device, or packed.data()).
  TokenGroupsView view(const int64_t *data) const {
    return TokenGroupsView{data, data + groups, data + 2 * groups + 1, groups};
  }
};

} // namespace mimo::device

#endif // MIMO_RUNTIME_DEVICE_TOKENGROUPS_H
