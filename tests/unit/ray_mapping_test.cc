#include "ray/ray_mapping.h"

#include "gtest/gtest.h"

namespace rayaccel {
namespace {

PluginStatus Plugin(const std::string& name, const std::string& resource,
                    const std::string& vendor) {
  PluginStatus p;
  p.name = name;
  p.resource_name = resource;
  p.vendor = vendor;
  p.state = PluginStatus::State::kActive;
  return p;
}

Device Gpu(const std::string& plugin, const std::string& id, const std::string& type,
           Health health = Health::kHealthy) {
  Device d;
  d.plugin = plugin;
  d.id = id;
  d.accelerator_type = type;
  d.health = health;
  return d;
}

TEST(MapToRay, CountsAFamilyAndNamesItsType) {
  NodeSnapshot s;
  s.plugins = {Plugin("cuda", "GPU", "nvidia")};
  for (int i = 0; i < 8; ++i) s.devices.push_back(Gpu("cuda", "GPU-" + std::to_string(i), "H100"));
  RayMapping m = MapToRay(s);
  EXPECT_EQ(m.view.resources,
            (std::map<std::string, double>{{"GPU", 8}, {"accelerator_type:H100", 1}}));
  EXPECT_EQ(m.view.labels.at("ray.io/accelerator-type"), "H100");
  EXPECT_EQ(m.view.labels.at("rayaccel.io/gpu-count"), "8");
  EXPECT_EQ(m.view.labels.at("rayaccel.io/gpu-vendor"), "nvidia");
  EXPECT_TRUE(m.notes.empty());
}

TEST(MapToRay, UnhealthyDevicesAndPartitionParentsAreNotCounted) {
  NodeSnapshot s;
  s.plugins = {Plugin("cuda", "GPU", "nvidia")};
  s.devices.push_back(Gpu("cuda", "GPU-0", "A100"));
  s.devices.push_back(Gpu("cuda", "GPU-1", "A100", Health::kUnhealthy));
  s.devices.push_back(Gpu("cuda", "GPU-2", "A100", Health::kUnknown));
  // GPU-3 is split into two MIG instances: the instances are schedulable, not the parent.
  s.devices.push_back(Gpu("cuda", "GPU-3", "A100"));
  for (const char* id : {"MIG-a", "MIG-b"}) {
    Device mig = Gpu("cuda", id, "A100");
    mig.parent_id = "GPU-3";
    mig.partition_profile = "3g.20gb";
    s.devices.push_back(mig);
  }
  EXPECT_EQ(MapToRay(s).view.resources.at("GPU"), 4);  // GPU-0, GPU-2, MIG-a, MIG-b
}

TEST(MapToRay, SeveralFamiliesSideBySide) {
  NodeSnapshot s;
  s.plugins = {Plugin("cuda", "GPU", "nvidia"), Plugin("gaudi", "HPU", "intel")};
  s.devices = {Gpu("cuda", "GPU-0", "L4"), Gpu("gaudi", "hpu-0", "Intel-GAUDI2"),
               Gpu("gaudi", "hpu-1", "Intel-GAUDI2")};
  RayMapping m = MapToRay(s);
  EXPECT_EQ(m.view.resources,
            (std::map<std::string, double>{{"GPU", 1},
                                           {"HPU", 2},
                                           {"accelerator_type:L4", 1},
                                           {"accelerator_type:Intel-GAUDI2", 1}}));
  // Ray's label holds one type: the first family's, as Ray's own Python path does.
  EXPECT_EQ(m.view.labels.at("ray.io/accelerator-type"), "L4");
  EXPECT_EQ(m.view.labels.at("rayaccel.io/hpu-type"), "Intel-GAUDI2");
}

TEST(MapToRay, SecondPluginForTheSameResourceIsNotCounted) {
  NodeSnapshot s;
  s.plugins = {Plugin("cuda", "GPU", "nvidia"), Plugin("rocm", "GPU", "amd")};
  s.devices = {Gpu("cuda", "GPU-0", "H100"), Gpu("rocm", "amd-0", "AMD-Instinct-MI300X-OAM")};
  RayMapping m = MapToRay(s);
  EXPECT_EQ(m.view.resources.at("GPU"), 1);
  EXPECT_EQ(m.view.resources.count("accelerator_type:AMD-Instinct-MI300X-OAM"), 0u);
  ASSERT_EQ(m.notes["rocm"].size(), 1u);
  EXPECT_NE(m.notes["rocm"][0].find("already provided by plugin cuda"), std::string::npos);
}

TEST(MapToRay, GpuDomainWhenOneNvlinkDomainHoldsEveryGpu) {
  NodeSnapshot s;
  s.plugins = {Plugin("cuda", "GPU", "nvidia")};
  for (int i = 0; i < 4; ++i) s.devices.push_back(Gpu("cuda", "GPU-" + std::to_string(i), "GB200"));
  s.domains.push_back(Domain{"cuda", "nvlink", "cluster-1.clique-7", {0, 1, 2, 3}});
  EXPECT_EQ(MapToRay(s).view.labels.at("ray.io/gpu-domain"), "cluster-1.clique-7");
  // Two cliques on one node: no single domain to name.
  s.domains = {Domain{"cuda", "nvlink", "c.1", {0, 1}}, Domain{"cuda", "nvlink", "c.2", {2, 3}}};
  EXPECT_EQ(MapToRay(s).view.labels.count("ray.io/gpu-domain"), 0u);
}

TEST(MapToRay, EachTopologyLevelIsALabelOfItsOwn) {
  NodeSnapshot s;
  s.plugins = {Plugin("cuda", "GPU", "nvidia"), Plugin("tpu", "TPU", "google"),
               Plugin("gaudi", "HPU", "intel")};
  for (int i = 0; i < 2; ++i) s.devices.push_back(Gpu("cuda", "GPU-" + std::to_string(i), "GB200"));
  for (int i = 0; i < 2; ++i) s.devices.push_back(Gpu("tpu", "chip" + std::to_string(i), "TPU-V4"));
  s.devices.push_back(Gpu("gaudi", "hpu0", "Intel-GAUDI2"));
  s.domains = {Domain{"cuda", "nvlink", "cluster-1.7", {0, 1}},
               Domain{"tpu", "tpu-slice", "my-slice", {2, 3}}, Domain{"gaudi", "rack", "r12", {4}}};
  RayMapping m = MapToRay(s);
  EXPECT_EQ(m.view.labels.at("ray.io/gpu-domain"), "cluster-1.7");
  EXPECT_EQ(m.view.labels.at("rayaccel.io/nvlink-domain"), "cluster-1.7");
  EXPECT_EQ(m.view.labels.at("rayaccel.io/tpu-slice"), "my-slice");
  EXPECT_EQ(m.view.labels.at("rayaccel.io/rack"), "r12");
  EXPECT_EQ(m.view.labels.count("rayaccel.io/xgmi-hive"), 0u);

  // An xGMI hive holding every counted AMD GPU; a sick one outside it does not matter.
  NodeSnapshot amd;
  amd.plugins = {Plugin("rocm", "GPU", "amd")};
  for (int i = 0; i < 3; ++i) amd.devices.push_back(Gpu("rocm", "amd" + std::to_string(i), "X"));
  amd.devices[2].health = Health::kUnhealthy;
  amd.domains = {Domain{"rocm", "xgmi", "0x1b2c3d4e5f607182", {0, 1}}};
  EXPECT_EQ(MapToRay(amd).view.labels.at("rayaccel.io/xgmi-hive"), "0x1b2c3d4e5f607182");
  EXPECT_EQ(MapToRay(amd).view.labels.count("ray.io/gpu-domain"), 0u);  // NVLink's only
  // Two hives: the node is in neither as a whole.
  amd.devices[2].health = Health::kHealthy;
  amd.domains.push_back(Domain{"rocm", "xgmi", "0x2", {2}});
  EXPECT_EQ(MapToRay(amd).view.labels.count("rayaccel.io/xgmi-hive"), 0u);

  // Two plugins that disagree on the rack: the first keeps it, the second is told.
  s.domains.push_back(Domain{"cuda", "rack", "r13", {0, 1}});
  m = MapToRay(s);
  EXPECT_EQ(m.view.labels.at("rayaccel.io/rack"), "r13");  // cuda comes first (GPU < HPU)
  ASSERT_EQ(m.notes["gaudi"].size(), 1u);
  EXPECT_NE(m.notes["gaudi"][0].find("rayaccel.io/rack is \"r13\""), std::string::npos);
  // An id that is no label value is noted, never published.
  s.domains[0].id = "not a label value";
  m = MapToRay(s);
  EXPECT_EQ(m.view.labels.count("ray.io/gpu-domain"), 0u);
  EXPECT_EQ(m.view.labels.count("rayaccel.io/nvlink-domain"), 0u);
  EXPECT_FALSE(m.notes["cuda"].empty());
}

TEST(MapToRay, CountedFamiliesAreWhatRayIsGiven) {
  NodeSnapshot s;
  s.plugins = {Plugin("cuda", "GPU", "nvidia"), Plugin("rocm", "GPU", "amd"),
               Plugin("gaudi", "HPU", "intel")};
  s.plugins[0].visible_devices_env = "CUDA_VISIBLE_DEVICES";
  s.plugins[2].visible_devices_env = "HABANA_VISIBLE_MODULES";
  s.devices = {Gpu("cuda", "GPU-0", "H100"), Gpu("cuda", "GPU-1", "H100", Health::kUnhealthy),
               Gpu("cuda", "GPU-2", "H100"), Gpu("rocm", "amd-0", "X"),
               Gpu("gaudi", "hpu0", "G", Health::kUnhealthy)};
  std::vector<CountedFamily> families = CountedFamilies(s);
  ASSERT_EQ(families.size(), 2u);
  EXPECT_EQ(families[0].resource, "GPU");
  EXPECT_EQ(families[0].plugin, "cuda");  // rocm's GPU is not given to Ray
  EXPECT_EQ(families[0].visible_devices_env, "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(families[0].device_ids, (std::vector<std::string>{"GPU-0", "GPU-2"}));
  EXPECT_EQ(families[1].resource, "HPU");  // listed, none counted: an empty set
  EXPECT_TRUE(families[1].device_ids.empty());
}

TEST(MapToRay, TpuSliceAndHeadResources) {
  NodeSnapshot s;
  s.plugins = {Plugin("tpu", "TPU", "google")};
  for (int i = 0; i < 4; ++i) s.devices.push_back(Gpu("tpu", "chip" + std::to_string(i), "TPU-V4"));
  s.plugin_labels = {{"ray.io/tpu-slice-name", "my-slice"},
                     {"ray.io/tpu-worker-id", "0"},
                     {"ray.io/tpu-pod-type", "v4-16"}};
  RayMapping m = MapToRay(s);
  EXPECT_EQ(m.view.resources.at("TPU"), 4);
  EXPECT_EQ(m.view.resources.at("my-slice"), 1);
  EXPECT_EQ(m.view.resources.at("TPU-v4-16-head"), 1);
  // Only worker 0 carries the head resource; tpu7x normalises to v7x.
  s.plugin_labels["ray.io/tpu-worker-id"] = "1";
  EXPECT_EQ(MapToRay(s).view.resources.count("TPU-v4-16-head"), 0u);
  s.plugin_labels["ray.io/tpu-worker-id"] = "0";
  s.plugin_labels["ray.io/tpu-pod-type"] = "tpu7x-8";
  EXPECT_EQ(MapToRay(s).view.resources.count("TPU-v7x-8-head"), 1u);
}

TEST(MapToRay, NoDevicesNoResources) {
  NodeSnapshot s;
  s.plugins = {Plugin("sim", "GPU", "simulated")};
  RayMapping m = MapToRay(s);
  EXPECT_TRUE(m.view.resources.empty());
  EXPECT_TRUE(m.view.labels.empty());
}

TEST(RayLabelKeys, OnlyRaysOwn) {
  EXPECT_TRUE(IsRayDefinedLabelKey("ray.io/gpu-domain"));
  EXPECT_TRUE(IsRayDefinedLabelKey("ray.io/tpu-worker-id"));
  EXPECT_FALSE(IsRayDefinedLabelKey("ray.io/node-id"));  // the raylet's alone
  EXPECT_FALSE(IsRayDefinedLabelKey("ray.io/my-label"));
}

}  // namespace
}  // namespace rayaccel
