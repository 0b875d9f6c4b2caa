//===- CudaDevice.cu - The CUDA device -----------------------------------===//
//
// docs/gpu.md. One CudaDevice per rank: its own non-blocking stream on GPU
// `ordinal`, memory from that GPU's stream-ordered pool (cudaMallocAsync,
// kept cached: no cudaMalloc per instruction), a cuBLASLt handle for GEMMs
// and, for every other kernel, the per-index bodies of KernelBodies.h
// launched as a grid-stride loop. Nothing waits on the host except
// download() and synchronize(); other ranks' streams are ordered against
// this one with events (record/wait).
//
// Reductions into the step's scalars (sums of squares, the masked loss sum)
// are two launches: a fixed number of blocks, chosen from n alone, each
// reducing its stride in a fixed tree, then one thread adding the blocks in
// order. No atomics anywhere, so a run is bitwise reproducible.
//
// Errors: a failed launch or call throws DeviceError naming the kernel or
// call; an asynchronous fault surfaces at the next call that reports it,
// named with the last kernel launched.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaDeviceImpl.cuh"

namespace mimo::device::cuda {

namespace detail {

void *CudaDevice::allocate(int64_t bytes) {
  activate();
  void *p = nullptr;
  cudaError_t error = cudaMallocAsync(
      &p, static_cast<size_t>(std::max<int64_t>(bytes, 1)), stream);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t freeBytes = 0, totalBytes = 0;
    cudaMemGetInfo(&freeBytes, &totalBytes);
    throw DeviceError("out of GPU memory on " + label + " allocating " +
                      std::to_string(bytes) + " bytes (" +
                      std::to_string(freeBytes >> 20) + " of " +
                      std::to_string(totalBytes >> 20) + " MiB free)");
  }
  checkCall(error, "cudaMallocAsync");
  std::lock_guard<std::mutex> lock(sizesMutex);
  int64_t size = std::max<int64_t>(bytes, 1);
  sizes[p] = size;
  live += size;
  peak = std::max(peak, live);
  return p;
}

int64_t CudaDevice::peakBytes() const {
  std::lock_guard<std::mutex> lock(sizesMutex);
  return peak;
}

void CudaDevice::resetPeakBytes() {
  std::lock_guard<std::mutex> lock(sizesMutex);
  peak = live;
}

void CudaDevice::release(void *data) {
  // From destructors: never throws. Stream-ordered, so work already
  // enqueued that reads `data` finishes first. A sticky error reappears
  // at the next checked call; anything else is cleared here so that it is
  // not blamed on that call.
  {
    std::lock_guard<std::mutex> lock(sizesMutex);
    auto it = sizes.find(data);
    if (it != sizes.end()) {
      live -= it->second;
      sizes.erase(it);
    }
  }
  if (!activateQuietly())
    return;
  cudaFreeAsync(data, stream);
  (void)cudaGetLastError();
}

void CudaDevice::fillZero(void *data, int64_t bytes) {
  if (bytes <= 0)
    return;
  activate();
  Timed timed(*this, "memset");
  checkCall(cudaMemsetAsync(data, 0, static_cast<size_t>(bytes), stream),
            "cudaMemsetAsync");
}

void CudaDevice::fill(float *data, float value, int64_t n) {
  launch("fill", b::Fill<float>{data, value, n});
}

void CudaDevice::copy(void *dst, const void *src, int64_t bytes) {
  if (bytes <= 0 || dst == src)
    return;
  activate();
  // Pool memory ignores peer access: between two GPUs (ranks r and r + 1
  // on a multi-GPU machine) only a peer copy works.
  Timed timed(*this, "copy");
  int dstDevice = ordinal, srcDevice = ordinal;
  if (multiGpu) {
    dstDevice = deviceOf(dst);
    srcDevice = deviceOf(src);
  }
  if (dstDevice != srcDevice && dstDevice >= 0 && srcDevice >= 0)
    checkCall(cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice,
                                  static_cast<size_t>(bytes), stream),
              "cudaMemcpyPeerAsync");
  else
    checkCall(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                              cudaMemcpyDefault, stream),
              "cudaMemcpyAsync (device to device)");
}

void CudaDevice::upload(void *dst, const void *host, int64_t bytes) {
  if (bytes <= 0)
    return;
  activate();
  Timed timed(*this, "upload");
  checkCall(cudaMemcpyAsync(dst, host, static_cast<size_t>(bytes),
                            cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync (host to device)");
}

void CudaDevice::download(void *host, const void *src, int64_t bytes) {
  if (bytes <= 0)
    return;
  activate();
  checkCall(cudaMemcpyAsync(host, src, static_cast<size_t>(bytes),
                            cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync (device to host)");
  checkCall(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

EventPtr CudaDevice::record() {
  activate();
  // Reuse an event nobody else holds: a wait enqueued on it has already
  // captured the point it was recorded at, so it may be recorded again.
  std::shared_ptr<CudaEvent> event;
  for (const std::shared_ptr<CudaEvent> &e : events)
    if (e.use_count() == 1) {
      event = e;
      break;
    }
  if (!event) {
    event = std::make_shared<CudaEvent>();
    events.push_back(event);
  }
  checkCall(cudaEventRecord(event->event, stream), "cudaEventRecord");
  return event;
}

void CudaDevice::wait(const EventPtr &event) {
  if (!event)
    return;
  auto *cuda = dynamic_cast<CudaEvent *>(event.get());
  if (!cuda)
    throw DeviceError("a CUDA stream cannot wait for an event of another "
                      "kind of device");
  activate();
  checkCall(cudaStreamWaitEvent(stream, cuda->event, 0), "cudaStreamWaitEvent");
}

bool CudaDevice::timeKernels(bool on) {
  activate();
  if (on && !timing) {
    // Timing begins when this returns: the stream idle, the anchor event
    // recorded on it.
    checkCall(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (!anchor)
      checkCall(cudaEventCreate(&anchor), "cudaEventCreate");
    checkCall(cudaEventRecord(anchor, stream), "cudaEventRecord");
  }
  timing = on;
  return true;
}

std::vector<KernelSpan> CudaDevice::takeKernelSpans() {
  std::vector<KernelSpan> spans;
  if (timedCalls.empty())
    return spans;
  activate();
  checkCall(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  spans.reserve(timedCalls.size());
  for (TimedCall &t : timedCalls) {
    float fromAnchor = 0, length = 0;
    checkCall(cudaEventElapsedTime(&fromAnchor, anchor, t.start),
              "cudaEventElapsedTime");
    checkCall(cudaEventElapsedTime(&length, t.start, t.end),
              "cudaEventElapsedTime");
    spans.push_back({std::move(t.name), 1e-3 * fromAnchor, 1e-3 * length});
    spareEvents.push_back(t.start);
    spareEvents.push_back(t.end);
  }
  timedCalls.clear();
  return spans;
}

void CudaDevice::synchronize() {
  activate();
  checkCall(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

} // namespace detail

std::unique_ptr<Device> makeDevice(int ordinal, AttentionChoice attention) {
  return std::make_unique<detail::CudaDevice>(ordinal, attention);
}

} // namespace mimo::device::cuda
