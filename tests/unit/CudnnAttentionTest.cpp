//===- CudnnAttentionTest.cpp - cuDNN's attention graphs, on the host -----===//
//
// device/cuda/CudnnAttention.h builds cuDNN graph-API descriptors; no GPU
// here, so a fake cuDNN records every descriptor, attribute and execution
// and the tests read the graphs back: the forward's and backward's
// operations in the order cuDNN's engines recognise, the tensors' layouts
// for [S, B] lanes and samples one after another, grouped-query attention
// without repeated keys, the deterministic backward (dQ straight from its
// GEMM), the variant pack, the plan cache, and the failures (no engine, a
// refused finalize) as CudnnErrors naming cuDNN's reason. Also which calls
// cuDNN takes (cudnnAttentionShape) and where mimo looks for libcudnn.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudnnAttention.h"
#include "runtime/device/AttentionTiles.h"
#include "runtime/device/cuda/Cudnn.h"
#include "tests/unit/AttentionCases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

using namespace mimo::device;
using namespace mimo::device::cuda;
using mimo::testing::Mask;

namespace {

/// One descriptor of the fake: its type and every attribute's bytes.
struct FakeDescriptor {
  cudnnBackendDescriptorType_t type;
  std::map<int, std::vector<char>> attributes;
  std::map<int, int64_t> counts;
  bool finalized = false;
  template <typename T> std::vector<T> get(int name) const {
    auto it = attributes.find(name);
    if (it == attributes.end())
      return {};
    std::vector<T> out(it->second.size() / sizeof(T));
    std::memcpy(out.data(), it->second.data(), it->second.size());
    return out;
  }
};

/// The fake library's state (one test at a time).
struct Fake {
  std::vector<std::unique_ptr<FakeDescriptor>> all;
  int64_t live = 0, engineConfigs = 2, workspace = 4096;
  /// Engine configs that refuse to finalize as a plan (the first n).
  int refusedPlans = 0;
  bool graphRefused = false;
  std::vector<const FakeDescriptor *> executed;
  std::vector<std::vector<int64_t>> packUids;
  std::vector<std::vector<void *>> packPointers;
  std::vector<void *> packWorkspaces;
  std::vector<std::vector<float>> packScalars;
};
Fake *fake = nullptr;

FakeDescriptor *of(cudnnBackendDescriptor_t d) {
  return reinterpret_cast<FakeDescriptor *>(d);
}

size_t bytesOf(cudnnBackendAttributeType_t type) {
  switch (type) {
  case CUDNN_TYPE_INT64:
    return 8;
  case CUDNN_TYPE_BOOLEAN:
    return sizeof(bool);
  case CUDNN_TYPE_FLOAT:
    return 4;
  case CUDNN_TYPE_DOUBLE:
    return 8;
  case CUDNN_TYPE_VOID_PTR:
  case CUDNN_TYPE_HANDLE:
  case CUDNN_TYPE_BACKEND_DESCRIPTOR:
    return sizeof(void *);
  default: // the enumerations
    return 4;
  }
}

cudnnStatus_t create(cudnnBackendDescriptorType_t type,
                     cudnnBackendDescriptor_t *d) {
  fake->all.push_back(std::make_unique<FakeDescriptor>());
  fake->all.back()->type = type;
  *d = reinterpret_cast<cudnnBackendDescriptor_t>(fake->all.back().get());
  ++fake->live;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t destroy(cudnnBackendDescriptor_t) {
  --fake->live;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t setAttribute(cudnnBackendDescriptor_t d,
                           cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t type, int64_t count,
                           const void *values) {
  const char *bytes = static_cast<const char *>(values);
  of(d)->attributes[name].assign(bytes, bytes + bytesOf(type) * count);
  of(d)->counts[name] = count;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t finalize(cudnnBackendDescriptor_t d) {
  FakeDescriptor *f = of(d);
  if (f->type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR && fake->graphRefused)
    return CUDNN_STATUS_NOT_SUPPORTED;
  if (f->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR &&
      fake->refusedPlans > 0) {
    --fake->refusedPlans;
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  f->finalized = true;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t getAttribute(cudnnBackendDescriptor_t const d,
                           cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t, int64_t requested,
                           int64_t *count, void *out) {
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    *count = requested == 0 ? fake->engineConfigs
                            : std::min(requested, fake->engineConfigs);
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
    *count = 1;
    *static_cast<int64_t *>(out) = fake->workspace;
    return CUDNN_STATUS_SUCCESS;
  }
  (void)d;
  return CUDNN_STATUS_BAD_PARAM;
}
cudnnStatus_t execute(cudnnHandle_t, cudnnBackendDescriptor_t plan,
                      cudnnBackendDescriptor_t pack) {
  fake->executed.push_back(of(plan));
  std::vector<int64_t> uids =
      of(pack)->get<int64_t>(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  std::vector<void *> pointers =
      of(pack)->get<void *>(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  fake->packUids.push_back(uids);
  fake->packPointers.push_back(pointers);
  fake->packWorkspaces.push_back(
      of(pack)->get<void *>(CUDNN_ATTR_VARIANT_PACK_WORKSPACE).at(0));
  // The by-value scalars, read while the call is enqueued.
  std::vector<float> scalars;
  for (size_t i = 0; i < uids.size(); ++i)
    if (uids[i] == 6 || uids[i] == 7 || uids[i] == 12)
      scalars.push_back(*static_cast<float *>(pointers[i]));
  fake->packScalars.push_back(scalars);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t setStream(cudnnHandle_t, cudaStream_t) {
  return CUDNN_STATUS_SUCCESS;
}
const char *errorString(cudnnStatus_t status) {
  return status == CUDNN_STATUS_NOT_SUPPORTED ? "CUDNN_STATUS_NOT_SUPPORTED"
                                              : "CUDNN_STATUS_OTHER";
}
void lastErrorString(char *message, size_t size) {
  std::snprintf(message, size, "%s", "no fused pattern matched");
}

CudnnApi fakeApi() {
  CudnnApi a;
  a.createDescriptor = create;
  a.destroyDescriptor = destroy;
  a.setAttribute = setAttribute;
  a.getAttribute = getAttribute;
  a.finalize = finalize;
  a.execute = execute;
  a.setStream = setStream;
  a.errorString = errorString;
  a.lastErrorString = lastErrorString;
  return a;
}

class CudnnGraphs : public ::testing::Test {
protected:
  void SetUp() override {
    state = std::make_unique<Fake>();
    fake = state.get();
  }
  void TearDown() override { fake = nullptr; }

  /// The operations of the graph executed `n`-th, by pointwise mode (or
  /// "matmul", "reduction max/add", "reshape").
  std::vector<std::string> operations(size_t n) const {
    const FakeDescriptor *plan = fake->executed.at(n);
    // plan -> engine config: the fake's configs carry nothing; find the
    // operation graph created before the plan instead (the latest one).
    const FakeDescriptor *graph = nullptr;
    for (const auto &d : fake->all) {
      if (d->type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
        graph = d.get();
      if (d.get() == plan)
        break;
    }
    std::vector<std::string> out;
    for (void *op : graph->get<void *>(CUDNN_ATTR_OPERATIONGRAPH_OPS))
      out.push_back(describe(of(static_cast<cudnnBackendDescriptor_t>(op))));
    return out;
  }
  static std::string describe(const FakeDescriptor *op) {
    switch (op->type) {
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
      return "matmul";
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
      return "reshape";
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
      auto r = of(static_cast<cudnnBackendDescriptor_t>(
          op->get<void *>(CUDNN_ATTR_OPERATION_REDUCTION_DESC).at(0)));
      auto kind = r->get<cudnnReduceTensorOp_t>(CUDNN_ATTR_REDUCTION_OPERATOR);
      return kind.at(0) == CUDNN_REDUCE_TENSOR_MAX ? "max" : "sum";
    }
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
      auto pw = of(static_cast<cudnnBackendDescriptor_t>(
          op->get<void *>(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR).at(0)));
      switch (pw->get<cudnnPointwiseMode_t>(CUDNN_ATTR_POINTWISE_MODE).at(0)) {
      case CUDNN_POINTWISE_MUL:
        return "mul";
      case CUDNN_POINTWISE_ADD:
        return "add";
      case CUDNN_POINTWISE_SUB:
        return "sub";
      case CUDNN_POINTWISE_DIV:
        return "div";
      case CUDNN_POINTWISE_EXP:
        return "exp";
      case CUDNN_POINTWISE_LOG:
        return "log";
      case CUDNN_POINTWISE_GEN_INDEX:
        return "index" + std::to_string(
                             pw->get<int64_t>(CUDNN_ATTR_POINTWISE_AXIS).at(0));
      case CUDNN_POINTWISE_CMP_GE:
        return "ge";
      case CUDNN_POINTWISE_BINARY_SELECT:
        return "select";
      default:
        return "pointwise?";
      }
    }
    default:
      return "?";
    }
  }
  /// The tensor descriptor of unique id `uid` (the latest made).
  const FakeDescriptor *tensor(int64_t uid) const {
    const FakeDescriptor *found = nullptr;
    for (const auto &d : fake->all)
      if (d->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR &&
          d->get<int64_t>(CUDNN_ATTR_TENSOR_UNIQUE_ID) ==
              std::vector<int64_t>{uid})
        found = d.get();
    return found;
  }
  static std::vector<int64_t> dims(const FakeDescriptor *t) {
    return t->get<int64_t>(CUDNN_ATTR_TENSOR_DIMENSIONS);
  }
  static std::vector<int64_t> strides(const FakeDescriptor *t) {
    return t->get<int64_t>(CUDNN_ATTR_TENSOR_STRIDES);
  }

  std::unique_ptr<Fake> state;
  CudnnApi api = fakeApi();
  cudnnHandle_t handle = reinterpret_cast<cudnnHandle_t>(0x1);
};

/// The attention call of a mask's plan (bf16, pointers never read).
AttentionArgs call(const tiles::Plan &plan, int64_t heads, int64_t kvHeads,
                   int64_t d) {
  AttentionArgs a;
  a.dtype = DType::BF16;
  a.plan = plan.hostView();
  a.heads = heads;
  a.kvHeads = kvHeads;
  a.headDim = d;
  return a;
}

tiles::Plan planOf(const Mask &m) {
  return tiles::plan(m.qpos.data(), m.qseg.data(), m.kpos.data(), m.kseg.data(),
                     static_cast<int64_t>(m.qpos.size()),
                     static_cast<int64_t>(m.kpos.size()), m.causal);
}

void *at(uintptr_t address) { return reinterpret_cast<void *>(address); }

} // namespace

TEST_F(CudnnGraphs, ForwardIsTheFusedPatternOverAnSBLane) {
  // [S = 256, B = 2], 4 heads over 2 groups of 64.
  tiles::Plan plan = planOf(mimo::testing::lane(256, 2));
  std::string why;
  auto shape = cudnnAttentionShape(call(plan, 4, 2, 64), 91900, 9, false, &why);
  ASSERT_TRUE(shape) << why;
  CudnnAttention attention(api, 91900, handle);
  std::vector<int64_t> asked;
  auto workspace = [&](int64_t bytes) {
    asked.push_back(bytes);
    return at(0x9000);
  };
  attention.forward(*shape,
                    {at(0x1000), at(0x2000), at(0x3000), at(0x4000),
                     static_cast<float *>(at(0x5000))},
                    nullptr, workspace);
  EXPECT_EQ(operations(0),
            (std::vector<std::string>{"matmul", "mul", "index2", "index3", "ge",
                                      "select", "max", "sub", "exp", "sum",
                                      "log", "add", "div", "matmul"}));
  // Q [b, h, s, d] of tokens s * 2 + b: strides (4 x 64, 64, 2 x 4 x 64, 1).
  EXPECT_EQ(dims(tensor(1)), (std::vector<int64_t>{2, 4, 256, 64}));
  EXPECT_EQ(strides(tensor(1)), (std::vector<int64_t>{256, 64, 512, 1}));
  // K^T keeps the groups (no repeated keys): [b, 2, d, s].
  EXPECT_EQ(dims(tensor(2)), (std::vector<int64_t>{2, 2, 64, 256}));
  EXPECT_EQ(strides(tensor(2)), (std::vector<int64_t>{128, 64, 1, 256}));
  EXPECT_EQ(dims(tensor(3)), (std::vector<int64_t>{2, 2, 256, 64}));
  // Statistics [b, h, s, 1], fp32, written (not virtual).
  EXPECT_EQ(dims(tensor(5)), (std::vector<int64_t>{2, 4, 256, 1}));
  EXPECT_EQ(tensor(5)->get<cudnnDataType_t>(CUDNN_ATTR_TENSOR_DATA_TYPE).at(0),
            CUDNN_DATA_FLOAT);
  EXPECT_EQ(tensor(5)->attributes.count(CUDNN_ATTR_TENSOR_IS_VIRTUAL), 0u);
  // The variant pack: the five buffers and the two scalars, by value.
  ASSERT_EQ(fake->packUids.size(), 1u);
  EXPECT_EQ(fake->packUids[0], (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(fake->packPointers[0][0], at(0x1000));
  EXPECT_EQ(fake->packPointers[0][4], at(0x5000));
  ASSERT_EQ(fake->packScalars[0].size(), 2u);
  EXPECT_FLOAT_EQ(fake->packScalars[0][0], 0.125f); // 1 / sqrt(64)
  EXPECT_TRUE(std::isinf(fake->packScalars[0][1]) &&
              fake->packScalars[0][1] < 0);
  EXPECT_EQ(asked, (std::vector<int64_t>{4096}));
  EXPECT_EQ(fake->packWorkspaces[0], at(0x9000));
  // The plan is kept: a second call builds nothing.
  const size_t made = fake->all.size();
  attention.forward(*shape,
                    {at(0x1000), at(0x2000), at(0x3000), at(0x4000),
                     static_cast<float *>(at(0x5000))},
                    nullptr, workspace);
  EXPECT_EQ(attention.plansBuilt(), 1);
  EXPECT_EQ(fake->all.size(), made + 1); // the second call's variant pack
}

TEST_F(CudnnGraphs, FullMaskHasNoCausalOpsAndOldLibrariesGetTheLowestFloat) {
  Mask samples;
  for (int64_t t = 0; t < 24; ++t) {
    samples.qpos.push_back(0);
    samples.qseg.push_back(t / 8);
  }
  samples.kpos = samples.qpos;
  samples.kseg = samples.qseg;
  samples.causal = false;
  tiles::Plan plan = planOf(samples);
  auto shape =
      cudnnAttentionShape(call(plan, 2, 2, 32), 90500, 9, false, nullptr);
  ASSERT_TRUE(shape);
  EXPECT_EQ(shape->batch, 3);
  EXPECT_EQ(shape->q, (std::array<int64_t, 4>{8 * 64, 32, 64, 1}));
  CudnnAttention attention(api, 90500, handle);
  attention.forward(*shape, {}, nullptr, [](int64_t) { return at(0x10); });
  EXPECT_EQ(operations(0),
            (std::vector<std::string>{"matmul", "mul", "max", "sub", "exp",
                                      "sum", "log", "add", "div", "matmul"}));
  EXPECT_EQ(fake->packScalars[0][1], -3.4028234663852886e38f);
}

TEST_F(CudnnGraphs, BackwardIsDeterministicAndReducesGroupsInCudnn) {
  tiles::Plan plan = planOf(mimo::testing::lane(128, 1));
  auto shape =
      cudnnAttentionShape(call(plan, 8, 2, 128), 91900, 9, true, nullptr);
  ASSERT_TRUE(shape);
  CudnnAttention attention(api, 91900, handle);
  std::vector<int64_t> asked;
  attention.backward(*shape, {}, nullptr, [&](int64_t bytes) {
    asked.push_back(bytes);
    return at(0x10000);
  });
  // D = rowsum(dO o) first; P recomputed from the statistics and masked;
  // dV and dK per head then summed per group; dQ straight from its GEMM.
  EXPECT_EQ(operations(0), (std::vector<std::string>{
                               "mul",     "sum",    "mul", // D
                               "matmul",  "mul",    "sub", // scores - lse
                               "index2",  "index3", "ge",  "select", "exp", // P
                               "reshape", "matmul", "sum",        // dV
                               "matmul",  "sub",    "mul", "mul", // dS
                               "reshape", "matmul", "sum",        // dK
                               "reshape", "matmul"}));            // dQ
  // dQ is the last GEMM's output, a non-virtual bf16 tensor: no fp32
  // accumulation by atomics (cuDNN's deterministic algorithm).
  EXPECT_EQ(tensor(9)->get<cudnnDataType_t>(CUDNN_ATTR_TENSOR_DATA_TYPE).at(0),
            CUDNN_DATA_BFLOAT16);
  EXPECT_EQ(dims(tensor(10)), (std::vector<int64_t>{1, 2, 128, 128}));
  // softmax_sum (D) lives at the workspace's start, cuDNN's after it.
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], 8 * 128 * 4 + 4096);
  std::vector<int64_t> uids = fake->packUids[0];
  ASSERT_EQ(uids.back(), 13);
  EXPECT_EQ(fake->packPointers[0].back(), at(0x10000));
  EXPECT_EQ(
      fake->packWorkspaces[0],
      static_cast<void *>(static_cast<char *>(at(0x10000)) + 8 * 128 * 4));
  EXPECT_EQ(uids.size(), 13u);
}

TEST_F(CudnnGraphs, RefusedEnginesAreSkippedAndNoEngineIsAnError) {
  tiles::Plan plan = planOf(mimo::testing::lane(64, 1));
  auto shape =
      cudnnAttentionShape(call(plan, 2, 2, 64), 91900, 9, false, nullptr);
  ASSERT_TRUE(shape);
  fake->refusedPlans = 1; // the first configuration does not finalize
  CudnnAttention attention(api, 91900, handle);
  attention.forward(*shape, {}, nullptr, [](int64_t) { return at(0x10); });
  EXPECT_EQ(fake->executed.size(), 1u);
  const int64_t liveBefore = fake->live;

  fake->refusedPlans = 100; // none does, in either heuristics mode
  auto other = *shape;
  other.headDim = 128;
  try {
    attention.forward(other, {}, nullptr, [](int64_t) { return at(0x10); });
    FAIL() << "no engine ran it";
  } catch (const CudnnError &e) {
    EXPECT_NE(std::string(e.what()).find("no engine runs this forward"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no fused pattern matched"),
              std::string::npos)
        << e.what();
  }
  fake->refusedPlans = 0;
  fake->graphRefused = true;
  other.headDim = 96;
  EXPECT_THROW(
      attention.backward(other, {}, nullptr, [](int64_t) { return at(0x10); }),
      CudnnError);
  EXPECT_EQ(attention.plansBuilt(), 1);
  // Whatever a failed build made is released, and a plan with its owner.
  EXPECT_EQ(fake->live, liveBefore);
  fake->graphRefused = false;
  {
    CudnnAttention other(api, 91900, handle);
    other.forward(*shape, {}, nullptr, [](int64_t) { return at(0x10); });
  }
  EXPECT_EQ(fake->live, liveBefore);
}

TEST(CudnnAttentionShape, WhatCudnnTakesAndWhatItLeavesToMimo) {
  tiles::Plan lane = planOf(mimo::testing::lane(128, 2));
  std::string why;
  EXPECT_TRUE(cudnnAttentionShape(call(lane, 4, 4, 128), 91900, 9, true, &why));
  AttentionArgs fp32 = call(lane, 4, 4, 128);
  fp32.dtype = DType::F32;
  EXPECT_FALSE(cudnnAttentionShape(fp32, 91900, 9, false, &why));
  EXPECT_NE(why.find("bf16"), std::string::npos);
  EXPECT_FALSE(
      cudnnAttentionShape(call(planOf(mimo::testing::zigzagRank1()), 4, 4, 64),
                          91900, 9, false, &why));
  EXPECT_NE(why.find("mask"), std::string::npos);
  EXPECT_FALSE(
      cudnnAttentionShape(call(planOf(mimo::testing::packedThd()), 4, 4, 64),
                          91900, 9, false, &why));
  EXPECT_FALSE(
      cudnnAttentionShape(call(lane, 4, 4, 36), 91900, 9, false, &why));
  EXPECT_NE(why.find("head dimension 36"), std::string::npos);
  EXPECT_TRUE(
      cudnnAttentionShape(call(lane, 4, 4, 256), 91900, 9, false, &why));
  EXPECT_FALSE(
      cudnnAttentionShape(call(lane, 4, 4, 256), 91900, 8, false, &why))
      << "an A100 takes up to 128";
  EXPECT_FALSE(
      cudnnAttentionShape(call(lane, 4, 4, 64), 91000, 9, false, &why));
  // Before 9.16 the backward wants keys in tiles of 128; the forward not.
  tiles::Plan odd = planOf(mimo::testing::lane(100, 1));
  EXPECT_TRUE(cudnnAttentionShape(call(odd, 4, 4, 64), 91500, 9, false, &why));
  EXPECT_FALSE(cudnnAttentionShape(call(odd, 4, 4, 64), 91500, 9, true, &why));
  EXPECT_TRUE(cudnnAttentionShape(call(odd, 4, 4, 64), 91600, 9, true, &why));
}

TEST(CudnnLibrary, SearchOrderEndsInPythonEnvironments) {
  CudnnSearch s;
  s.cudaHome = "/opt/cuda";
  s.virtualEnv = "/venv";
  s.home = "/home/u";
  s.pythonPrefixes = {"/opt/conda"};
  std::vector<std::string> c = cudnnCandidates(s);
  ASSERT_GE(c.size(), 6u);
  EXPECT_EQ(c[0], "libcudnn.so.9"); // LD_LIBRARY_PATH and ld.so.cache first
  EXPECT_EQ(c[1], "/opt/cuda/lib64/libcudnn.so.9");
  auto position = [&](const std::string &path) {
    return std::find(c.begin(), c.end(), path) - c.begin();
  };
  const auto venv = position(
      "/venv/lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn.so.9");
  const auto conda = position(
      "/opt/conda/lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn.so.9");
  const auto local =
      position("/home/u/.local/lib/python3*/site-packages/nvidia/cudnn/lib/"
               "libcudnn.so.9");
  EXPECT_LT(position("/usr/local/cuda/lib64/libcudnn.so.9"), venv);
  EXPECT_LT(venv, conda);
  EXPECT_LT(conda, local);
  EXPECT_LT(local, static_cast<long>(c.size()));
  s.explicitLibrary = "/x/libcudnn.so.9";
  EXPECT_EQ(cudnnCandidates(s), (std::vector<std::string>{"/x/libcudnn.so.9"}));
  EXPECT_EQ(cudnnVersionText(91900), "9.19.0");
  EXPECT_EQ(cudnnVersionText(90102), "9.1.2");
}

TEST(CudnnLibrary, TheToolkitsCudnnLoadsWithoutAGpu) {
  // The CUDA toolkit of the development machines ships cuDNN 9 beside its
  // headers: loading it and reading its version needs no GPU.
  if (access("/usr/local/cuda/lib64/libcudnn.so.9", R_OK) != 0)
    GTEST_SKIP() << "no cuDNN in /usr/local/cuda/lib64";
  const CudnnLibrary &library = cudnnLibrary();
  ASSERT_EQ(library.problem, "");
  EXPECT_GE(library.version, kCudnnMinimumVersion);
  EXPECT_EQ(library.version / 100, static_cast<size_t>(CUDNN_VERSION / 100))
      << "the library beside the headers this build used";
  EXPECT_NE(library.path.find("libcudnn"), std::string::npos) << library.path;
}
