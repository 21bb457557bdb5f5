#include "transport/descriptor.h"

#include <array>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rayaccel::transport {
namespace {

constexpr char kMagic[4] = {'R', 'X', 'T', 'D'};

void Put(std::string* out, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) (*out)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t Get(absl::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(in[at + i])) << (8 * i);
  }
  return v;
}

}  // namespace

namespace {

uint32_t Crc32cTable(uint32_t crc, const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes the same polynomial eight bytes at a time: the check
// runs on every transfer, so it must cost nanoseconds.
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  return Crc32cTable(static_cast<uint32_t>(c), p, n);
}
#endif

}  // namespace

uint32_t Crc32c(absl::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return Crc32cSse42(0xFFFFFFFFu, p, bytes.size()) ^ 0xFFFFFFFFu;
#endif
  return Crc32cTable(0xFFFFFFFFu, p, bytes.size()) ^ 0xFFFFFFFFu;
}

absl::StatusOr<std::string> Encode(const DescriptorInfo& info, absl::string_view payload) {
  if (info.plugin.empty() || info.plugin.size() > kMaxPluginName) {
    return absl::InvalidArgumentError("a descriptor's plugin name takes 1 to 32 bytes");
  }
  if (payload.empty() || payload.size() > Transport::kMaxDescriptorBytes - kHeaderBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the plugin packed ", payload.size(), " bytes; a descriptor holds 1 to ",
                     Transport::kMaxDescriptorBytes - kHeaderBytes));
  }
  std::string out(kHeaderBytes, '\0');
  std::memcpy(&out[0], kMagic, 4);
  Put(&out, 4, kLayoutVersion, 2);
  Put(&out, 6, static_cast<uint8_t>(info.kind), 1);
  Put(&out, 7, info.plugin.size(), 1);
  Put(&out, 8, kHeaderBytes + payload.size(), 4);
  Put(&out, 16, info.endpoint, 8);
  Put(&out, 24, info.region, 8);
  Put(&out, 32, info.length, 8);
  Put(&out, 40, info.device, 4);
  Put(&out, 44, payload.size(), 4);
  std::memcpy(&out[48], info.plugin.data(), info.plugin.size());
  out.append(payload.data(), payload.size());
  Put(&out, 12, Crc32c(absl::string_view(out).substr(16)), 4);
  return out;
}

absl::StatusOr<Envelope> Decode(absl::string_view bytes) {
  if (bytes.size() > Transport::kMaxDescriptorBytes) {
    return absl::InvalidArgumentError(absl::StrCat("descriptor of ", bytes.size(),
                                                   " bytes: larger than any descriptor (",
                                                   Transport::kMaxDescriptorBytes, ")"));
  }
  if (bytes.size() < kHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("descriptor of ", bytes.size(),
                                                   " bytes: truncated (the header alone is ",
                                                   kHeaderBytes, ")"));
  }
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return absl::InvalidArgumentError("not a rayaccel descriptor (bad magic)");
  }
  uint64_t version = Get(bytes, 4, 2);
  if (version != kLayoutVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor layout version ", version, "; this host reads version 1"));
  }
  uint64_t total = Get(bytes, 8, 4);
  if (total != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("descriptor says ", total, " bytes but ",
                                                   bytes.size(), " arrived: truncated or padded"));
  }
  if (Get(bytes, 12, 4) != Crc32c(bytes.substr(16))) {
    return absl::DataLossError("descriptor checksum mismatch: corrupted in transit");
  }
  Envelope e;
  uint64_t kind = Get(bytes, 6, 1), name_size = Get(bytes, 7, 1), payload = Get(bytes, 44, 4);
  if (kind > 1 || name_size == 0 || name_size > kMaxPluginName || payload != total - kHeaderBytes ||
      payload == 0) {
    return absl::InvalidArgumentError("descriptor header is inconsistent");
  }
  e.info.kind = static_cast<MemoryKind>(kind);
  e.info.plugin = std::string(bytes.substr(48, name_size));
  e.info.endpoint = Get(bytes, 16, 8);
  e.info.region = Get(bytes, 24, 8);
  e.info.length = Get(bytes, 32, 8);
  e.info.device = static_cast<uint32_t>(Get(bytes, 40, 4));
  e.payload = bytes.substr(kHeaderBytes);
  if (e.info.length == 0) return absl::InvalidArgumentError("descriptor of an empty region");
  return e;
}

}  // namespace rayaccel::transport
