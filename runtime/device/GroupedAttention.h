//===- GroupedAttention.h - GQA on kernels of one key head a query -*- C++
//-*-===//
//
// mimo's attention kernels read one key and value head per query head.
// Device::attentionForward/Backward take grouped keys and values (kvHeads
// < heads); these helpers give such kernels per-head copies (repeatKv) and
// sum the per-head key and value gradients back per group (sumKvGroups, in
// head order), in the device's own memory and stream order.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_GROUPEDATTENTION_H
#define MIMO_RUNTIME_DEVICE_GROUPEDATTENTION_H

#include "runtime/device/Device.h"

#include <string>

namespace mimo::device {

/// A device buffer released when it goes out of scope (null when empty).
class ScratchBuffer {
public:
  ScratchBuffer(Device &dev, int64_t bytes)
      : dev(dev), data(bytes > 0 ? dev.allocate(bytes) : nullptr) {}
  ~ScratchBuffer() {
    if (data)
      dev.release(data);
  }
  ScratchBuffer(const ScratchBuffer &) = delete;
  ScratchBuffer &operator=(const ScratchBuffer &) = delete;
  template <typename T> T *as() const { return static_cast<T *>(data); }

private:
  Device &dev;
  void *data;
};

/// `a` with one key and value head per query head: `a` itself without
/// GQA, else k and v repeated into buffers this object holds.
class PerHeadKeys {
public:
  PerHeadKeys(Device &dev, const AttentionArgs &a)
      : perHead(checked(a)), k(dev, bytes(a)), v(dev, bytes(a)) {
    if (a.repeat() == 1)
      return;
    dev.repeatKv(a.dtype, a.k, k.as<void>(), a.plan.Tk, a.kvHeads, a.repeat(),
                 a.headDim);
    dev.repeatKv(a.dtype, a.v, v.as<void>(), a.plan.Tk, a.kvHeads, a.repeat(),
                 a.headDim);
    perHead.k = k.as<void>();
    perHead.v = v.as<void>();
    perHead.kvHeads = a.heads;
  }
  const AttentionArgs &args() const { return perHead; }

  /// `a`, or DeviceError when its heads cannot be grouped as it says.
  static const AttentionArgs &checked(const AttentionArgs &a) {
    if (a.heads <= 0 || a.kvHeads <= 0 || a.headDim <= 0 ||
        a.heads % a.kvHeads != 0)
      throw DeviceError(
          "attention: " + std::to_string(a.heads) + " query heads in " +
          std::to_string(a.kvHeads) + " key-value groups of dimension " +
          std::to_string(a.headDim) + " (the groups must divide the heads)");
    if (a.dtype != DType::F32 && a.dtype != DType::BF16)
      throw DeviceError("attention: q, k and v must be fp32 or bf16");
    return a;
  }

private:
  static int64_t bytes(const AttentionArgs &a) {
    return a.repeat() == 1 ? 0
                           : a.plan.Tk * a.heads * a.headDim * sizeOf(a.dtype);
  }
  AttentionArgs perHead;
  ScratchBuffer k, v;
};

/// Key and value gradients per head, summed into the grouped dk and dv
/// when finish() is called (written directly without GQA).
class PerHeadKeyGrads {
public:
  PerHeadKeyGrads(Device &dev, const AttentionArgs &a, float *dk, float *dv)
      : dev(dev), a(a), dkOut(dk), dvOut(dv), dkHeads(dev, bytes(a)),
        dvHeads(dev, bytes(a)) {}
  float *dk() const { return a.repeat() == 1 ? dkOut : dkHeads.as<float>(); }
  float *dv() const { return a.repeat() == 1 ? dvOut : dvHeads.as<float>(); }
  void finish() {
    if (a.repeat() == 1)
      return;
    dev.sumKvGroups(dkHeads.as<float>(), dkOut, a.plan.Tk, a.kvHeads,
                    a.repeat(), a.headDim);
    dev.sumKvGroups(dvHeads.as<float>(), dvOut, a.plan.Tk, a.kvHeads,
                    a.repeat(), a.headDim);
  }

private:
  static int64_t bytes(const AttentionArgs &a) {
    return a.repeat() == 1 ? 0 : a.plan.Tk * a.heads * a.headDim * 4;
  }
  Device &dev;
  AttentionArgs a;
  float *dkOut, *dvOut;
  ScratchBuffer dkHeads, dvHeads;
};

} // namespace mimo::device

#endif // MIMO_RUNTIME_DEVICE_GROUPEDATTENTION_H
