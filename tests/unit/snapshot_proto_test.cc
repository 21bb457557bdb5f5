#include "rpc/snapshot_proto.h"

#include "gtest/gtest.h"

namespace rayaccel::rpc {
namespace {

NodeSnapshot Sample() {
  NodeSnapshot s;
  s.generation = 42;
  PluginStatus p;
  p.name = "cuda";
  p.state = PluginStatus::State::kDegraded;
  p.message = "device 3: duplicate id";
  p.resource_name = "GPU";
  p.device_count = 2;
  s.plugins.push_back(p);
  for (int i = 0; i < 2; ++i) {
    Device d;
    d.id = "GPU-" + std::to_string(i);
    d.plugin = "cuda";
    d.resource = "GPU";
    d.index = static_cast<uint32_t>(i);
    d.name = "NVIDIA H100 80GB HBM3";
    d.accelerator_type = "H100";
    d.memory_bytes = 85520809984u;
    d.pci_bus_id = "0000:18:00.0";
    d.numa_node = i == 0 ? 0 : -1;
    d.health = i == 0 ? Health::kHealthy : Health::kUnhealthy;
    d.health_reason = i == 0 ? "" : "XID 79";
    d.attributes = {{"compute_capability", Attribute::Kind::kVersion, "9.0", 0},
                    {"minor_number", Attribute::Kind::kInt, "", 7},
                    {"mig", Attribute::Kind::kBool, "", 1}};
    d.nearest_nics = {"mlx5_0", "mlx5_1"};
    d.cpuset = "0-13";
    s.devices.push_back(d);
  }
  s.links.push_back(
      Link{0, 1, LinkType::kNvlink, 18, 450000, PciePath::kUnknown, "plugin:cuda", 0, 1, 0});
  s.links.push_back(Link{0, 1, LinkType::kPcie, 1, 0, PciePath::kPxb, "hwloc"});
  s.domains.push_back(Domain{"cuda", "nvlink", "cluster.7", {0, 1}});
  s.plugin_labels = {{"example.com/rack", "r12"}};
  s.host_topology = "hwloc, this machine";
  s.ray.resources = {{"GPU", 1}, {"accelerator_type:H100", 1}};
  s.ray.labels = {{"ray.io/accelerator-type", "H100"}};
  return s;
}

TEST(SnapshotProto, RoundTripsThroughBytes) {
  NodeSnapshot s = Sample();
  std::string bytes = ToProto(s).SerializeAsString();
  v1::NodeSnapshot parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  absl::StatusOr<NodeSnapshot> back = FromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->generation, 42u);
  EXPECT_EQ(back->plugins[0].state, PluginStatus::State::kDegraded);
  EXPECT_EQ(back->plugins[0].message, "device 3: duplicate id");
  ASSERT_EQ(back->devices.size(), 2u);
  EXPECT_EQ(back->devices[1].health, Health::kUnhealthy);
  EXPECT_EQ(back->devices[1].health_reason, "XID 79");
  EXPECT_EQ(back->devices[1].numa_node, -1);
  EXPECT_EQ(back->devices[0].memory_bytes, 85520809984u);
  EXPECT_EQ(back->devices[0].nearest_nics, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(back->devices[0].attributes.size(), 3u);
  for (const Attribute& a : back->devices[0].attributes) {
    if (a.name == "compute_capability") {
      EXPECT_EQ(a.kind, Attribute::Kind::kVersion);
      EXPECT_EQ(a.string_value, "9.0");
    } else if (a.name == "minor_number") {
      EXPECT_EQ(a.int_value, 7);
    } else {
      EXPECT_EQ(a.kind, Attribute::Kind::kBool);
      EXPECT_EQ(a.int_value, 1);
    }
  }
  ASSERT_EQ(back->links.size(), 2u);
  EXPECT_EQ(back->links[0].count, 18u);
  EXPECT_EQ(back->links[0].hops, 1u);
  EXPECT_EQ(back->links[1].pcie_path, PciePath::kPxb);
  EXPECT_EQ(back->domains[0].devices, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(back->ray.resources, s.ray.resources);
  EXPECT_EQ(back->ray.labels, s.ray.labels);
  EXPECT_EQ(back->plugin_labels, s.plugin_labels);
}

TEST(SnapshotProto, RefusesWhatAPeerMustNotSend) {
  v1::NodeSnapshot q = ToProto(Sample());
  q.mutable_links(0)->set_b(9);
  EXPECT_FALSE(FromProto(q).ok());
  q = ToProto(Sample());
  q.mutable_links(0)->set_type(static_cast<v1::LinkType>(77));
  EXPECT_FALSE(FromProto(q).ok());
  q = ToProto(Sample());
  q.mutable_domains(0)->add_devices(5);
  EXPECT_FALSE(FromProto(q).ok());
  q = ToProto(Sample());
  q.mutable_devices(0)->set_health(static_cast<v1::Health>(9));
  EXPECT_FALSE(FromProto(q).ok());
  v1::NodeSnapshot garbage;
  EXPECT_FALSE(garbage.ParseFromString("\xff\xff\xff\x0f garbage"));
}

}  // namespace
}  // namespace rayaccel::rpc
