//===- HfReadBack.h - An exported folder read back against its checkpoint -===//
//
// For the Hugging Face tests: every parameter of `module` read from an
// exported folder (readHfWeights, one rank holding whole tensors) must be
// bit for bit the checkpoint's tensor it was written from.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_TESTS_UNIT_HFREADBACK_H
#define MIMO_TESTS_UNIT_HFREADBACK_H

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/FileIo.h"
#include "runtime/checkpoint/HfWeights.h"
#include "runtime/config/Parameters.h"
#include "runtime/device/Device.h"
#include "runtime/model/Model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include <fcntl.h>

namespace mimo::hftest {

/// `outputHidden`: an encoder's projection width (the language hidden
/// size). Use with ASSERT_NO_FATAL_FAILURE.
inline void expectReadsBackBitForBit(const exec::HfFolder &folder,
                                     const ModuleConfig &module,
                                     int64_t outputHidden,
                                     const exec::Checkpoint &ckpt) {
  std::unique_ptr<device::Device> cpu = device::makeCpuDevice();
  exec::File model(
      (std::filesystem::path(ckpt.dir) / "model.safetensors").string(),
      O_RDONLY);
  std::vector<exec::Param> params;
  for (const ParamSpec &spec :
       stageParameters(module, outputHidden, false, 1, 0)) {
    exec::Param p;
    p.name = spec.name();
    p.rowEnd = p.globalRows = spec.rows;
    p.colEnd = p.globalCols = spec.cols;
    p.value = device::Tensor::empty(*cpu, spec.rows * spec.cols);
    params.push_back(std::move(p));
  }
  std::vector<exec::Param *> pointers;
  for (exec::Param &p : params)
    pointers.push_back(&p);
  exec::readHfWeights(folder, module, pointers);
  for (exec::Param &p : params) {
    const safetensors::TensorEntry *saved = ckpt.model.find(p.name);
    ASSERT_TRUE(saved) << p.name;
    std::vector<float> want(static_cast<size_t>(p.globalRows * p.globalCols));
    model.readAt(want.data(), saved->end - saved->begin,
                 ckpt.model.dataOffset + saved->begin);
    std::vector<float> got = p.value.toHost();
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
        << p.name;
  }
}

} // namespace mimo::hftest

#endif // MIMO_TESTS_UNIT_HFREADBACK_H
