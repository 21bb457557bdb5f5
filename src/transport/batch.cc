// Batches: prepared once (every entry checked, descriptors parsed), posted as one call of the
// plugin's transfer_batch or, before ABI 1.5, as one transfer per entry.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/descriptor.h"
#include "transport/transport_internal.h"

namespace rayaccel {

using transport::kUnreported;
using transport::PathOf;

absl::StatusOr<PreparedBatch> Transport::PrepareBatch(
    TransferOp op, ConnectionId connection, const std::vector<TransferEntry>& entries) const {
  if (entries.empty()) return absl::InvalidArgumentError("a batch of no transfers");
  PreparedBatch batch;
  batch.op_ = op;
  batch.connection_ = connection;
  batch.endpoint_ = impl_->endpoint_id;
  batch.entries_.reserve(entries.size());
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  if (impl_->connections.count(connection) == 0) return impl_->NoConnection(connection);
  for (size_t i = 0; i < entries.size(); ++i) {
    const TransferEntry& e = entries[i];
    auto fail = [i](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("entry ", i, ": ", s.message()));
    };
    if (e.length == 0) return fail(absl::InvalidArgumentError("a transfer of 0 bytes"));
    absl::StatusOr<transport::Envelope> remote = transport::Decode(e.descriptor);
    if (!remote.ok()) return fail(remote.status());
    if (remote->info.plugin != plugin_name_) {
      return fail(
          absl::InvalidArgumentError(absl::StrCat("the descriptor is plugin ", remote->info.plugin,
                                                  "'s; this transport is ", plugin_name_, "'s")));
    }
    if (e.remote_offset > remote->info.length || e.length > remote->info.length - e.remote_offset) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("bytes [", e.remote_offset, ", +", e.length,
                       ") lie outside the remote region of ", remote->info.length, " bytes")));
    }
    const bool same = i > 0 && batch.entries_.back().payload == remote->payload;
    batch.entries_.push_back({e.local, e.local_offset, std::string(remote->payload),
                              remote->info.endpoint, remote->info.region, e.remote_offset, e.length,
                              same});
  }
  return batch;
}

absl::StatusOr<BatchRequest> Transport::ReadBatch(ConnectionId connection,
                                                  const std::vector<TransferEntry>& entries) {
  absl::StatusOr<PreparedBatch> batch = PrepareBatch(TransferOp::kRead, connection, entries);
  if (!batch.ok()) return batch.status();
  return Post(*batch);
}

absl::StatusOr<BatchRequest> Transport::WriteBatch(ConnectionId connection,
                                                   const std::vector<TransferEntry>& entries) {
  absl::StatusOr<PreparedBatch> batch = PrepareBatch(TransferOp::kWrite, connection, entries);
  if (!batch.ok()) return batch.status();
  return Post(*batch);
}

absl::StatusOr<BatchRequest> Transport::Post(const PreparedBatch& batch) {
  if (batch.endpoint_ != impl_->endpoint_id || batch.entries_.empty()) {
    return absl::InvalidArgumentError("the batch was not prepared by this transport");
  }
  const rayaccel_transfer_op op =
      batch.op_ == TransferOp::kRead ? RAYACCEL_TRANSFER_READ : RAYACCEL_TRANSFER_WRITE;
  const size_t n = batch.entries_.size();
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  auto conn = impl_->connections.find(batch.connection_);
  if (conn == impl_->connections.end()) return impl_->NoConnection(batch.connection_);
  // What may have changed since the batch was prepared: the local regions.
  std::vector<rayaccel_transfer_entry> entries(n);
  auto region = impl_->regions.end();  // the previous entry's, most often this one's too
  for (size_t i = 0; i < n; ++i) {
    const PreparedBatch::Entry& e = batch.entries_[i];
    if (e.remote_endpoint == impl_->endpoint_id && impl_->regions.count(e.remote_region) == 0) {
      return absl::FailedPreconditionError(absl::StrCat("entry ", i, ": stale descriptor: region ",
                                                        e.remote_region,
                                                        " was deregistered on this endpoint"));
    }
    if (i == 0 || e.local != batch.entries_[i - 1].local) region = impl_->regions.find(e.local);
    if (region == impl_->regions.end()) {
      return absl::InvalidArgumentError(absl::StrCat("entry ", i, ": no local region ", e.local));
    }
    if (e.local_offset > region->second.length ||
        e.length > region->second.length - e.local_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry ", i, ": bytes [", e.local_offset, ", +", e.length, ") lie outside local region ",
          e.local, " of ", region->second.length, " bytes"));
    }
    entries[i] = {region->second.handle, e.local_offset,
                  e.same_payload ? entries[i - 1].remote_descriptor
                                 : rayaccel_blob{reinterpret_cast<const uint8_t*>(e.payload.data()),
                                                 e.payload.size()},
                  e.remote_offset, e.length};
  }
  BatchRequest out;
  out.entries_.assign(n, absl::OkStatus());
  out.op_ = op;
  out.connection_ = batch.connection_;
  out.start_ = absl::Now();
  out.lengths_.reserve(n);
  for (const PreparedBatch::Entry& e : batch.entries_) out.lengths_.push_back(e.length);
  std::vector<rayaccel_transfer_path> paths(n, RAYACCEL_PATH_UNREPORTED);
  // Each part that fails to start fails its entries; an error only when none started.
  auto failed_to_start = [&](size_t begin, size_t end, const absl::Status& s) {
    BatchRequest::Part part;
    part.begin = begin;
    part.end = end;
    out.parts_.push_back(std::move(part));
    out.End(out.parts_.back(), s);
  };
  bool started = false;
  absl::Status first_error;
  const size_t step = impl_->api.transfer_batch != nullptr ? RAYACCEL_TRANSPORT_MAX_BATCH : 1;
  for (size_t begin = 0; begin < n; begin += step) {
    const size_t end = std::min(n, begin + step);
    BatchRequest::Part part;
    part.begin = begin;
    part.end = end;
    absl::Status s;
    if (impl_->api.transfer_batch != nullptr) {
      part.statuses.reset(new rayaccel_status[end - begin]);
      std::fill_n(part.statuses.get(), end - begin, kUnreported);
      rayaccel_transfer_batch_args args{};
      args.struct_size = sizeof(args);
      args.connection = conn->second;
      args.op = op;
      args.count = static_cast<uint32_t>(end - begin);
      args.entries = &entries[begin];
      args.statuses = part.statuses.get();
      args.paths = &paths[begin];
      s = impl_->Call(op == RAYACCEL_TRANSFER_READ ? "batch read" : "batch write",
                      [&](rayaccel_error* e) { return impl_->api.transfer_batch(&args, e); });
      if (s.ok()) part.request = Request(this, args.request);
    } else {
      rayaccel_transfer_args args{};
      args.struct_size = sizeof(args);
      args.connection = conn->second;
      args.op = op;
      args.local = entries[begin].local;
      args.local_offset = entries[begin].local_offset;
      args.remote_descriptor = entries[begin].remote_descriptor;
      args.remote_offset = entries[begin].remote_offset;
      args.length = entries[begin].length;
      args.path = RAYACCEL_PATH_UNREPORTED;
      s = impl_->Call(op == RAYACCEL_TRANSFER_READ ? "read" : "write",
                      [&](rayaccel_error* e) { return impl_->api.transfer(&args, e); });
      if (s.ok()) part.request = Request(this, args.request);
      paths[begin] = args.path;
    }
    if (!s.ok()) {
      if (first_error.ok()) first_error = s;
      failed_to_start(begin, end, s);
      continue;
    }
    started = true;
    out.parts_.push_back(std::move(part));
    if (out.parts_.back().request.done()) {  // ended within the call
      out.End(out.parts_.back(), absl::OkStatus());
    }
  }
  if (!started) return first_error;
  out.paths_.reserve(n);
  for (rayaccel_transfer_path p : paths) out.paths_.push_back(PathOf(p));
  out.counters_ = impl_->counters;
  if (out.done()) out.Count();  // every entry ended within the call
  return out;
}

}  // namespace rayaccel
