// Health watches (a plugin's event triggers a rescan), subscriptions and WaitForNewer.
#include <algorithm>
#include <tuple>

#include "model/validate.h"
#include "registry/registry_impl.h"
#include "util/log.h"

namespace rayaccel {

namespace {

// Whether `plugin`'s devices read the same in both snapshots (ids, health and reasons): what
// a health event is about.
bool SameDevices(const NodeSnapshot& a, const NodeSnapshot& b, const std::string& plugin) {
  auto view = [&](const NodeSnapshot& s) {
    std::vector<std::tuple<std::string, Health, std::string>> out;
    for (const Device& d : s.devices) {
      if (d.plugin == plugin) out.emplace_back(d.id, d.health, d.health_reason);
    }
    return out;
  };
  return view(a) == view(b);
}

}  // namespace

uint64_t Registry::Impl::Subscribe(
    std::function<void(std::shared_ptr<const NodeSnapshot>)> callback) {
  std::lock_guard<std::mutex> lock(snapshot_mu_);
  if (shut_down_) return 0;
  const uint64_t id = ++last_subscription_;
  subscribers_.emplace(id, std::make_shared<Subscriber>(Subscriber{std::move(callback)}));
  if (!notifier_.joinable()) {
    // The thread holds the registry's state alive: a callback may let go of the registry,
    // and the state then ends with this thread, not under the callback's feet.
    notifier_ = std::thread([self = shared_from_this()] { self->Notify(); });
    notifier_id_ = notifier_.get_id();
  }
  published_.notify_all();  // the new subscriber's first snapshot
  return id;
}

void Registry::Impl::Unsubscribe(uint64_t id) {
  if (id == 0) return;  // subscribed after Shutdown: never delivered
  std::unique_lock<std::mutex> lock(snapshot_mu_);
  subscribers_.erase(id);
  if (std::this_thread::get_id() == notifier_id_) return;
  published_.wait(lock, [&] { return delivering_ != id; });
}

void Registry::Impl::StartWatching() {
  if (!options_.watch_health) return;
  for (const std::unique_ptr<Slot>& s : slots_) {
    Slot* slot = s.get();
    if ((slot->capabilities & RAYACCEL_CAP_HEALTH_EVENTS) == 0) continue;
    std::string name = slot->name;
    watchers_.emplace_back([this, slot, name] {
      auto sleep = [this](std::chrono::milliseconds d) {
        for (auto waited = std::chrono::milliseconds(0); waited < d && !stopping_;
             waited += std::chrono::milliseconds(10)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      };
      // A watch that fails, or "changes" nothing a snapshot shows, would drive a rescan
      // storm: each such answer doubles a pause before the next wait (10 ms up to 1 s); a
      // real change clears it. Real changes are coalesced: at
      // most one health rescan per kMinInterval, later events join the next one.
      constexpr std::chrono::milliseconds kMinInterval{5};
      std::chrono::milliseconds backoff{0};
      auto back_off = [&] {
        backoff = std::min(std::chrono::milliseconds(1000),
                           std::max(std::chrono::milliseconds(10), 2 * backoff));
        sleep(backoff);
      };
      while (!stopping_) {
        if (slot->starting) {  // no health wait before initialize has returned
          sleep(std::chrono::milliseconds(50));
          continue;
        }
        std::shared_ptr<PluginHandle> plugin;
        {
          std::lock_guard<std::mutex> lock(slot->mu);
          // Failed to start in-process: nothing to watch, ever.
          if (slot->status.state == PluginStatus::State::kFailed && !slot->restartable) break;
          plugin = slot->plugin;
        }
        if (plugin == nullptr || !plugin->alive()) {
          sleep(std::chrono::milliseconds(1000));  // the next rescan restarts it
          continue;
        }
        try {
          PluginReport report;
          absl::Status st = plugin->WaitHealthEvents(200, &report);
          if (stopping_) break;
          if (!plugin->alive()) {
            // The plugin's process died while waiting: publish that (the rescan marks it
            // failed); a later rescan restarts it after its backoff.
            Log().warn("plugin {}: died during its health watch: {}", name,
                       EscapeControl(st.message()));
            {
              // Recorded as a crash during a scan is, with its cause and backoff, once: a
              // scan that saw the death first has marked it already.
              std::lock_guard<std::mutex> lock(slot->mu);
              if (slot->plugin == plugin && slot->status.state != PluginStatus::State::kFailed) {
                MarkCrashed(slot, st);
              }
            }
            Rescan();
          } else if (st.ok()) {
            Log().info("plugin {}: health changed; rescanning", name);
            {
              std::lock_guard<std::mutex> lock(stats_mu_);
              ++stats_.health_events;
            }
            auto started = std::chrono::steady_clock::now();
            std::shared_ptr<const NodeSnapshot> before = snapshot();
            std::shared_ptr<const NodeSnapshot> after = Rescan();
            if (SameDevices(*before, *after, name)) {
              Log().debug("plugin {}: reported a change, but nothing changed", name);
              back_off();
            } else {
              backoff = std::chrono::milliseconds(0);
              sleep(std::chrono::duration_cast<std::chrono::milliseconds>(
                  kMinInterval - (std::chrono::steady_clock::now() - started)));
            }
          } else if (st.code() == absl::StatusCode::kUnimplemented) {
            Log().info("plugin {}: no health events: {}", name, EscapeControl(st.message()));
            break;
          } else if (st.code() != absl::StatusCode::kDeadlineExceeded) {
            // A transient failure: try again after the backoff, not stop watching for good.
            if (backoff.count() == 0) {
              Log().warn("plugin {}: health watch: {}", name, EscapeControl(st.message()));
            }
            back_off();
          }
        } catch (const std::exception& e) {
          Log().error("plugin {}: health watch: {}", name, e.what());
          back_off();
        }
      }
    });
  }
}

void Registry::Impl::StopWatching() {
  stopping_ = true;
  for (std::thread& t : watchers_) t.join();
  watchers_.clear();
}

std::shared_ptr<const NodeSnapshot> Registry::Impl::WaitForNewer(
    uint64_t generation, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(snapshot_mu_);
  ++waiters_;
  published_.wait_for(lock, timeout,
                      [&] { return shut_down_ || snapshot_->generation > generation; });
  std::shared_ptr<const NodeSnapshot> snap = snapshot_;
  // The last thing done with this object: Shutdown (and so the destructor) waits for it.
  if (--waiters_ == 0 && shut_down_) published_.notify_all();
  return snap;
}

void Registry::Impl::Notify() {
  std::unique_lock<std::mutex> lock(snapshot_mu_);
  while (!shut_down_) {
    std::shared_ptr<const NodeSnapshot> snap = snapshot_;
    bool delivered_any = false;
    for (auto& [id, subscriber] : subscribers_) {
      if (subscriber->delivered >= snap->generation) continue;
      subscriber->delivered = snap->generation;
      delivering_ = id;
      std::shared_ptr<Subscriber> keep = subscriber;
      lock.unlock();
      try {
        keep->callback(snap);
      } catch (const std::exception& e) {
        Log().error("snapshot subscriber threw: {}", e.what());
      } catch (...) {
        Log().error("snapshot subscriber threw");
      }
      lock.lock();
      delivering_ = 0;
      published_.notify_all();  // an Unsubscribe may be waiting for this callback
      delivered_any = true;
      break;  // the map may have changed while unlocked: look again
    }
    if (!delivered_any) {
      published_.wait(lock, [&] {
        if (shut_down_) return true;
        for (const auto& [id, subscriber] : subscribers_) {
          if (subscriber->delivered < snapshot_->generation) return true;
        }
        return false;
      });
    }
  }
}

}  // namespace rayaccel
