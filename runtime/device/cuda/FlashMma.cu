//===- FlashMma.cu - The tensor-core attention kernels --------------------===//

#include "runtime/device/FlashMmaBodies.h"
#include "runtime/device/OncePerDevice.h"
#include "runtime/device/cuda/FlashMma.h"

namespace mimo::device::cuda {

namespace {

namespace fm = mimo::device::flashmma;

/// A program of FlashMmaBodies.h: block (blockIdx.x, head blockIdx.y),
/// four warps, a barrier around every chunk's load.
template <typename Program>
__global__ void __launch_bounds__(fm::kThreads)
    eachWarpBlock(const __grid_constant__ Program program) {
  extern __shared__ uint4 sharedWords[];
  unsigned char *shared = reinterpret_cast<unsigned char *>(sharedWords);
  const int64_t b = blockIdx.x, h = blockIdx.y;
  const int t = static_cast<int>(threadIdx.x), w = t / mma::kWarpSize;
  typename Program::template Warp<mma::DeviceLanes> state;
  program.stage(b, h, t, shared);
  program.template begin<mma::DeviceLanes>(b, h, w, state);
  const int64_t chunks = program.chunks(b);
  for (int64_t c = 0; c < chunks; ++c) {
    __syncthreads(); // the previous chunk is consumed (and the rows staged)
    program.load(b, h, c, t, shared);
    __syncthreads();
    program.template compute<mma::DeviceLanes>(b, h, c, w, shared, state);
  }
  program.template finish<mma::DeviceLanes>(b, h, w, state);
}

template <typename Program>
MmaLaunch launch(const char *name, const Program &program, int64_t heads,
                 cudaStream_t stream) {
  MmaLaunch result;
  result.kernel = name;
  const int64_t blocks = program.blocks();
  if (blocks <= 0 || heads <= 0)
    return result;
  const int bytes = static_cast<int>(Program::sharedBytes());
  if (bytes > 48 * 1024) {
    // Once per GPU (the caller made the rank's current): never set again
    // while another rank thread launches it (OncePerDevice.h).
    int device = 0;
    result.error = cudaGetDevice(&device);
    if (result.error == cudaSuccess)
      result.error = static_cast<cudaError_t>(sharedMemoryOptIns().ensure(
          reinterpret_cast<const void *>(&eachWarpBlock<Program>), device, [&] {
            return static_cast<int>(cudaFuncSetAttribute(
                eachWarpBlock<Program>,
                cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
          }));
    if (result.error != cudaSuccess)
      return result;
  }
  dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(heads));
  eachWarpBlock<<<grid, fm::kThreads, static_cast<size_t>(bytes), stream>>>(
      program);
  result.error = cudaGetLastError();
  return result;
}

} // namespace

MmaLaunch mmaAttentionForward(const flash::Shape &s, const uint16_t *q,
                              const uint16_t *k, const uint16_t *v, uint16_t *o,
                              float *lse, cudaStream_t stream) {
  MmaLaunch result;
  fm::withHeadDim(s.d, [&](auto dim) {
    result = launch("attention_forward_bf16_mma",
                    fm::Forward<dim.value>{{{s, false}}, q, k, v, o, lse},
                    s.heads, stream);
  });
  return result;
}

MmaLaunch mmaAttentionBackward(const flash::Shape &s, const uint16_t *q,
                               const uint16_t *k, const uint16_t *v,
                               const float *lse, const uint16_t *dout,
                               const float *D, float *dq, float *dk, float *dv,
                               cudaStream_t stream) {
  MmaLaunch result;
  fm::withHeadDim(s.d, [&](auto dim) {
    result = launch(
        "attention_backward_dq_bf16_mma",
        fm::BackwardQuery<dim.value>{{{s, false}}, q, k, v, lse, dout, D, dq},
        s.heads, stream);
    if (result.error != cudaSuccess)
      return;
    result = launch(
        "attention_backward_dkdv_bf16_mma",
        fm::BackwardKey<dim.value>{{{s, true}}, q, k, v, lse, dout, D, dk, dv},
        s.heads, stream);
  });
  return result;
}

} // namespace mimo::device::cuda
