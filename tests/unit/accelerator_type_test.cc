#include "ray/accelerator_type.h"

#include "gtest/gtest.h"

namespace rayaccel {
namespace {

TEST(NvidiaAcceleratorType, MatchesRayOnRealDeviceNames) {
  // (NVML device name, what Ray's nvidia_gpu.py derives)
  const std::pair<const char*, const char*> cases[] = {
      {"NVIDIA H100 80GB HBM3", "H100"},
      {"NVIDIA H100 PCIe", "H100"},
      {"NVIDIA H200", "H200"},
      {"NVIDIA GB200", "GB200"},
      {"NVIDIA B200", "B200"},
      {"NVIDIA A100-SXM4-80GB", "A100"},
      {"NVIDIA A100-PCIE-40GB", "A100"},
      {"NVIDIA A10G", "A10G"},
      {"NVIDIA L4", "L4"},
      {"NVIDIA L40S", "L40S"},
      {"Tesla V100-SXM2-16GB", "V100"},
      {"Tesla T4", "T4"},
      {"Tesla K80", "K80"},
      {"Tesla P100-PCIE-16GB", "P100"},
      {"NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000"},
      {"NVIDIA RTX A6000", "RTX-A6000"},
      {"Quadro RTX 8000", "RTX-8000"},
      {"NVIDIA GeForce RTX 4090", "GeForce-RTX-4090"},
      {"NVIDIA GeForce RTX 3080 Ti", "GeForce-RTX-3080-Ti"},
      {"NVIDIA GeForce GTX 1080", "GeForce-GTX-1080"},
      {"NVIDIA TITAN V", "TITAN-V"},
  };
  for (const auto& [name, type] : cases) {
    EXPECT_EQ(NvidiaAcceleratorType(name), type) << name;
  }
  EXPECT_EQ(NvidiaAcceleratorType(""), "");
}

TEST(AmdAcceleratorType, RaysPciDeviceTable) {
  EXPECT_EQ(AmdAcceleratorType(0x740f), "AMD-Instinct-MI210");
  EXPECT_EQ(AmdAcceleratorType(0x74a1), "AMD-Instinct-MI300X-OAM");
  EXPECT_EQ(AmdAcceleratorType(0x74a2), "AMD-Instinct-MI308X-OAM");
  EXPECT_EQ(AmdAcceleratorType(0x738c), "AMD-Instinct-MI100");
  EXPECT_EQ(AmdAcceleratorType(0x75a3), "AMD-Instinct-MI355X-OAM");
  EXPECT_EQ(AmdAcceleratorType(0x1234), "");
}

TEST(DeriveAcceleratorType, PicksTheRuleByVendor) {
  EXPECT_EQ(DeriveAcceleratorType("", "NVIDIA H100 80GB HBM3", kPciVendorNvidia, 0x2330), "H100");
  EXPECT_EQ(DeriveAcceleratorType("nvidia", "NVIDIA L4", 0, 0), "L4");
  EXPECT_EQ(DeriveAcceleratorType("AMD", "Instinct", 0, 0x74a1), "AMD-Instinct-MI300X-OAM");
  EXPECT_EQ(DeriveAcceleratorType("", "TPU v4", kPciVendorGoogle, 0x005e), "TPU-V4");
  EXPECT_EQ(DeriveAcceleratorType("google", "TPU v6e", 0, 0x006f), "TPU-V6E");
  EXPECT_EQ(DeriveAcceleratorType("google", "TPU v3", 0, 0x0027), "");  // v2 or v3: ambiguous
  EXPECT_EQ(DeriveAcceleratorType("", "HL-225", kPciVendorHabana, 0x1020), "Intel-GAUDI2");
  EXPECT_EQ(DeriveAcceleratorType("intel", "HL-325L", 0, 0x1060), "Intel-GAUDI3");
  EXPECT_EQ(DeriveAcceleratorType("acme", "Acme X1", 0x1234, 0x1), "");
}

}  // namespace
}  // namespace rayaccel
