#include "sim/sim_spec.h"

#include "gtest/gtest.h"

namespace rayaccel::sim {
namespace {

std::string ErrorOf(const std::string& text) {
  SimSpec spec;
  std::string error;
  EXPECT_FALSE(ParseSpec(text, "spec.json", &spec, &error)) << text;
  return error;
}

TEST(SimSpec, ShippedExamplesParse) {
  for (const char* name : {"dgx-h100.json", "dgx1-v100.json", "tpu-v4-host.json", "nvl72.json"}) {
    SimSpec spec;
    std::string error;
    EXPECT_TRUE(LoadSpec(std::string(RAYACCEL_EXAMPLES_DIR) + "/" + name, &spec, &error)) << error;
  }
  SimSpec spec;
  std::string error;
  ASSERT_TRUE(LoadSpec(std::string(RAYACCEL_EXAMPLES_DIR) + "/dgx1-v100.json", &spec, &error));
  EXPECT_EQ(spec.devices.size(), 8u);
  EXPECT_EQ(spec.vendor, "nvidia");
  EXPECT_EQ(spec.devices[0].pci_vendor_id, 0x10deu);
}

TEST(SimSpec, FullDevice) {
  const char* text = R"({
    "resource_name": "GPU", "visible_devices_env": "CUDA_VISIBLE_DEVICES",
    "devices": [
      {"uuid": "GPU-a", "name": "NVIDIA H100 80GB HBM3", "vendor": "nvidia",
       "accelerator_type": "H100", "architecture": "hopper", "memory_bytes": 85520809984,
       "pci_bus_id": "0000:18:00.0", "pci_device_id": "0x2330", "numa_node": 0,
       "health": "unhealthy", "health_reason": "XID 79"},
      {"uuid": "GPU-b", "name": "NVIDIA H100 80GB HBM3"}
    ],
    "links": [{"a": 0, "b": 1, "type": "nvlink", "count": 18},
              {"a": 1, "b": 0, "type": "pcie", "path": "PIX"}],
    "domains": [{"kind": "nvlink", "id": "cluster-1.clique-7", "devices": [0, 1]}],
    "labels": {"example.com/rack": "r12"}
  })";
  SimSpec spec;
  std::string error;
  ASSERT_TRUE(ParseSpec(text, "spec.json", &spec, &error)) << error;
  EXPECT_EQ(spec.devices[0].memory_bytes, 85520809984u);
  EXPECT_EQ(spec.devices[0].pci_device_id, 0x2330u);
  EXPECT_EQ(spec.devices[0].health, RAYACCEL_HEALTH_UNHEALTHY);
  EXPECT_EQ(spec.devices[1].numa_node, -1);  // omitted: unknown
  EXPECT_EQ(spec.devices[1].health, RAYACCEL_HEALTH_HEALTHY);
  EXPECT_EQ(spec.links[0].count, 18u);
  EXPECT_EQ(spec.links[1].path, RAYACCEL_PCIE_PATH_PIX);
  EXPECT_EQ(spec.domains[0].devices, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(spec.labels.at("example.com/rack"), "r12");
}

TEST(SimSpec, ErrorsNameLineColumnAndField) {
  EXPECT_EQ(
      ErrorOf("{\"devices\": [\n  {\"uuid\": \"a\", \"name\": \"x\", \"memory_bytes\": -1}]}"),
      "spec.json:2:46: devices[0].memory_bytes: expected a whole number from 0 to "
      "18446744073709551615");
  EXPECT_EQ(ErrorOf("{\"devices\": [{\"name\": \"x\"}]}"),
            "spec.json:1:14: devices[0].uuid: missing required field");
  EXPECT_EQ(ErrorOf("{\"devices\": [{\"uuid\": \"a\", \"name\": \"x\", \"numa\": 0}]}"),
            "spec.json:1:49: devices[0].numa: unknown field");
  EXPECT_EQ(ErrorOf("{\"devices\": [{\"uuid\": \"a\", \"name\": \"x\"}],\n"
                    " \"links\": [{\"a\": 0, \"b\": 3}]}"),
            "spec.json:2:26: links[0].b: device 3 does not exist (the spec has 1 devices)");
  EXPECT_NE(ErrorOf("{\"devices\": [{\"uuid\": \"a\", \"name\": \"x\"}, {\"uuid\": \"a\", "
                    "\"name\": \"y\"}]}")
                .find("devices[1].uuid: duplicate uuid"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{\"devices\": [{\"uuid\": \"a\", \"name\": \"x\", \"health\": \"sick\"}]}")
                .find("devices[0].health"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{\"devices\": [{\"uuid\": \"a\", \"name\": \"x\"}, {\"uuid\": \"b\", "
                    "\"name\": \"y\"}], \"links\": [{\"a\": 0, \"b\": 1, \"path\": \"NV4\"}]}")
                .find("links[0].path: expected PIX"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{\"devices\": [{\"uuid\": \"a\", \"name\": \"x\", \"vendor\": \"amd\"}, "
                    "{\"uuid\": \"b\", \"name\": \"y\", \"vendor\": \"nvidia\"}]}")
                .find("share a vendor"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{\"devices\": [{\"uuid\": \"m\", \"name\": \"x\", \"parent\": \"GPU-z\"}]}")
                .find("devices[0].parent"),
            std::string::npos);
  EXPECT_EQ(ErrorOf("[]"), "spec.json:1:1: (top level): expected object, found array");
  EXPECT_EQ(ErrorOf("{\"devices\": [1,]}"), "spec.json:1:16: unexpected character");
  EXPECT_NE(ErrorOf("{}").find("devices: missing required field"), std::string::npos);
}

// PCI ids as strings are hex, with or without "0x", and nothing else: no spaces, no sign, no
// text after a NUL.
TEST(SimSpec, PciIdsAreParsedStrictly) {
  auto spec = [](const std::string& id) {
    return "{\"devices\": [{\"uuid\": \"a\", \"name\": \"x\", \"pci_vendor_id\": \"" + id + "\"}]}";
  };
  for (const std::string& good : {std::string("0x10de"), std::string("10de")}) {
    SimSpec parsed;
    std::string error;
    ASSERT_TRUE(ParseSpec(spec(good), "spec.json", &parsed, &error)) << error;
    EXPECT_EQ(parsed.devices[0].pci_vendor_id, 0x10deu);
  }
  for (const std::string& bad :
       {std::string(" 0x10de"), std::string("+10de"), std::string("0x10de "), std::string("0x"),
        std::string(""), std::string("0x10de\\u0000zz"), std::string("0x110de")}) {
    EXPECT_NE(ErrorOf(spec(bad)).find("expected a 16-bit PCI id"), std::string::npos) << bad;
  }
}

TEST(SimSpec, MissingFileIsAnError) {
  SimSpec spec;
  std::string error;
  EXPECT_FALSE(LoadSpec("/nonexistent/spec.json", &spec, &error));
  EXPECT_NE(error.find("/nonexistent/spec.json"), std::string::npos);
}

}  // namespace
}  // namespace rayaccel::sim
