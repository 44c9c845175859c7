// The Python binding: stagger._stagger, re-exported by stagger/__init__.py.
//
//   ck = stagger.Checkpointer(servers="embedded:/tmp/c", job="j", rank=0,
//                             world_size=1)
//   h = ck.save({"w": numpy_array}, step=5); h.wait(); h.stats()
//   ck.load({"w": out_array}, step="latest")  -> step loaded
//   ck.save({"w": rows}, step=5, shards={"w": ([1024, 512], [256, 0])})
//   ck.steps()                                -> [complete steps]
//
// Arrays travel without a copy (tensors.h: buffer protocol, CUDA array
// interface, DLPack); they must be C-contiguous (and writable for load). A
// bad status raises stagger.Error with .code (e.g. "NOT_FOUND") and the
// status message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/python/tensors.h"
#include "stagger/checkpointer.h"

namespace py = pybind11;

namespace stagger {
namespace {

using python::Check;
using python::Held;
using python::Raise;
using python::RegisterAll;

int64_t ParseStep(const py::object& step) {
  if (py::isinstance<py::str>(step)) {
    if (step.cast<std::string>() == "latest") return kLatestStep;
    Raise(absl::InvalidArgumentError("step must be an int >= 0 or \"latest\""));
  }
  int64_t s = step.cast<int64_t>();
  if (s < 0) {
    Raise(
        absl::InvalidArgumentError(absl::StrCat("step must be >= 0, got ", s)));
  }
  return s;
}

// `with ck.collective():` marks a collective for its block.
struct CollectiveContext {
  Checkpointer* ck;
  py::object owner;  // keeps the Checkpointer alive
};

struct PySaveHandle {
  SaveHandle handle;
  std::shared_ptr<Held> held;
};

// How long a blocking call holds the GIL released before it looks for
// signals again: Ctrl-C raises KeyboardInterrupt within about this long.
constexpr absl::Duration kSignalSlice = absl::Milliseconds(100);

// Runs `step(slice)` with the GIL released, in slices of at most
// kSignalSlice, until it returns true or `timeout` (None: no limit; else
// seconds >= 0) has passed; between slices it runs Python's signal handlers,
// so Ctrl-C raises KeyboardInterrupt (what is being waited for goes on).
// Returns whether `step` returned true.
bool WaitInSlices(const py::object& timeout,
                  const std::function<bool(absl::Duration)>& step) {
  absl::Duration limit = absl::InfiniteDuration();
  if (!timeout.is_none()) {
    const double s = timeout.cast<double>();
    if (!(s >= 0) || !std::isfinite(s)) {
      throw py::value_error("timeout must be None or a number of seconds >= 0");
    }
    limit = absl::Seconds(s);
  }
  const absl::Time until = absl::Now() + limit;
  for (;;) {
    const absl::Duration left = until - absl::Now();
    bool done;
    {
      py::gil_scoped_release release;
      done = step(std::max(absl::ZeroDuration(), std::min(kSignalSlice, left)));
    }
    if (done) return true;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (absl::Now() >= until) return false;
  }
}

// Runs ck.Load(step) on a thread of its own and waits for it in slices.
// On Ctrl-C the load is cancelled (no new fetches), waited for (the fetches
// in flight end within about a chunk's transfer) and KeyboardInterrupt is
// raised; the arrays then hold partial data.
Result<int64_t> LoadInterruptibly(Checkpointer& ck, int64_t step) {
  struct Run {
    absl::Mutex mu;
    bool done = false;
    Result<int64_t> result = absl::UnknownError("unset");
  };
  Run run;
  std::atomic<bool> cancel{false};
  std::thread t([&] {
    Result<int64_t> r = ck.Load(step, cancel);
    absl::MutexLock lock(&run.mu);
    run.result = std::move(r);
    run.done = true;
  });
  auto finished = [&](absl::Duration d) {
    absl::MutexLock lock(&run.mu);
    return run.mu.AwaitWithTimeout(absl::Condition(&run.done), d);
  };
  try {
    WaitInSlices(py::none(), finished);
  } catch (...) {
    {
      py::gil_scoped_release release;
      cancel = true;
      t.join();
    }
    throw;
  }
  t.join();
  return std::move(run.result);
}

}  // namespace
}  // namespace stagger

namespace stagger {
namespace {

py::dict StatsDict(const SaveStats& s) {
  py::dict d;
  d["stall_s"] = s.stall_s;
  d["durable_s"] = s.durable_s;
  d["bytes_raw"] = s.bytes_raw;
  d["bytes_shipped"] = s.bytes_shipped;
  d["chunks"] = s.chunks;
  d["snapshot_s"] = s.snapshot_s;
  d["staging_bytes"] = s.staging_bytes;
  d["staging_pool_bytes"] = s.staging_pool_bytes;
  d["staging_limited"] = s.staging_limited;
  d["bytes_overlapped"] = s.bytes_overlapped;
  d["peak_chunks_shipping"] = s.peak_chunks_shipping;
  d["chunks_unchanged"] = s.chunks_unchanged;
  d["chunks_delta"] = s.chunks_delta;
  d["bytes_snapshotted"] = s.bytes_snapshotted;
  d["yield_s"] = s.yield_s;
  d["cpu_yield_s"] = s.cpu_yield_s;
  d["paced_rate_Bps"] = s.paced_rate_Bps;
  d["windows"] = s.windows;
  d["late_s"] = s.late_s;
  py::dict mix;
  for (const auto& [name, n] : s.codec_chunks) mix[py::str(name)] = n;
  d["codec_chunks"] = mix;
  py::dict reasons;
  for (const auto& [name, n] : s.codec_reasons) {
    reasons[py::str(name)] = n;
  }
  d["codec_reasons"] = reasons;
  d["chunks_no_base"] = s.chunks_no_base;
  return d;
}

py::dict MetricsDict(const ClientMetrics& m) {
  py::dict d;
  d["saves"] = m.saves;
  d["saves_failed"] = m.saves_failed;
  d["stall_s"] = m.stall_s;
  d["last_stall_s"] = m.last_stall_s;
  d["callers_waiting"] = m.callers_waiting;
  d["snapshot_s"] = m.snapshot_s;
  d["durable_s"] = m.durable_s;
  d["last_durable_s"] = m.last_durable_s;
  d["bytes_raw"] = m.bytes_raw;
  d["bytes_shipped"] = m.bytes_shipped;
  d["chunks"] = m.chunks;
  d["chunks_unchanged"] = m.chunks_unchanged;
  d["yield_s"] = m.yield_s;
  d["saves_late"] = m.saves_late;
  d["late_s"] = m.late_s;
  d["loads"] = m.loads;
  d["loads_failed"] = m.loads_failed;
  d["bytes_loaded"] = m.bytes_loaded;
  d["load_manifest_bytes"] = m.load_manifest_bytes;
  d["last_load_plan_s"] = m.last_load_plan_s;
  d["last_load_manifests"] = m.last_load_manifests;
  d["servers_down"] = m.servers_down;
  d["servers_cross_memory"] = m.servers_cross_memory;
  d["staging_pool_bytes"] = m.staging_pool_bytes;
  d["staging_prefaulted_bytes"] = m.staging_prefaulted_bytes;
  d["gate_learned"] = m.gate_learned;
  d["gate_period_s"] = m.gate_period_s;
  d["gate_models_learned"] = m.gate_models_learned;
  d["gate_models_dropped"] = m.gate_models_dropped;
  return d;
}

std::unique_ptr<Checkpointer> OpenCheckpointer(
    const std::string& servers, const std::string& job, uint32_t rank,
    uint32_t world_size, uint64_t chunk_size, const std::string& codec,
    uint64_t staging_bytes, int max_outstanding_saves, bool fail_when_busy,
    bool adaptive_codec, double qos_deadline_s, double qos_floor_Bps,
    double qos_max_Bps, double qos_stagger, uint32_t ranks_per_node,
    const std::string& qos_yield, double qos_yield_floor_Bps,
    double rate_limit_Bps, double node_rate_limit_Bps,
    const std::string& node_rate_limit_file, const std::string& metrics_listen,
    const std::string& tls_ca_file, uint32_t replicas, const std::string& token,
    const std::string& snapshot_overlap, double server_wait_s,
    const std::string& durability, const std::string& background_cpu,
    int pipeline_threads) {
  CheckpointerOptions o;
  o.servers = servers;
  o.job = job;
  o.rank = rank;
  o.world_size = world_size;
  o.chunk_size = chunk_size;
  o.codec = Check(ParseCodecChoice(codec));
  o.staging_bytes = staging_bytes;
  o.max_outstanding_saves = max_outstanding_saves;
  o.fail_when_busy = fail_when_busy;
  o.adaptive_codec = adaptive_codec;
  o.qos_deadline_s = qos_deadline_s;
  o.qos_floor_Bps = qos_floor_Bps;
  o.qos_max_Bps = qos_max_Bps;
  o.qos_stagger = qos_stagger;
  o.ranks_per_node = ranks_per_node;
  o.qos_yield = Check(ParseQosYield(qos_yield));
  o.qos_yield_floor_Bps = qos_yield_floor_Bps;
  o.rate_limit_Bps = rate_limit_Bps;
  o.node_rate_limit_Bps = node_rate_limit_Bps;
  o.node_rate_limit_file = node_rate_limit_file;
  o.metrics_listen = metrics_listen;
  o.tls_ca_file = tls_ca_file;
  o.replicas = replicas;
  o.token = token;
  o.snapshot_overlap = Check(ParseSnapshotOverlap(snapshot_overlap));
  o.server_wait_s = server_wait_s;
  o.durability = Check(ParseDurability(durability));
  o.background_cpu = Check(ParseBackgroundCpu(background_cpu));
  o.pipeline_threads = pipeline_threads;
  if (o.durability == Durability::kDefault) {
    Check(absl::InvalidArgumentError(
        "durability 'default' names a save's, not a Checkpointer's: "
        "\"disk\" or \"memory\""));
  }
  Result<std::unique_ptr<Checkpointer>> ck;
  {
    py::gil_scoped_release release;
    ck = Checkpointer::Open(o);
  }
  return Check(std::move(ck));
}

PySaveHandle SaveArrays(py::object self, const py::dict& tensors, int64_t step,
                        bool lazy, const py::dict& dtypes,
                        uintptr_t cuda_stream, double deadline_s,
                        const py::dict& shards, const std::string& durability) {
  const Durability d = Check(ParseDurability(durability));
  Checkpointer& ck = self.cast<Checkpointer&>();
  // A save in flight holds this one back: wait for it here, where
  // Ctrl-C is seen.
  WaitInSlices(py::none(), [&](absl::Duration d) { return ck.WaitForRoom(d); });
  auto held = std::make_shared<Held>();
  RegisterAll(ck, tensors, false, dtypes, shards, held.get());
  Result<SaveHandle> h = absl::UnknownError("unset");
  {
    py::gil_scoped_release release;
    SaveOptions so;
    so.lazy = lazy;
    so.cuda_stream = reinterpret_cast<void*>(cuda_stream);
    so.deadline_s = deadline_s;
    so.durability = d;
    h = ck.Save(step, so);
  }
  ck.ClearRegistrations();
  PySaveHandle handle{Check(std::move(h)), held};
  // Lazy: the copies still read the arrays; keep them alive until
  // before_update() even if the caller drops the handle.
  if (lazy) self.attr("_pending_snapshot") = py::cast(handle);
  return handle;
}

std::vector<int64_t> StepNumbers(Checkpointer& ck, bool include_partial) {
  // On a thread of the Checkpointer's, waited for in slices:
  // Ctrl-C raises at once, and the call finishes on its own.
  struct Call {
    absl::Mutex mu;
    bool done = false;
    Result<std::vector<StepSummary>> result = absl::UnknownError("unset");
  };
  auto call = std::make_shared<Call>();
  ck.StepsAsync(include_partial, [call](Result<std::vector<StepSummary>> r) {
    absl::MutexLock lock(&call->mu);
    call->result = std::move(r);
    call->done = true;
  });
  WaitInSlices(py::none(), [&](absl::Duration d) {
    absl::MutexLock lock(&call->mu);
    return call->mu.AwaitWithTimeout(absl::Condition(&call->done), d);
  });
  Result<std::vector<StepSummary>> r = [&] {
    absl::MutexLock lock(&call->mu);
    return std::move(call->result);
  }();
  std::vector<int64_t> out;
  for (const StepSummary& s : Check(std::move(r))) {
    out.push_back(s.step);
  }
  return out;
}

void BindCollective(py::module_& m) {
  py::class_<CollectiveContext>(m, "CollectiveContext")
      .def("__enter__",
           [](CollectiveContext& c) {
             c.ck->CollectiveBegin();
             return &c;
           })
      .def("__exit__", [](CollectiveContext& c, py::args) {
        c.ck->CollectiveEnd();
        return false;
      });
}

void BindSaveHandle(py::module_& m) {
  py::class_<PySaveHandle>(m, "SaveHandle")
      .def(
          "wait",
          [](PySaveHandle& h, const py::object& timeout) {
            std::optional<Status> outcome;
            const bool done = WaitInSlices(timeout, [&](absl::Duration d) {
              outcome = h.handle.Wait(d);
              return outcome.has_value();
            });
            if (done) Check(*outcome);
            return done;
          },
          py::arg("timeout") = py::none(),
          "Block until this rank's part of the step is durable (True) or "
          "failed (raises), or until `timeout` seconds have passed (False; "
          "the save goes on). The step is complete once every rank of "
          "world_size committed its part: Checkpointer.wait_step(step). "
          "Ctrl-C raises KeyboardInterrupt within about 0.1 s and leaves "
          "the save running in the background; the handle stays usable.")
      .def("done", [](PySaveHandle& h) { return h.handle.Done(); })
      .def_property_readonly("step",
                             [](PySaveHandle& h) { return h.handle.step(); })
      .def("stats",
           [](PySaveHandle& h) { return StatsDict(h.handle.stats()); });
}

using PyCheckpointer = py::class_<Checkpointer>;

// Opening, metrics and the QoS marks.
void BindCheckpointerSetup(PyCheckpointer& c) {
  c.def(py::init(&OpenCheckpointer), py::arg("servers"), py::arg("job"),
        py::arg("rank") = 0, py::arg("world_size") = 1,
        py::arg("chunk_size") = 4u << 20, py::arg("codec") = "auto",
        py::arg("staging_bytes") = 0, py::arg("max_outstanding_saves") = 1,
        py::arg("fail_when_busy") = false, py::arg("adaptive_codec") = true,
        py::arg("qos_deadline_s") = 0.0,
        py::arg("qos_floor_Bps") = double(1 << 20),
        py::arg("qos_max_Bps") = 0.0, py::arg("qos_stagger") = 0.5,
        py::arg("ranks_per_node") = 0, py::arg("qos_yield") = "learn",
        py::arg("qos_yield_floor_Bps") = 0.0, py::arg("rate_limit_Bps") = 0.0,
        py::arg("node_rate_limit_Bps") = 0.0,
        py::arg("node_rate_limit_file") = "", py::arg("metrics_listen") = "",
        py::arg("tls_ca_file") = "", py::arg("replicas") = 1,
        py::arg("token") = "", py::arg("snapshot_overlap") = "auto",
        py::arg("server_wait_s") = 5.0, py::arg("durability") = "disk",
        py::arg("background_cpu") = "idle", py::arg("pipeline_threads") = 0,
        "Options as in stagger/options.h (CheckpointerOptions).")
      .def(
          "metrics_address",
          [](Checkpointer& ck) { return ck.MetricsAddress(); },
          "host:port of the metrics page (metrics_listen), or ''.")
      .def(
          "metrics", [](Checkpointer& ck) { return MetricsDict(ck.Metrics()); },
          "Counters since this Checkpointer opened: saves, stall, snapshot "
          "and durable seconds, bytes raw and shipped, chunks, QoS yield, "
          "late saves, loads (also served at metrics_listen).")
      .def(
          "collective_begin", [](Checkpointer& ck) { ck.CollectiveBegin(); },
          "Mark the start of a collective (checkpoint traffic yields).")
      .def(
          "collective_end", [](Checkpointer& ck) { ck.CollectiveEnd(); },
          "Mark the end of a collective.")
      .def(
          "iteration_begin", [](Checkpointer& ck) { ck.IterationBegin(); },
          "Mark the start of a training iteration (the QoS gate learns the "
          "iteration's busy phases from these marks).")
      .def(
          "collective",
          [](py::object self) {
            return CollectiveContext{&self.cast<Checkpointer&>(), self};
          },
          "Context manager marking a collective: `with ck.collective(): "
          "all_reduce(...)`.");
}

// Saves, loads and the waits.
void BindCheckpointerData(PyCheckpointer& c) {
  c.def("save", &SaveArrays, py::arg("tensors"), py::arg("step"),
        py::arg("lazy") = false, py::arg("dtypes") = py::dict(),
        py::arg("cuda_stream") = 0, py::arg("deadline_s") = -1.0,
        py::arg("shards") = py::dict(), py::arg("durability") = "default",
        "Snapshot the arrays as `step` and save them in the background. "
        "Returns once the snapshot is taken (lazy=True: once the copies are "
        "queued; call before_update() before modifying the arrays). "
        "shards={name: (global_shape, global_offset)}: the slice of a "
        "global tensor an array holds (global_shape == shape: replicated, "
        "stored once by rank 0); without an entry the array is per-rank.")
      .def(
          "prepare",
          [](py::object self, const py::dict& tensors, const py::dict& dtypes,
             const py::dict& shards, bool background) {
            Checkpointer& ck = self.cast<Checkpointer&>();
            Held held;
            // Registering asks for a background preparation by itself.
            RegisterAll(ck, tensors, false, dtypes, shards, &held);
            Status s;
            if (!background) {
              py::gil_scoped_release release;
              s = ck.PrepareStaging();
            }
            ck.ClearRegistrations();
            Check(s);
          },
          py::arg("tensors"), py::arg("dtypes") = py::dict(),
          py::arg("shards") = py::dict(), py::arg("background") = false,
          "Size the staging memory for these arrays and fault it in, so "
          "that the first save() of them does not pay for it: now, or with "
          "background=True on a thread of the Checkpointer's (at idle "
          "priority), returning at once; a save() meanwhile stops it and "
          "its copies fault in the rest. Arguments as save().")
      .def(
          "before_update",
          [](py::object self) {
            Checkpointer& ck = self.cast<Checkpointer&>();
            Status s;
            // Ctrl-C raises here; the snapshot goes on and its arrays stay
            // held (_pending_snapshot) until a later call sees it done.
            WaitInSlices(py::none(), [&](absl::Duration d) {
              std::optional<Status> r = ck.BeforeUpdate(d);
              if (r) s = *r;
              return r.has_value();
            });
            if (py::hasattr(self, "_pending_snapshot")) {
              py::delattr(self, "_pending_snapshot");
            }
            Check(s);
          },
          "Block until the last save's snapshot is complete.")
      .def(
          "wait_all",
          [](Checkpointer& ck, const py::object& timeout) {
            return WaitInSlices(
                timeout, [&](absl::Duration d) { return ck.WaitAll(d); });
          },
          py::arg("timeout") = py::none(),
          "Block until every save in flight has finished (True), or until "
          "`timeout` seconds have passed (False). Meanwhile saves stop "
          "yielding to predicted collectives (the training loop is taken to "
          "be stopped); h.wait() does not. Ctrl-C raises KeyboardInterrupt "
          "within about 0.1 s; the saves go on.")
      .def(
          "wait_disk",
          [](Checkpointer& ck, const py::object& timeout) {
            Status s;
            const bool done = WaitInSlices(timeout, [&](absl::Duration d) {
              s = ck.WaitDisk(d);
              return !absl::IsDeadlineExceeded(s);
            });
            if (!done) return false;
            Check(s);
            return true;
          },
          py::arg("timeout") = py::none(),
          "Block until every save with durability=\"memory\" finished so "
          "far is disk-level (True), or until `timeout` seconds have passed "
          "(False). Raises stagger.Error for one that could not be made "
          "disk-level (it stays memory-level: too few copies on disk).")
      .def(
          "load",
          [](Checkpointer& ck, const py::dict& tensors, const py::object& step,
             const py::dict& dtypes, const py::dict& shards) {
            int64_t s = ParseStep(step);
            Held held;
            RegisterAll(ck, tensors, true, dtypes, shards, &held);
            Result<int64_t> r = LoadInterruptibly(ck, s);
            ck.ClearRegistrations();
            return Check(std::move(r));
          },
          py::arg("tensors"), py::arg("step") = "latest",
          py::arg("dtypes") = py::dict(), py::arg("shards") = py::dict(),
          "Load `step` (or \"latest\") into the arrays, in place; returns the "
          "step loaded. Ctrl-C stops it within about a chunk's transfer and "
          "raises KeyboardInterrupt (the arrays then hold partial data). "
          "shards={name: (global_shape, global_offset)} gives "
          "the slice each array wants, which may differ from how the step "
          "was saved (resharding).")
      .def(
          "last_load_from_other_ranks",
          [](const Checkpointer& ck) {
            py::dict d;
            for (const auto& [name, rank] : ck.LastLoadFromOtherRanks()) {
              d[py::str(name)] = rank;
            }
            return d;
          },
          "{name: rank}: the per-rank arrays (loaded without shards=) that "
          "the last load filled from another rank's save. A rank the saving "
          "job did not have gets the lowest saved rank's.")
      .def("steps", &StepNumbers, py::arg("include_partial") = false)
      .def(
          "wait_step",
          [](Checkpointer& ck, int64_t step, const py::object& timeout) {
            // One look at the steps, then looks further apart (up to 1 s):
            // every rank of a large job may be waiting.
            Status s;
            absl::Time next = absl::InfinitePast();
            absl::Duration pause = absl::Milliseconds(20);
            const bool done = WaitInSlices(timeout, [&](absl::Duration d) {
              const absl::Time now = absl::Now();
              if (now < next) {
                absl::SleepFor(std::min(d, next - now));
                return false;
              }
              s = ck.WaitStep(step, absl::ZeroDuration());
              next = now + pause;
              pause = std::min(2 * pause, absl::Seconds(1));
              return !absl::IsDeadlineExceeded(s);
            });
            if (done) {
              Check(s);
              return true;
            }
            PyErr_SetString(PyExc_TimeoutError,
                            std::string(s.message()).c_str());
            throw py::error_already_set();
          },
          py::arg("step"), py::arg("timeout") = py::none(),
          "Block until every rank of world_size committed `step` (True): it "
          "is then complete, listed by steps() and loaded as \"latest\". "
          "h.wait() only says this rank's part is durable. Raises "
          "TimeoutError after `timeout` seconds, naming the ranks missing (a "
          "rank that did not save the step, or a world_size that is not the "
          "job's); stagger.Error when the steps cannot be listed.");
}

}  // namespace
}  // namespace stagger

PYBIND11_MODULE(_stagger, m) {
  using namespace stagger;
  m.doc() = "stagger: checkpoints for deep-learning training";
  // Debian's Abseil is built without NDEBUG: every absl::Mutex (ours and
  // gRPC's) would record lock orders in a process-wide graph under one
  // global lock, CPU taken from the trainer on every call. A training
  // process has no use for that check (server/main.cc does the same).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  python::ErrorType() = py::reinterpret_steal<py::object>(
      PyErr_NewException("stagger.Error", PyExc_RuntimeError, nullptr));
  m.attr("Error") = python::ErrorType();
  BindCollective(m);
  BindSaveHandle(m);
  PyCheckpointer checkpointer(m, "Checkpointer", py::dynamic_attr());
  BindCheckpointerSetup(checkpointer);
  BindCheckpointerData(checkpointer);
}
