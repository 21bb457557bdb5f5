// The libfabric helper's wire (docs/transport.md, "The libfabric helper"): the address's and
// descriptor's magic numbers and version, the message types, and the labels of the key's
// proofs. Fields are little-endian (transport_wire.h).
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_WIRE_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "common/transport_wire.h"

namespace rayaccel::plugin::ofi {

using wire::Mac;
using wire::MacOf;
using wire::Nonce;
using wire::Prove;
using wire::RandomId;
using wire::RandomNonce;
using wire::Reader;
using wire::SameMac;
using wire::Writer;

constexpr uint32_t kAddressMagic = 0x4149464f;     // "OFIA"
constexpr uint32_t kDescriptorMagic = 0x5249464f;  // "OFIR"
constexpr uint16_t kWireVersion = 1;
constexpr size_t kDescriptorBytes = 32;
constexpr size_t kMaxFabricAddress = 512;
constexpr size_t kMaxProviderName = 64;

enum MessageType : uint16_t {
  kHello = 1,          // reader -> owner's listener: who I am, a nonce, where to answer; signed
  kChallenge = 2,      // owner -> reader: its nonce, its proof, the channel that serves it; signed
  kProof = 3,          // reader -> owner: the reader's proof
  kWelcome = 4,        // owner -> reader: admitted
  kRefused = 5,        // owner -> reader: not admitted (a peers::RefusedReason)
  kLookup = 6,         // reader -> owner: a region's id
  kLookupReply = 7,    // owner -> reader: the region's status, length, key and address
  kRevoke = 8,         // owner -> reader: the region is going; stop and confirm
  kRevoked = 9,        // reader -> owner: nothing of mine touches it any more
  kNotification = 10,  // either way: a notification's bytes
  kPing = 11,          // reader -> owner: heartbeat
  kPong = 12,          // owner -> reader: heartbeat
  kBye = 13,           // either way: this connection is closed (or was declared lost)
};

constexpr char kOwnerRole[] = "rayaccel libfabric transport v1: owner";
constexpr char kReaderRole[] = "rayaccel libfabric transport v1: reader";
constexpr char kAddressLabel[] = "rayaccel libfabric transport v1: address";
constexpr char kHelloLabel[] = "rayaccel libfabric transport v1: hello";
constexpr char kChallengeLabel[] = "rayaccel libfabric transport v1: challenge";

// Messages are small: the largest is a notification (RAYACCEL_TRANSPORT_MAX_NOTIFICATION)
// or a hello with its fabric address.
constexpr size_t kMessageBytes = 4096;

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_WIRE_H_
