//===- ParamGroups.cpp - What AdamW updates, and how ----------------------===//

#include "runtime/exec/ParamGroups.h"

#include <algorithm>

namespace mimo::exec {

ParamGroups paramGroups(const std::vector<Param> &params,
                        const ModuleConfig &module, const TrainConfig &train) {
  std::vector<const Param *> order;
  for (const Param &p : params)
    order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const Param *a, const Param *b) {
    return a->flatBegin < b->flatBegin;
  });
  ParamGroups groups;
  const std::string head = module.name + ".";
  for (const Param *p : order) {
    const std::string local = p->name.compare(0, head.size(), head) == 0
                                  ? p->name.substr(head.size())
                                  : p->name;
    if (module.frozen(local)) {
      groups.frozenElements += p->size();
      if (!groups.frozen.empty() && groups.frozen.back().second == p->flatBegin)
        groups.frozen.back().second = p->flatEnd;
      else
        groups.frozen.push_back({p->flatBegin, p->flatEnd});
      continue;
    }
    groups.trainableElements += p->size();
    // Without weight decay the rule changes nothing: one setting.
    const bool decay = train.weightDecay == 0 || decayed(p->globalRows, train);
    if (!groups.trainable.empty() &&
        groups.trainable.back().end == p->flatBegin &&
        groups.trainable.back().decay == decay)
      groups.trainable.back().end = p->flatEnd;
    else
      groups.trainable.push_back({p->flatBegin, p->flatEnd, decay});
  }
  return groups;
}

} // namespace mimo::exec
