// The CPU offload device: the CI stand-in for CUDA streams and events.
//
// Execution: kernels (and copies on the compute queue) run when issued. Copies on the other queues are
// queued and run only when the program must see them: when a queue waits on an event recorded after
// them, or on synchronize(). That is the latest schedule a GPU may legally pick, so a wait that is
// missing shows up as stale data (wrong tokens) instead of passing by luck.
//
// Checking: every queue keeps a vector clock; record() snapshots it into the event, wait() merges the
// event's snapshot. Each copy (and each kernel access the driver notes) is an access stamped with its
// queue's clock. Two accesses of overlapping bytes, at least one a write, on different queues, with
// neither ordered before the other by the events, are a race: the device throws naming both.
#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/offload/offload_device.h"

namespace nanovllm {
namespace {

constexpr size_t kHistory = 1024;  // recent accesses checked against each new one

class CpuOffloadDevice final : public OffloadDevice {
 public:
  explicit CpuOffloadDevice(CpuOffloadDeviceOptions o) : opt_(o) { add_queue(); }
  ~CpuOffloadDevice() override { run_all(); }

  Device device() const override { return Device::cpu(); }
  Allocator& device_allocator() override { return cpu_allocator(); }
  Allocator& host_allocator() override { return cpu_allocator(); }
  ops::Stream compute_stream() const override { return {}; }

  Queue create_queue() override { return add_queue(); }
  Event create_event() override {
    events_.push_back({});
    return static_cast<Event>(events_.size() - 1);
  }

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Queue q, const char* what) override {
    (void)kind;
    check_queue(q);
    if (bytes == 0) return;
    access(src, bytes, false, q, what);
    access(dst, bytes, true, q, what);
    if (q == kCompute || !opt_.defer_copies) {
      std::memcpy(dst, src, bytes);
    } else {
      queues_[static_cast<size_t>(q)].pending.push_back({Op::kCopy, dst, src, bytes, 0, 0, 0});
    }
  }

  void record(Event e, Queue q) override {
    check_queue(q);
    EventState& ev = event(e);
    ev.clock = queues_[static_cast<size_t>(q)].clock;
    ev.queue = q;
    ++ev.generation;
    if (q == kCompute || !opt_.defer_copies) {
      ev.done = ev.generation;
    } else {
      queues_[static_cast<size_t>(q)].pending.push_back({Op::kRecord, nullptr, nullptr, 0, e, ev.generation, 0});
    }
  }

  void wait(Queue q, Event e) override {
    check_queue(q);
    EventState& ev = event(e);
    if (ev.generation == 0) return;  // never recorded: no-op, as in CUDA
    merge(queues_[static_cast<size_t>(q)].clock, ev.clock);
    if (ev.done >= ev.generation) return;
    if (q == kCompute) {
      run_until(e, ev.generation, ev.queue);
    } else {
      queues_[static_cast<size_t>(q)].pending.push_back({Op::kWait, nullptr, nullptr, 0, e, ev.generation, ev.queue});
    }
  }

  void note_access(const void* p, size_t bytes, bool write, Queue q, const char* what) override {
    check_queue(q);
    if (bytes) access(p, bytes, write, q, what);
  }

  void synchronize() override {
    run_all();
    // Everything issued so far happened before anything issued next, on every queue.
    std::vector<uint64_t> all(queues_.size(), 0);
    for (const QueueState& s : queues_) merge(all, s.clock);
    for (QueueState& s : queues_) s.clock = all;
    history_.clear();
  }

 private:
  struct Op {
    enum Kind { kCopy, kRecord, kWait } kind;
    void* dst;
    const void* src;
    size_t bytes;
    Event event;
    uint64_t generation;
    Queue queue;  // kWait: the queue that recorded `event`
  };
  struct QueueState {
    std::vector<uint64_t> clock;
    std::deque<Op> pending;
  };
  struct EventState {
    std::vector<uint64_t> clock;  // of the latest record
    Queue queue = kCompute;       // where the latest record was issued
    uint64_t generation = 0;      // records issued
    uint64_t done = 0;            // records executed
  };
  struct Access {
    uintptr_t lo, hi;
    bool write;
    Queue queue;
    uint64_t tick;  // queue's own clock component at the access
    std::string what;
  };

  Queue add_queue() {
    queues_.push_back({});
    for (QueueState& s : queues_) s.clock.resize(queues_.size(), 0);
    for (EventState& e : events_) e.clock.resize(queues_.size(), 0);
    return static_cast<Queue>(queues_.size() - 1);
  }
  void check_queue(Queue q) const {
    NANOVLLM_ASSERT(q >= 0 && static_cast<size_t>(q) < queues_.size(), "offload device: bad queue ", q);
  }
  EventState& event(Event e) {
    NANOVLLM_ASSERT(e >= 0 && static_cast<size_t>(e) < events_.size(), "offload device: bad event ", e);
    return events_[static_cast<size_t>(e)];
  }
  static void merge(std::vector<uint64_t>& into, const std::vector<uint64_t>& from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
  }

  void access(const void* p, size_t bytes, bool write, Queue q, const char* what) {
    if (!opt_.check_races) return;
    std::vector<uint64_t>& clock = queues_[static_cast<size_t>(q)].clock;
    const uint64_t tick = ++clock[static_cast<size_t>(q)];
    const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
    for (const Access& a : history_) {
      if (a.queue == q || (!a.write && !write) || a.hi <= lo || hi <= a.lo) continue;
      // a happened before this access iff this queue has seen a's queue at least up to a's tick.
      NANOVLLM_CHECK(a.tick <= clock[static_cast<size_t>(a.queue)], "offload race: ", write ? "write" : "read",
                     " '", what, "' on queue ", q, " is not ordered after the ", a.write ? "write" : "read", " '",
                     a.what, "' on queue ", a.queue, " (missing event wait)");
    }
    history_.push_back({lo, hi, write, q, tick, what});
    if (history_.size() > kHistory) history_.pop_front();
  }

  void execute(const Op& op) {
    switch (op.kind) {
      case Op::kCopy:
        std::memcpy(op.dst, op.src, op.bytes);
        break;
      case Op::kRecord: {
        EventState& ev = event(op.event);
        ev.done = std::max(ev.done, op.generation);
        break;
      }
      case Op::kWait:
        run_until(op.event, op.generation, op.queue);
        break;
    }
  }

  // Runs queue q (which recorded event e) until e's record number `generation` has executed.
  void run_until(Event e, uint64_t generation, Queue q) {
    while (event(e).done < generation) {
      std::deque<Op>& pending = queues_[static_cast<size_t>(q)].pending;
      NANOVLLM_ASSERT(!pending.empty(), "offload device: event ", e, " record ", generation, " is not queued");
      const Op op = pending.front();
      pending.pop_front();
      execute(op);
    }
  }

  void run_all() {
    for (bool again = true; again;) {
      again = false;
      for (QueueState& s : queues_) {
        while (!s.pending.empty()) {
          const Op op = s.pending.front();
          s.pending.pop_front();
          execute(op);
          again = true;
        }
      }
    }
  }

  CpuOffloadDeviceOptions opt_;
  std::vector<QueueState> queues_;
  std::vector<EventState> events_;
  std::deque<Access> history_;
};

}  // namespace

std::unique_ptr<OffloadDevice> make_cpu_offload_device(CpuOffloadDeviceOptions options) {
  return std::make_unique<CpuOffloadDevice>(options);
}

}  // namespace nanovllm
