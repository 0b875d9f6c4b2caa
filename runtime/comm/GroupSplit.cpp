//===- GroupSplit.cpp - How a rank splits the world into its groups -------===//

#include "runtime/comm/GroupSplit.h"

#include <algorithm>
#include <cstddef>

namespace mimo::comm {

std::vector<GroupSplit>
groupSplits(const std::vector<std::vector<std::vector<int64_t>>> &families,
            int64_t self, int64_t worldSize, bool splitWorld) {
  std::vector<GroupSplit> splits;
  for (const auto &family : families) {
    GroupSplit s;
    bool world = !splitWorld && family.size() == 1 &&
                 family[0].size() == static_cast<size_t>(worldSize);
    for (size_t g = 0; g < family.size() && !world; ++g) {
      if (family[g].size() < 2)
        continue;
      s.split = true;
      for (size_t i = 0; i < family[g].size(); ++i)
        if (family[g][i] == self) {
          s.color = static_cast<int>(g);
          s.key = static_cast<int>(i);
        }
    }
    splits.push_back(s);
  }
  return splits;
}

std::vector<int64_t> ringNeighbours(const std::vector<int64_t> &group,
                                    int64_t self) {
  const auto n = static_cast<int64_t>(group.size());
  const auto at = std::find(group.begin(), group.end(), self);
  if (n < 2 || at == group.end())
    return {};
  const auto own = static_cast<int64_t>(at - group.begin());
  std::vector<int64_t> around = {(own + n - 1) % n, (own + 1) % n};
  std::sort(around.begin(), around.end());
  around.erase(std::unique(around.begin(), around.end()), around.end());
  return around;
}

} // namespace mimo::comm
