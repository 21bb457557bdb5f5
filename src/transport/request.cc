// Request and BatchRequest: a transfer's (or a batch's) handle, waited on, counted once as it
// ends, abandoned to the plugin when dropped unfinished.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/transport_internal.h"

namespace rayaccel {

using transport::EntryText;
using transport::kUnreported;
using transport::Millis;
using transport::StatusFor;
using transport::ToStatus;

// --- Request

const char* TransferPathName(TransferPath path) {
  switch (path) {
    case TransferPath::kFabric:
      return "fabric";
    case TransferPath::kStaged:
      return "staged";
    case TransferPath::kDeviceIpc:
      return "device-ipc";
    case TransferPath::kSameHost:
      return "same-host";
    case TransferPath::kUnreported:
      break;
  }
  return "unreported";
}

Request::Request(const Transport* transport, rayaccel_request* handle, TransferPath path)
    : transport_(transport),
      closed_(transport != nullptr ? transport->impl_->closed : nullptr),
      handle_(handle),
      path_(path) {}

bool Request::Orphaned() {
  if (handle_ == nullptr || closed_ == nullptr || !*closed_) return false;
  handle_ = nullptr;
  result_ = absl::UnavailableError("the transport was closed with the request in flight");
  Count();
  return true;
}

Request::Request(Request&& other) noexcept
    : transport_(other.transport_),
      closed_(std::move(other.closed_)),
      handle_(std::exchange(other.handle_, nullptr)),
      path_(other.path_),
      result_(std::move(other.result_)),
      counters_(std::move(other.counters_)),
      op_(std::exchange(other.op_, -1)),
      bytes_(other.bytes_),
      connection_(other.connection_),
      start_(other.start_) {}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    Abandon();
    transport_ = other.transport_;
    closed_ = std::move(other.closed_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = other.path_;
    result_ = std::move(other.result_);
    counters_ = std::move(other.counters_);
    op_ = std::exchange(other.op_, -1);
    bytes_ = other.bytes_;
    connection_ = other.connection_;
    start_ = other.start_;
  }
  return *this;
}

void Request::Count() {
  if (op_ < 0 || counters_ == nullptr) return;
  counters_->Transfer(op_, path_, bytes_, result_, connection_);
  counters_->Latency(op_, absl::Now() - start_);
  op_ = -1;
}

Request::~Request() { Abandon(); }

void Request::Abandon() {
  if (handle_ == nullptr || Orphaned()) return;
  const Transport::Impl& impl = *transport_->impl_;
  impl.Call("abandon", [&](rayaccel_error* e) { return impl.api.abandon(handle_, e); })
      .IgnoreError();
  handle_ = nullptr;
}

absl::Status Request::Wait(absl::Time deadline) {
  if (handle_ == nullptr || Orphaned()) return result_;
  const Transport::Impl& impl = *transport_->impl_;
  while (true) {
    ErrorBuffer err;
    rayaccel_status s =
        CallPlugin(&err, [&](rayaccel_error* e) { return impl.api.poll(handle_, e); });
    if (s != RAYACCEL_STATUS_TIMEOUT) {
      handle_ = nullptr;  // released by the plugin
      result_ = ToStatus(s, err, "transfer");
      Count();
      return result_;
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("the request is still in flight");
    }
    impl.Call("wait",
              [&](rayaccel_error* e) {
                // Short waits: a completion the progress thread saw between our poll and this wait
                // is caught by the next poll, at most a millisecond later.
                return impl.api.wait(impl.endpoint, std::min<uint32_t>(Millis(left), 1), e);
              })
        .IgnoreError();  // the poll above tells the outcome
  }
}

// --- BatchRequest

void BatchRequest::End(Part& part, const absl::Status& status) {
  part.ended = true;
  for (size_t i = part.begin; i < part.end; ++i) {
    if (!part.statuses) {  // one transfer
      entries_[i] = status.ok() ? status
                                : absl::Status(status.code(),
                                               absl::StrCat("entry ", i, ": ", status.message()));
      continue;
    }
    const rayaccel_status code = part.statuses[i - part.begin];
    if (code == RAYACCEL_STATUS_OK) {
      continue;  // OK since Post
    } else if (code == kUnreported) {
      entries_[i] = status.ok() ? absl::InternalError(absl::StrCat(
                                      "entry ", i, ": the plugin did not report its outcome"))
                                : status;
    } else {
      entries_[i] = StatusFor(code, absl::StrCat("entry ", i, ": ", EntryText(code)));
    }
  }
  // The plugin's own words for the first failure of its part, where it gave them.
  if (!status.ok() && result_.ok()) result_ = status;
}

bool BatchRequest::done() const {
  return std::all_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.ended; });
}

size_t BatchRequest::failed() const {
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(),
                                           [](const absl::Status& s) { return !s.ok(); }));
}

void BatchRequest::Count() {
  if (counters_ == nullptr) return;
  counters_->Transfers(op_, paths_, lengths_, entries_, connection_);
  counters_->Latency(op_, absl::Now() - start_);
  counters_ = nullptr;
}

absl::Status BatchRequest::Wait(absl::Time deadline) {
  for (Part& part : parts_) {
    if (part.ended) continue;
    absl::Status s = part.request.Wait(deadline);
    if (absl::IsDeadlineExceeded(s) && !part.request.done()) return s;
    End(part, s);
  }
  Count();
  const size_t bad = failed();
  if (bad == 0) return absl::OkStatus();
  const auto first =
      std::find_if(entries_.begin(), entries_.end(), [](const absl::Status& s) { return !s.ok(); });
  const absl::Status& why = result_.ok() ? *first : result_;
  return absl::Status(why.code(), absl::StrCat(bad, " of ", entries_.size(),
                                               " entries failed; the first: ", why.message()));
}

}  // namespace rayaccel
