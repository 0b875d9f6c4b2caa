//===- VersionsTest.cpp - The CUDA and NCCL versions mimo needs -----------===//
//
// docs/gpu.md start-up checks: the numbers the libraries report, written
// out, and a driver older than the runtime or an NCCL before 2.18 refused
// with what to install.
//
//===----------------------------------------------------------------------===//

#include "runtime/support/Versions.h"

#include <gtest/gtest.h>

using namespace mimo;

TEST(Versions, CudaDriverOlderThanTheRuntimeIsRefused) {
  EXPECT_EQ(cudaVersionText(13000), "13.0");
  EXPECT_EQ(cudaVersionText(12020), "12.2");
  EXPECT_EQ(cudaDriverProblem(13010, 13000), "");
  EXPECT_EQ(cudaDriverProblem(13000, 13000), "");
  const std::string old = cudaDriverProblem(12020, 13000);
  EXPECT_NE(old.find("the CUDA driver supports CUDA 12.2, older than this "
                     "build's CUDA runtime 13.0: install an NVIDIA driver for "
                     "CUDA 13.0 or later"),
            std::string::npos)
      << old;
  EXPECT_NE(cudaDriverProblem(0, 13000).find("supports CUDA none"),
            std::string::npos);
}

TEST(Versions, NcclBefore218IsRefused) {
  EXPECT_EQ(ncclVersionText(21805), "2.18.5");
  EXPECT_EQ(ncclVersionText(22703), "2.27.3");
  EXPECT_EQ(ncclVersionText(2804), "2.8.4"); // the encoding before 2.9
  EXPECT_EQ(ncclVersionProblem(21800), "");
  EXPECT_EQ(ncclVersionProblem(22703), "");
  EXPECT_NE(ncclVersionProblem(21703).find(
                "NCCL 2.17.3 is older than the 2.18 mimo needs"),
            std::string::npos);
  EXPECT_NE(ncclVersionProblem(2804).find("NCCL 2.8.4"), std::string::npos);
}
