//===- SafetensorsTest.cpp - The checkpoint file format -------------------===//
//
// checkpoint/Safetensors.h: a header written and read back, the data 8-byte
// aligned, and every way a truncated, corrupt or hostile file is refused
// with its path and the tensor at fault, before any data is read.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace st = mimo::safetensors;

namespace {

std::string pathOf(const std::string &name) {
  return (std::filesystem::temp_directory_path() /
          ("mimo-st-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

/// A file of an 8-byte length, `header` and `dataBytes` zero bytes.
std::string writeRaw(const std::string &name, const std::string &header,
                     int64_t dataBytes) {
  std::string path = pathOf(name);
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << std::string(static_cast<size_t>(dataBytes), '\0');
  return path;
}

std::string errorOf(const std::string &path) {
  std::string error;
  EXPECT_FALSE(st::readHeader(path, error));
  std::filesystem::remove(path);
  return error;
}

TEST(Safetensors, WrittenHeadersReadBackWithAlignedData) {
  st::Header h;
  h.metadata = {{"format", "mimo"}};
  h.tensors = {{"a.weight", "F32", {3, 5}}, {"a.bias", "F32", {5}}};
  std::string bytes = st::encodeHeader(h);
  EXPECT_EQ(h.dataOffset % 8, 0);
  EXPECT_EQ(h.tensors[1].begin, 60);
  EXPECT_EQ(h.dataBytes, 80);
  std::string path = pathOf("good");
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes << std::string(80, '\0');
  }
  std::string error;
  std::optional<st::Header> read = st::readHeader(path, error);
  ASSERT_TRUE(read) << error;
  ASSERT_NE(read->find("a.bias"), nullptr);
  EXPECT_EQ(read->find("a.bias")->shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(read->metadata.at("format"), "mimo");
  EXPECT_EQ(read->dataOffset, h.dataOffset);
  std::filesystem::remove(path);
}

TEST(Safetensors, BadFilesAreRefusedNamingFileAndTensor) {
  const std::string good =
      R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NE(errorOf(writeRaw("short", good, 4))
                .find("tensor 't': data_offsets "
                      "[0, 8) leave the file's "
                      "4 data bytes"),
            std::string::npos);
  EXPECT_NE(errorOf(writeRaw("trailing", good, 12)).find("trailing bytes"),
            std::string::npos);
  {
    std::string path = pathOf("tiny");
    std::ofstream(path) << "abc";
    EXPECT_NE(errorOf(path).find("too short for a safetensors header"),
              std::string::npos);
  }
  {
    std::string path = pathOf("claims");
    std::ofstream out(path, std::ios::binary);
    out << std::string("\xff\xff\xff\x00\x00\x00\x00\x00", 8) << "{}";
    out.close();
    EXPECT_NE(errorOf(path).find("the header claims"), std::string::npos);
  }
  struct BadHeader {
    const char *name;
    std::string header;
    int64_t dataBytes;
    const char *expected;
  };
  const BadHeader cases[] = {
      {"deep", std::string(70, '[') + std::string(70, ']'), 0,
       "nests deeper than 64"},
      {"dtype", R"({"t":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8,
       "tensor 't': unknown dtype \"Q7\""},
      {"size", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "data_offsets hold 8 bytes, its dtype and shape need 12"},
      {"gap",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       12, "tensor 'b' starts at data byte 8, expected 4"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "tensors must tile the data"},
      {"huge",
       R"({"t":{"dtype":"F32","shape":[1099511627777],"data_offsets":[0,4]}})",
       4, "below 2^40"},
      {"array", "[1,2]", 0, "not a JSON object"},
  };
  for (const BadHeader &c : cases)
    EXPECT_NE(errorOf(writeRaw(c.name, c.header, c.dataBytes)).find(c.expected),
              std::string::npos)
        << c.name;
  std::string error;
  EXPECT_FALSE(st::readHeader(pathOf("absent"), error));
  EXPECT_NE(error.find("cannot open the tensor file"), std::string::npos);
}

} // namespace
