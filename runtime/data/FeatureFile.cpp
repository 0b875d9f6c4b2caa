//===- FeatureFile.cpp - Binary feature rows and loss masks ---------------===//

#include "runtime/data/FeatureFile.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace mimo::exec {

namespace {

constexpr char kFeatureMagic[8] = {'M', 'I', 'M', 'O', 'F', 'E', 'A', 'T'};
constexpr char kMaskMagic[8] = {'M', 'I', 'M', 'O', 'M', 'A', 'S', 'K'};
constexpr int64_t kFeatureHeader = 40; // magic, version, dtype, 0, dim, seqs
constexpr int64_t kMaskHeader = 24;    // magic, version, tokens
constexpr char kItemMagic[8] = {'M', 'I', 'M', 'O', 'I', 'T', 'E', 'M'};
constexpr int64_t kItemHeader = 24; // magic, version, rows

uint64_t u64At(const unsigned char *p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint32_t u32At(const unsigned char *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void put(std::ofstream &out, const void *p, size_t n) {
  out.write(static_cast<const char *>(p), static_cast<std::streamsize>(n));
}

} // namespace

std::unique_ptr<FeatureFile> FeatureFile::open(const std::string &path,
                                               int64_t featureDim,
                                               int64_t sequences,
                                               std::string &error) {
  auto f = std::unique_ptr<FeatureFile>(new FeatureFile());
  f->file = path;
  if (!f->map.open(path, "the feature rows", error))
    return nullptr;
  auto fail = [&](const std::string &what) {
    error = path + ": error: " + what +
            " (docs/data.md, binary features: write it with "
            "tools/mimo-prep)";
    return nullptr;
  };
  const unsigned char *p = f->map.bytes();
  const int64_t size = f->map.size;
  if (size < kFeatureHeader || std::memcmp(p, kFeatureMagic, 8) != 0)
    return fail("expected the header MIMOFEAT, found other bytes");
  if (u64At(p + 8) != 1)
    return fail("expected version 1, found " + std::to_string(u64At(p + 8)));
  f->dtype = u32At(p + 16);
  if (f->dtype != 1 && f->dtype != 2)
    return fail("expected dtype 1 (fp32) or 2 (bf16), found " +
                std::to_string(f->dtype));
  f->valueBytes = f->dtype == 1 ? 4 : 2;
  const uint64_t dim = u64At(p + 24), seqs = u64At(p + 32);
  if (dim != static_cast<uint64_t>(featureDim))
    return fail("its rows have " + std::to_string(dim) +
                " values, but the encoder's feature_dim is " +
                std::to_string(featureDim));
  if (seqs != static_cast<uint64_t>(sequences))
    return fail("it holds rows for " + std::to_string(seqs) +
                " sequences, but the index has " + std::to_string(sequences) +
                "; the files do not belong together");
  f->dim = featureDim;
  f->count = sequences;
  // The offsets must fit, start at 0, never fall, and announce exactly the
  // rows the file holds.
  if (static_cast<uint64_t>(size - kFeatureHeader) / 8 < seqs + 1)
    return fail("it ends inside its offsets");
  f->dataOffset = kFeatureHeader + (sequences + 1) * 8;
  if (f->offset(0) != 0)
    return fail("offsets[0] is " + std::to_string(f->offset(0)) +
                ", expected 0");
  for (int64_t s = 0; s < sequences; ++s)
    if (f->offset(s + 1) < f->offset(s))
      return fail("offsets[" + std::to_string(s + 1) + "] is below offsets[" +
                  std::to_string(s) + "]");
  const uint64_t rows = f->offset(sequences);
  const uint64_t room = static_cast<uint64_t>(size - f->dataOffset) /
                        (static_cast<uint64_t>(featureDim) *
                         static_cast<uint64_t>(f->valueBytes));
  if (rows > room || static_cast<uint64_t>(size - f->dataOffset) !=
                         rows * static_cast<uint64_t>(featureDim) *
                             static_cast<uint64_t>(f->valueBytes))
    return fail("it announces " + std::to_string(rows) + " rows of " +
                std::to_string(featureDim) + " values, but holds " +
                std::to_string(size - f->dataOffset) + " bytes of rows");
  return f;
}

uint64_t FeatureFile::offset(int64_t i) const {
  return u64At(map.bytes() + kFeatureHeader + i * 8);
}

int64_t FeatureFile::rowsOf(int64_t s) const {
  return static_cast<int64_t>(offset(s + 1) - offset(s));
}

void FeatureFile::read(int64_t s, std::vector<float> &out) const {
  const int64_t first = static_cast<int64_t>(offset(s));
  const int64_t n = rowsOf(s) * dim;
  const unsigned char *p = map.bytes() + dataOffset + first * dim * valueBytes;
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    float v;
    if (dtype == 1) {
      std::memcpy(&v, p + k * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + k * 2, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(&v, &bits, 4);
    }
    if (!std::isfinite(v))
      throw std::runtime_error(
          file + ": error: value " + std::to_string(k % dim) + " of row " +
          std::to_string(first + k / dim) + " (sequence " + std::to_string(s) +
          ") is not finite; the features are damaged");
    out[at + static_cast<size_t>(k)] = v;
  }
}

std::unique_ptr<MaskFile> MaskFile::open(const std::string &path,
                                         int64_t tokens, std::string &error) {
  auto f = std::unique_ptr<MaskFile>(new MaskFile());
  f->file = path;
  if (!f->map.open(path, "the loss mask", error))
    return nullptr;
  const unsigned char *p = f->map.bytes();
  auto fail = [&](const std::string &what) {
    error = path + ": error: " + what +
            " (docs/data.md, binary features and masks)";
    return nullptr;
  };
  if (f->map.size < kMaskHeader || std::memcmp(p, kMaskMagic, 8) != 0)
    return fail("expected the header MIMOMASK, found other bytes");
  if (u64At(p + 8) != 1)
    return fail("expected version 1, found " + std::to_string(u64At(p + 8)));
  if (u64At(p + 16) != static_cast<uint64_t>(tokens) ||
      f->map.size - kMaskHeader != tokens)
    return fail("it masks " + std::to_string(u64At(p + 16)) + " tokens in " +
                std::to_string(f->map.size - kMaskHeader) +
                " bytes, but the token data has " + std::to_string(tokens));
  return f;
}

bool MaskFile::target(int64_t t) const {
  const unsigned char b = map.bytes()[kMaskHeader + t];
  if (b > 1)
    throw std::runtime_error(file + ": error: token " + std::to_string(t) +
                             " has mask byte " + std::to_string(b) +
                             ", expected 0 or 1");
  return b == 1;
}

bool writeFeatureFile(const std::string &path, bool bf16, int64_t featureDim,
                      const std::vector<std::vector<float>> &rows,
                      std::string &error) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t version = 1, dim = static_cast<uint64_t>(featureDim),
                 seqs = rows.size();
  const uint32_t dtype = bf16 ? 2 : 1, zero = 0;
  put(out, kFeatureMagic, 8);
  put(out, &version, 8);
  put(out, &dtype, 4);
  put(out, &zero, 4);
  put(out, &dim, 8);
  put(out, &seqs, 8);
  uint64_t offset = 0;
  put(out, &offset, 8);
  for (const std::vector<float> &r : rows) {
    if (featureDim <= 0 || r.size() % static_cast<size_t>(featureDim) != 0) {
      error = path + ": error: a sequence's values are not whole rows";
      return false;
    }
    offset += r.size() / static_cast<size_t>(featureDim);
    put(out, &offset, 8);
  }
  for (const std::vector<float> &r : rows)
    for (float v : r) {
      if (bf16) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        bits += 0x7fffu + ((bits >> 16) & 1u); // to nearest even
        const uint16_t h = static_cast<uint16_t>(bits >> 16);
        put(out, &h, 2);
      } else {
        put(out, &v, 4);
      }
    }
  out.close();
  if (!out) {
    error = path + ": error: cannot write it";
    return false;
  }
  return true;
}

std::unique_ptr<ItemFile> ItemFile::open(const std::string &path, int64_t rows,
                                         std::string &error) {
  auto f = std::unique_ptr<ItemFile>(new ItemFile());
  f->file = path;
  if (!f->map.open(path, "the item boundaries", error))
    return nullptr;
  const unsigned char *p = f->map.bytes();
  auto fail = [&](const std::string &what) {
    error = path + ": error: " + what +
            " (docs/data.md, binary features: write it with "
            "tools/mimo-prep)";
    return nullptr;
  };
  if (f->map.size < kItemHeader || std::memcmp(p, kItemMagic, 8) != 0)
    return fail("expected the header MIMOITEM, found other bytes");
  if (u64At(p + 8) != 1)
    return fail("expected version 1, found " + std::to_string(u64At(p + 8)));
  if (u64At(p + 16) != static_cast<uint64_t>(rows) ||
      f->map.size - kItemHeader != rows)
    return fail("it marks " + std::to_string(u64At(p + 16)) + " rows in " +
                std::to_string(f->map.size - kItemHeader) +
                " bytes, but the feature file has " + std::to_string(rows));
  return f;
}

void ItemFile::items(int64_t begin, int64_t end,
                     std::vector<int64_t> &out) const {
  const unsigned char *p = map.bytes() + kItemHeader;
  for (int64_t r = begin; r < end; ++r) {
    const unsigned char b = p[r];
    if (b > 1 || (r == begin && b != 1))
      throw std::runtime_error(
          file + ": error: row " + std::to_string(r) + " has byte " +
          std::to_string(b) +
          (b > 1 ? ", expected 0 or 1"
                 : ", but it is a sequence's first row, which begins an "
                   "item: expected 1"));
    if (b == 1)
      out.push_back(0);
    ++out.back();
  }
}

namespace {

/// A byte file (docs/data.md): `magic`, u64 version 1, u64 count, then one
/// byte per counted thing.
bool writeByteFile(const std::string &path, const char (&magic)[8],
                   const std::vector<uint8_t> &bytes, std::string &error) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t version = 1, count = bytes.size();
  put(out, magic, 8);
  put(out, &version, 8);
  put(out, &count, 8);
  put(out, bytes.data(), bytes.size());
  out.close();
  if (!out) {
    error = path + ": error: cannot write it";
    return false;
  }
  return true;
}

} // namespace

bool writeItemFile(const std::string &path, const std::vector<uint8_t> &starts,
                   std::string &error) {
  return writeByteFile(path, kItemMagic, starts, error);
}

bool writeMaskFile(const std::string &path, const std::vector<uint8_t> &mask,
                   std::string &error) {
  return writeByteFile(path, kMaskMagic, mask, error);
}

} // namespace mimo::exec
