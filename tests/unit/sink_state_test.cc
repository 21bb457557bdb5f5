#include "rpc/sink_state.h"

#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace rayaccel::rpc {
namespace {

const std::string kNode(56, 'a');

v1::NodeSnapshot Snapshot(uint64_t generation, double gpus) {
  v1::NodeSnapshot s;
  s.set_generation(generation);
  (*s.mutable_resources_total())["GPU"] = gpus;
  (*s.mutable_resources_total())["accelerator_type:H100"] = 1;
  (*s.mutable_labels())["ray.io/accelerator-type"] = "H100";
  (*s.mutable_labels())["rayaccel.io/GPU-count"] = std::to_string(static_cast<int>(gpus));
  return s;
}

TEST(SinkState, NodeIdMustBeRays) {
  EXPECT_TRUE(CheckNodeId(kNode).ok());
  EXPECT_FALSE(CheckNodeId("").ok());
  EXPECT_FALSE(CheckNodeId(std::string(55, 'a')).ok());
  EXPECT_FALSE(CheckNodeId(std::string(56, 'A')).ok());
  EXPECT_FALSE(CheckNodeId(std::string(56, 'g')).ok());
}

TEST(SinkState, RefusesTotalsRayWouldNot) {
  for (double bad : {-1.0, 0.5, 1e13, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    v1::NodeSnapshot s = Snapshot(1, 8);
    (*s.mutable_resources_total())["GPU"] = bad;
    EXPECT_FALSE(CheckNodeResources(s.resources_total()).ok()) << bad;
  }
  for (const char* name : {"", "has space", "CPU", "memory", "node:10.0.0.1", "bundle_group_x"}) {
    v1::NodeSnapshot s = Snapshot(1, 8);
    (*s.mutable_resources_total())[name] = 1;
    absl::Status st = CheckNodeResources(s.resources_total());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_TRUE(CheckNodeResources(Snapshot(1, 0).resources_total()).ok());
}

TEST(SinkState, RefusesLabelsRayWouldNot) {
  for (auto [key, value] :
       std::initializer_list<std::pair<const char*, const char*>>{{"ray.io/node-id", "abc"},
                                                                  {"ray.io/made-up", "x"},
                                                                  {"-bad", "x"},
                                                                  {"rayaccel.io/ok", "not a value"},
                                                                  {"rayaccel.io/ok", "-x"}}) {
    v1::NodeSnapshot s = Snapshot(1, 8);
    (*s.mutable_labels())[key] = value;
    EXPECT_FALSE(CheckNodeLabels(s.labels()).ok()) << key << "=" << value;
  }
  EXPECT_TRUE(CheckNodeLabels(Snapshot(1, 8).labels()).ok());
}

TEST(SinkState, GenerationsOnlyMoveForwardWithinASession) {
  SinkState state;
  auto first = state.Apply(kNode, "agent-1", Snapshot(5, 8));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->applied);

  for (uint64_t stale : {5u, 4u, 1u}) {
    auto late = state.Apply(kNode, "agent-1", Snapshot(stale, 2));
    ASSERT_TRUE(late.ok());
    EXPECT_FALSE(late->applied);
    EXPECT_EQ(late->generation, 5u);
  }
  EXPECT_EQ(state.Current(kNode)->resources_total().at("GPU"), 8);

  auto next = state.Apply(kNode, "agent-1", Snapshot(6, 7));
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->applied);
  EXPECT_EQ(state.Current(kNode)->resources_total().at("GPU"), 7);
}

TEST(SinkState, ARestartedAgentReplacesTheNodeWhole) {
  SinkState state;
  ASSERT_TRUE(state.Apply(kNode, "agent-1", Snapshot(9, 8)).ok());
  auto restarted = state.Apply(kNode, "agent-2", Snapshot(1, 6));
  ASSERT_TRUE(restarted.ok());
  EXPECT_TRUE(restarted->applied);
  EXPECT_EQ(state.Current(kNode)->generation(), 1u);
  EXPECT_EQ(state.Current(kNode)->resources_total().at("GPU"), 6);
}

TEST(SinkState, BadUpdateChangesNothing) {
  SinkState state;
  ASSERT_TRUE(state.Apply(kNode, "agent-1", Snapshot(1, 8)).ok());

  v1::NodeSnapshot bad = Snapshot(2, 0.5);
  EXPECT_FALSE(state.Apply(kNode, "agent-1", bad).ok());
  v1::NodeSnapshot dangling = Snapshot(3, 4);
  dangling.add_links()->set_b(7);  // no device 7
  EXPECT_FALSE(state.Apply(kNode, "agent-1", dangling).ok());
  EXPECT_FALSE(state.Apply(kNode, "", Snapshot(4, 4)).ok());
  EXPECT_FALSE(state.Apply("not-a-node", "agent-1", Snapshot(4, 4)).ok());

  EXPECT_EQ(state.Current(kNode)->generation(), 1u);
  EXPECT_EQ(state.node_count(), 1u);
  EXPECT_FALSE(state.Current(std::string(56, 'b')).has_value());
}

TEST(SinkState, NodesAreIndependent) {
  SinkState state;
  const std::string other(56, 'b');
  ASSERT_TRUE(state.Apply(kNode, "agent-1", Snapshot(3, 8)).ok());
  auto applied = state.Apply(other, "agent-x", Snapshot(1, 4));
  ASSERT_TRUE(applied.ok());
  EXPECT_TRUE(applied->applied);
  EXPECT_EQ(state.node_count(), 2u);
  EXPECT_EQ(state.Current(kNode)->resources_total().at("GPU"), 8);
  EXPECT_EQ(state.Current(other)->resources_total().at("GPU"), 4);
}

}  // namespace
}  // namespace rayaccel::rpc
