// The UCX helper's wire (docs/transport.md): the address's and descriptor's magic numbers and
// version, the active-message ids, the limits an owner enforces on a batch's chunks, and the
// labels of the key's proofs. Fields are little-endian (transport_wire.h).
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_WIRE_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "common/transport_wire.h"

namespace rayaccel::plugin::ucx {

using wire::Mac;
using wire::MacOf;
using wire::Nonce;
using wire::Prove;
using wire::RandomId;
using wire::RandomNonce;
using wire::Reader;
using wire::SameMac;
using wire::Writer;

constexpr uint32_t kAddressMagic = 0x41584355;     // "UCXA"
constexpr uint32_t kDescriptorMagic = 0x52584355;  // "UCXR"
constexpr uint16_t kWireVersion = 5;  // 4: batches (kGetBatch..kPutBatchAck); 5: same-host copies
constexpr size_t kDescriptorBytes = 32;
// Descriptor flags (the U16 after the version).
constexpr uint16_t kMappable = 1;       // device memory the owner maps for readers on its host
constexpr uint16_t kStagedByOwner = 2;  // device memory the owner copies through host memory
constexpr uint16_t kHostMemory = 4;     // host memory: a reader on this host may be copied to

// Active-message ids (docs/transport.md). Control messages ride the control worker, transfers
// and notifications the data worker.
enum AmId : unsigned {
  kHello = 1,           // reader -> owner: who I am, a nonce, how to reach me
  kChallenge = 2,       // owner -> reader: the owner's nonce and its proof of the key
  kProof = 3,           // reader -> owner: the reader's proof of the key
  kWelcome = 4,         // owner -> reader: admitted
  kRefused = 5,         // owner -> reader: not admitted (a peers::RefusedReason)
  kPing = 6,            // reader -> owner: still here
  kPong = 7,            // owner -> reader: still here
  kBye = 8,             // reader -> owner: the connection is closing
  kGoodbye = 14,        // either way (control): this endpoint drops the link
  kMapAsk = 15,         // reader -> owner (control): a handle to map this region with, please
  kMapReply = 16,       // owner -> reader (control): the handle, or why not
  kUnmap = 17,          // owner -> reader (control): the region is going: close your mapping
  kUnmapped = 18,       // reader -> owner (control): closed (or never opened)
  kNotify = 9,          // reader -> owner (data): an application notification
  kGet = 10,            // reader -> owner (data): send me these bytes of a region
  kGetReply = 11,       // owner -> reader (data): the bytes, or why not
  kPut = 12,            // reader -> owner (data): store these bytes in a region
  kPutAck = 13,         // owner -> reader (data): stored, or why not
  kGetBatch = 19,       // reader -> owner (data): send me these ranges (a batch's small entries)
  kGetBatchReply = 20,  // owner -> reader (data): each range's status, then the bytes of those
                        // served, in order
  kPutBatch = 21,       // reader -> owner (data): these ranges, then their bytes, in order
  kPutBatchAck = 22,    // owner -> reader (data): each range's status
  kFirstAm = kHello,
  kLastAm = kPutBatchAck,
};

// Why an endpoint drops a link, as kGoodbye says.
enum GoodbyeReason : uint32_t {
  kClosing = 1,       // the endpoint is closing
  kDeclaredLost = 2,  // it did not hear from the other within its peer timeout
};

// A batch's small entries travel together, as chunks of at most kChunkEntries ranges and
// kChunkBytes bytes: one eager message each way per chunk instead of a request and a reply per
// entry (and no rendezvous handshake), several chunks in flight so that one side's copies
// overlap the other's. 64 KiB measured best over TCP on 4 KiB and 64 KiB entries (larger
// chunks leave fewer in flight; smaller ones cost more messages: docs/performance.md). An
// entry larger than kChunkEntryMax goes alone, zero-copy, as a transfer does.
constexpr uint32_t kChunkEntries = 256;
constexpr uint64_t kChunkBytes = 64ull << 10;
constexpr size_t kRangeBytes = 24;  // region, offset, length on the wire
// A chunk the owner copies (same_host_copy.h) carries each range's address in the reader too,
// and no bytes: up to one system call's ranges, whatever their size.
constexpr size_t kCopiedRangeBytes = 32;
constexpr uint32_t kCopiedChunkEntries = 1024;
constexpr uint64_t kCopiedChunkBytes = 64ull << 20;  // what the owner's lock is held for
constexpr uint32_t kCopiedChunk = 1;                 // a batch message's flags (wire version 5)

constexpr char kOwnerRole[] = "rayaccel ucx transport v2: owner";
constexpr char kReaderRole[] = "rayaccel ucx transport v2: reader";
constexpr char kAddressLabel[] = "rayaccel ucx transport v4: address";
constexpr char kHelloLabel[] = "rayaccel ucx transport v4: hello";
constexpr char kSameHostRole[] = "rayaccel ucx transport v5: same-host reader";

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_WIRE_H_
