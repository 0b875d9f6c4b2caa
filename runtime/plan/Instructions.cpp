//===- Instructions.cpp - The instruction set, declared once --------------===//

#include "runtime/plan/Plan.h"

#include <iterator>

#include "runtime/schedule/Formulas.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>

namespace mimo {

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

namespace {
constexpr InstrOperand M = InstrOperand::Module, B = InstrOperand::Bridge,
                       N = InstrOperand::None;
// name, operand, microbatch, send, recv, grad
const InstrInfo kInstrInfo[] = {
    {"forward", M, true, false, false, false},
    {"backward", M, true, false, false, true},
    {"weight_grad", M, true, false, false, true},
    {"shard", M, true, false, false, false},
    {"unshard", M, true, false, false, true},
    {"send_act", M, true, true, false, false},
    {"recv_act", M, true, false, true, false},
    {"send_grad", M, true, true, false, true},
    {"recv_grad", M, true, false, true, true},
    {"bridge_send", B, true, true, false, false},
    {"bridge_recv", B, true, false, true, false},
    {"bridge_broadcast", B, true, false, false, false},
    {"bridge_send_grad", B, true, true, false, true},
    {"bridge_recv_grad", B, true, false, true, true},
    {"bridge_broadcast_grad", B, true, false, false, true},
    {"colocated_forward", B, true, false, false, false},
    {"colocated_backward", B, true, false, false, true},
    {"reduce_grads", M, false, false, false, true},
    {"optimizer_step", N, false, false, false, false},
};
static_assert(std::size(kInstrInfo) == kNumInstrOps,
              "one entry per InstrOp, in its order");
} // namespace

const InstrInfo &instrInfo(InstrOp op) {
  return kInstrInfo[static_cast<int>(op)];
}

bool postedSend(const Instr &in) {
  return in.posted && instrInfo(in.op).isSend;
}

std::optional<InstrOp> parseInstrOp(std::string_view name) {
  for (int i = 0; i < kNumInstrOps; ++i)
    if (name == kInstrInfo[i].name)
      return static_cast<InstrOp>(i);
  return std::nullopt;
}

} // namespace mimo
