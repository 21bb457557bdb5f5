// The transport helpers' entry points for plugins: the C interface (transport_helpers.h), and
// the C++ template on an instance type of the plugin's own. Each opens a real endpoint (UCX
// and libfabric are loaded with dlopen) and closes it.
#include "transport_helpers.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "transport_fabric.h"

namespace {

const uint8_t kKey[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

struct Address {
  std::string bytes;
  rayaccel_blob_sink sink{sizeof(rayaccel_blob_sink), this, &Address::Put};
  static rayaccel_status Put(void* context, rayaccel_blob blob) {
    static_cast<Address*>(context)->bytes.assign(reinterpret_cast<const char*>(blob.data),
                                                 blob.size);
    return RAYACCEL_STATUS_OK;
  }
};

rayaccel_endpoint_args Args(rayaccel_plugin_instance* instance, Address* address) {
  rayaccel_endpoint_args args{};
  args.struct_size = sizeof(args);
  args.instance = instance;
  args.address = &address->sink;
  args.peer_timeout_ms = 2000;
  args.key = rayaccel_blob{kKey, sizeof(kKey)};
  return args;
}

struct Error {
  char text[512] = {};
  rayaccel_error error{sizeof(rayaccel_error), text, sizeof(text)};
};

// An instance type that is not a definition of rayaccel_plugin_instance, with no `host`.
struct AcmeInstance {
  int devices = 1;
};

rayaccel_status OpenC(rayaccel_endpoint_args* args, rayaccel_error* error) {
  return rayaccel_transport_helper_open_endpoint(args, nullptr, error);
}

TEST(TransportHelpers, CTableOpensAnEndpointOfEachFabric) {
  rayaccel_transport_api table = rayaccel_transport_helper_table(OpenC);
  EXPECT_EQ(table.struct_size, sizeof(rayaccel_transport_api));
  EXPECT_EQ(table.open_endpoint, &OpenC);
  ASSERT_NE(table.transfer_batch, nullptr);
  for (const char* fabric : {"ucx", "libfabric", ""}) {
    SCOPED_TRACE(fabric);
    setenv("FI_PROVIDER", "tcp", 1);
    Address address;
    rayaccel_endpoint_args args = Args(nullptr, &address);
    rayaccel_transport_helper_options options{sizeof(options), fabric, nullptr};
    Error e;
    ASSERT_EQ(rayaccel_transport_helper_open_endpoint(&args, &options, &e.error),
              RAYACCEL_STATUS_OK)
        << e.text;
    EXPECT_FALSE(address.bytes.empty());
    EXPECT_EQ(table.close_endpoint(args.endpoint, &e.error), RAYACCEL_STATUS_OK) << e.text;
  }
}

TEST(TransportHelpers, CInterfaceRefusesAFabricItDoesNotKnowNamingIt) {
  Address address;
  rayaccel_endpoint_args args = Args(nullptr, &address);
  rayaccel_transport_helper_options options{sizeof(options), "carrier-pigeon", nullptr};
  Error e;
  EXPECT_EQ(rayaccel_transport_helper_open_endpoint(&args, &options, &e.error),
            RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(e.text, "carrier-pigeon"), nullptr) << e.text;
  // An older, shorter options struct: the fields it lacks are the defaults.
  rayaccel_transport_helper_options old{offsetof(rayaccel_transport_helper_options, fabric),
                                        "carrier-pigeon", nullptr};
  ASSERT_EQ(rayaccel_transport_helper_open_endpoint(&args, &old, &e.error), RAYACCEL_STATUS_OK)
      << e.text;
  rayaccel_transport_api table = rayaccel_transport_helper_table(OpenC);
  EXPECT_EQ(table.close_endpoint(args.endpoint, &e.error), RAYACCEL_STATUS_OK) << e.text;
}

TEST(TransportHelpers, TemplateTakesAnInstanceTypeOfThePluginsOwn) {
  using rayaccel::plugin::ucx::DeviceMemory;
  const rayaccel_transport_api table = rayaccel::plugin::fabric::Table(
      &rayaccel::plugin::fabric::OpenEndpointFor<DeviceMemory::kNone, AcmeInstance>);
  AcmeInstance acme;
  Address address;
  rayaccel_endpoint_args args = Args(reinterpret_cast<rayaccel_plugin_instance*>(&acme), &address);
  Error e;
  ASSERT_EQ(table.open_endpoint(&args, &e.error), RAYACCEL_STATUS_OK) << e.text;
  EXPECT_EQ(table.close_endpoint(args.endpoint, &e.error), RAYACCEL_STATUS_OK) << e.text;
}

}  // namespace
