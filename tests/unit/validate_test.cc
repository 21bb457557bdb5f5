#include "model/validate.h"

#include "gtest/gtest.h"

namespace rayaccel {
namespace {

TEST(Utf8, AcceptsValidRejectsMalformed) {
  EXPECT_TRUE(IsValidUtf8("NVIDIA H100"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc3\x28"));          // bad continuation
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("abc\xe2\x82"));       // truncated at the end
}

TEST(CheckText, BoundsAndControlCharacters) {
  EXPECT_TRUE(CheckText("ok", "name").ok());
  EXPECT_FALSE(CheckText(std::string(kMaxStringBytes + 1, 'a'), "name").ok());
  absl::Status st = CheckText("line\nbreak", "device 3: name");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("device 3: name"), absl::string_view::npos);
}

TEST(LabelSyntax, FollowsKubernetes) {
  EXPECT_TRUE(CheckLabelKey("ray.io/accelerator-type").ok());
  EXPECT_TRUE(CheckLabelKey("example.com/rack").ok());
  EXPECT_TRUE(CheckLabelKey("rack").ok());
  EXPECT_TRUE(CheckLabelKey("a_b.c-D9").ok());
  EXPECT_FALSE(CheckLabelKey("").ok());
  EXPECT_FALSE(CheckLabelKey("-rack").ok());
  EXPECT_FALSE(CheckLabelKey("rack-").ok());
  EXPECT_FALSE(CheckLabelKey("has space").ok());
  EXPECT_FALSE(CheckLabelKey(std::string(64, 'a')).ok());
  EXPECT_TRUE(CheckLabelKey(std::string(63, 'a')).ok());
  EXPECT_FALSE(CheckLabelKey("Example.com/rack").ok());  // prefix must be lower-case DNS
  EXPECT_FALSE(CheckLabelKey("/rack").ok());
  EXPECT_FALSE(CheckLabelKey("a/b/c").ok());
  EXPECT_TRUE(CheckLabelValue("").ok());
  EXPECT_TRUE(CheckLabelValue("H100").ok());
  EXPECT_FALSE(CheckLabelValue("a,b").ok());
  EXPECT_FALSE(CheckLabelValue(std::string(64, 'x')).ok());
}

// A worker's environment: the family of the plugin's variable, and the one variable Ray's
// Intel manager writes beside its own; nothing else.
TEST(VisibleDevicesFamily, TheFirstWordAndRaysCompanionOnly) {
  EXPECT_TRUE(InVisibleDevicesFamily("CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"));
  EXPECT_TRUE(InVisibleDevicesFamily("TPU_HOST_BOUNDS", "TPU_VISIBLE_CHIPS"));
  EXPECT_TRUE(InVisibleDevicesFamily("ONEAPI_DEVICE_SELECTOR", "ZE_AFFINITY_MASK"));
  EXPECT_FALSE(InVisibleDevicesFamily("ONEAPI_DEVICE_SELECTORS", "ZE_AFFINITY_MASK"));
  EXPECT_FALSE(InVisibleDevicesFamily("ONEAPI_DEVICE_SELECTOR", "CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(InVisibleDevicesFamily("LD_PRELOAD", "ZE_AFFINITY_MASK"));
  EXPECT_FALSE(InVisibleDevicesFamily("PATH", "CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(InVisibleDevicesFamily("X", ""));
}

TEST(PciBusId, NormalisesEveryCommonForm) {
  EXPECT_EQ(NormalizePciBusId("0000:18:00.0"), "0000:18:00.0");
  EXPECT_EQ(NormalizePciBusId("00000000:18:00.0"), "0000:18:00.0");  // NVML
  EXPECT_EQ(NormalizePciBusId("0000:DB:00.0"), "0000:db:00.0");
  EXPECT_EQ(NormalizePciBusId("18:00.0"), "0000:18:00.0");
  EXPECT_EQ(NormalizePciBusId("0001:c1:1f.7"), "0001:c1:1f.7");
  EXPECT_FALSE(NormalizePciBusId("0000:18:20.0"));  // device is 5 bits
  EXPECT_FALSE(NormalizePciBusId("0000:18:00.8"));  // function is 3 bits
  EXPECT_FALSE(NormalizePciBusId("0000:118:00.0"));
  EXPECT_FALSE(NormalizePciBusId("GPU-0"));
  EXPECT_FALSE(NormalizePciBusId(""));
  EXPECT_FALSE(NormalizePciBusId("0000:18:00"));
}

}  // namespace
}  // namespace rayaccel
