//===- Cudnn.cpp - cuDNN, loaded when attention first asks for it ---------===//

#include "runtime/device/cuda/Cudnn.h"

#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/support/SharedLibrary.h"

#include <dlfcn.h>
#include <glob.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace mimo::device::cuda {

namespace {

constexpr const char *kLibrary = "libcudnn.so.9";

/// The sub-libraries libcudnn.so.9 opens by name: opened first from the
/// folder it was found in when that folder is not on the loader's path
/// (a Python wheel's), so that its own dlopen finds them loaded.
constexpr const char *kParts[] = {"libcudnn_graph.so.9",
                                  "libcudnn_engines_precompiled.so.9",
                                  "libcudnn_engines_runtime_compiled.so.9",
                                  "libcudnn_heuristic.so.9",
                                  "libcudnn_ops.so.9",
                                  "libcudnn_cnn.so.9",
                                  "libcudnn_adv.so.9"};

std::string envOr(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "";
}

/// The prefixes of the python3 executables on PATH (/opt/conda for
/// /opt/conda/bin/python3).
std::vector<std::string> pythonPrefixes() {
  std::vector<std::string> out;
  std::stringstream path(envOr("PATH"));
  std::string dir;
  while (std::getline(path, dir, ':')) {
    if (dir.empty() || access((dir + "/python3").c_str(), X_OK) != 0)
      continue;
    const size_t slash = dir.find_last_of('/');
    if (slash == std::string::npos || slash == 0)
      continue;
    out.push_back(dir.substr(0, slash));
  }
  return out;
}

/// Files matching `pattern` (the pattern itself when it has no '*').
std::vector<std::string> expand(const std::string &pattern) {
  if (pattern.find('*') == std::string::npos)
    return {pattern};
  std::vector<std::string> out;
  glob_t found{};
  if (glob(pattern.c_str(), 0, nullptr, &found) == 0)
    for (size_t i = 0; i < found.gl_pathc; ++i)
      out.emplace_back(found.gl_pathv[i]);
  globfree(&found);
  return out;
}

CudnnLibrary load() {
  CudnnLibrary out;
  CudnnSearch search;
  search.explicitLibrary = envOr("MIMO_CUDNN_LIBRARY");
  search.cudaHome = envOr("CUDA_HOME");
  search.cudaPath = envOr("CUDA_PATH");
  search.virtualEnv = envOr("VIRTUAL_ENV");
  search.condaPrefix = envOr("CONDA_PREFIX");
  search.home = envOr("HOME");
  search.pythonPrefixes = pythonPrefixes();
  void *library = nullptr;
  std::string tried;
  for (const std::string &pattern : cudnnCandidates(search)) {
    for (const std::string &candidate : expand(pattern)) {
      const bool file = candidate.find('/') != std::string::npos;
      if (file && access(candidate.c_str(), R_OK) != 0)
        continue;
      if (file) {
        const std::string folder =
            candidate.substr(0, candidate.find_last_of('/') + 1);
        for (const char *part : kParts)
          if (access((folder + part).c_str(), R_OK) == 0)
            dlopen((folder + part).c_str(), RTLD_LAZY | RTLD_GLOBAL);
      }
      library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library) {
        out.path = candidate;
        break;
      }
      const char *why = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") +
               (why ? why : candidate.c_str());
    }
    if (library)
      break;
    // MIMO_CUDNN_LIBRARY names the one file to use: nothing else.
    if (!search.explicitLibrary.empty())
      break;
  }
  if (!library) {
    out.problem =
        "cannot load cuDNN 9 (" +
        (tried.empty() ? std::string("no libcudnn.so.9 found") : tried) +
        "): install it (NVIDIA's cudnn9-cuda-13 package, or pip's "
        "nvidia-cudnn-cu13 as PyTorch brings it), add its lib folder to "
        "LD_LIBRARY_PATH or set MIMO_CUDNN_LIBRARY to the file";
    return out;
  }
  Dl_info info{};
  if (out.path.find('/') == std::string::npos &&
      dladdr(dlsym(library, "cudnnGetVersion"), &info) && info.dli_fname)
    out.path = info.dli_fname;
  auto bind = [&](auto &slot, const char *symbol) {
    bindSymbol(library, slot, symbol, "cuDNN (" + out.path + ")", out.problem,
               ": it is not cuDNN 9");
  };
  CudnnApi &a = out.api;
  bind(a.getVersion, "cudnnGetVersion");
  bind(a.errorString, "cudnnGetErrorString");
  bind(a.lastErrorString, "cudnnGetLastErrorString");
  bind(a.create, "cudnnCreate");
  bind(a.destroy, "cudnnDestroy");
  bind(a.setStream, "cudnnSetStream");
  bind(a.createDescriptor, "cudnnBackendCreateDescriptor");
  bind(a.destroyDescriptor, "cudnnBackendDestroyDescriptor");
  bind(a.setAttribute, "cudnnBackendSetAttribute");
  bind(a.getAttribute, "cudnnBackendGetAttribute");
  bind(a.finalize, "cudnnBackendFinalize");
  bind(a.execute, "cudnnBackendExecute");
  if (!out.problem.empty())
    return out;
  out.version = a.getVersion();
  if (out.version < kCudnnMinimumVersion)
    out.problem = "cuDNN " + cudnnVersionText(out.version) + " (" + out.path +
                  ") is older than the 9.0 mimo's attention needs: install "
                  "cuDNN 9";
  return out;
}

} // namespace

std::vector<std::string> cudnnCandidates(const CudnnSearch &s) {
  if (!s.explicitLibrary.empty())
    return {s.explicitLibrary};
  std::vector<std::string> out = {kLibrary};
  for (const std::string &toolkit : {s.cudaHome, s.cudaPath})
    if (!toolkit.empty()) {
      out.push_back(toolkit + "/lib64/" + kLibrary);
      out.push_back(toolkit + "/lib/" + kLibrary);
    }
  out.push_back(std::string("/usr/local/cuda/lib64/") + kLibrary);
  out.push_back(std::string("/usr/local/cuda/lib/") + kLibrary);
  // A Python environment's nvidia-cudnn wheel.
  const std::string wheel = "/nvidia/cudnn/lib/" + std::string(kLibrary);
  std::vector<std::string> prefixes;
  for (const std::string &p : {s.virtualEnv, s.condaPrefix})
    if (!p.empty())
      prefixes.push_back(p);
  prefixes.insert(prefixes.end(), s.pythonPrefixes.begin(),
                  s.pythonPrefixes.end());
  prefixes.push_back("/usr/local");
  prefixes.push_back("/usr");
  for (const std::string &prefix : prefixes)
    for (const char *packages : {"site-packages", "dist-packages"})
      out.push_back(prefix + "/lib/python3*/" + packages + wheel);
  if (!s.home.empty())
    out.push_back(s.home + "/.local/lib/python3*/site-packages" + wheel);
  out.push_back("/usr/lib/python3/dist-packages" + wheel);
  return out;
}

std::string cudnnVersionText(size_t version) {
  return std::to_string(version / 10000) + "." +
         std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

CudnnStatus probeCudnn() {
  const CudnnLibrary &library = cudnnLibrary();
  CudnnStatus s;
  s.library = library.path;
  s.version = library.version ? cudnnVersionText(library.version) : "";
  s.problem = library.problem;
  return s;
}

const CudnnLibrary &cudnnLibrary() {
  static const CudnnLibrary loaded = load();
  return loaded;
}

} // namespace mimo::device::cuda
