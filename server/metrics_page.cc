#include "server/metrics_page.h"

#include <sys/statvfs.h>

#include "absl/time/clock.h"
#include "metrics/process.h"
#include "metrics/text_format.h"
#include "util/build_info.h"

namespace stagger::server {

namespace {

// The drain to the cold store (server/tier/drainer.h).
void WriteDrainMetrics(metrics::TextWriter& w, const tier::DrainerStats& d) {
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  w.Gauge("stagger_server_drain_steps_behind",
          "Complete steps not yet in the cold store (as of the drain's last "
          "pass).",
          static_cast<double>(d.steps_behind));
  w.Gauge("stagger_server_drain_behind_seconds",
          "Age of the oldest complete step not yet in the cold store (0: "
          "none behind).",
          d.oldest_behind_unix_ms > 0
              ? static_cast<double>(now_ms - d.oldest_behind_unix_ms) / 1e3
              : 0.0);
  w.Gauge("stagger_server_drain_up",
          "1 when the drain's last pass reached the cold store without "
          "error.",
          d.last_error.empty() ? 1.0 : 0.0);
  w.Counter("stagger_server_drain_steps_total",
            "Steps copied to the cold store since start.", d.steps_drained);
  w.Counter("stagger_server_drain_chunks_total",
            "Chunk objects written to the cold store since start.",
            d.chunks_written);
  w.Counter("stagger_server_drain_bytes_total",
            "Bytes written to the cold store since start.", d.bytes_written);
  w.Counter("stagger_server_drain_failed_passes_total",
            "Drain passes that failed (the cold store unreachable or "
            "refusing); the drain retries with backoff.",
            d.failed_passes);
  w.Counter("stagger_server_cold_gc_steps_deleted_total",
            "Steps deleted from the cold store by --rados-keep.",
            d.gc_steps_deleted);
  w.Counter("stagger_server_cold_gc_bytes_freed_total",
            "Chunk bytes deleted from the cold store by --rados-keep.",
            d.gc_bytes_freed);
  w.Counter("stagger_server_cold_steps_forgotten_total",
            "Steps this server held only in the cold store (imported) that "
            "were deleted there, and so are no longer listed.",
            d.cold_steps_forgotten);
  w.Counter("stagger_server_cold_steps_imported_total",
            "Steps imported from the cold store (held there, not on this "
            "server's disk): at start and by the periodic --cold-import-s.",
            d.cold_steps_imported);
  w.Counter("stagger_server_drain_busy_wait_seconds_total",
            "Time the drain waited for client traffic to pass.", d.busy_wait_s);
}

// The memory tier (server/memory_tier.h).
void WriteMemoryMetrics(metrics::TextWriter& w, const MemoryTier::Stats& m) {
  w.Gauge("stagger_server_memory_limit_bytes",
          "The memory tier's bound (--memory-bytes).",
          static_cast<double>(m.limit_bytes));
  w.Gauge("stagger_server_memory_bytes", "Chunk bytes held in the memory tier.",
          static_cast<double>(m.bytes));
  w.Gauge("stagger_server_memory_only_bytes",
          "Chunk bytes held in memory and not yet written to disk.",
          static_cast<double>(m.memory_only_bytes));
  w.Gauge("stagger_server_memory_chunks", "Chunks held in the memory tier.",
          static_cast<double>(m.chunks));
  // A bounded page: the first kMaxJobRows jobs by name, the rest summed.
  constexpr size_t kMaxJobRows = 64;
  MemoryTier::JobUsage other;
  size_t rows = 0;
  auto row = [&w](const std::string& job, const MemoryTier::JobUsage& u) {
    const metrics::Labels l = {{"job", job}};
    w.Gauge("stagger_server_job_memory_bytes",
            "Chunk bytes of the job held in the memory tier.",
            static_cast<double>(u.bytes), l);
    w.Gauge("stagger_server_job_memory_only_bytes",
            "Chunk bytes of the job in memory and not yet on disk.",
            static_cast<double>(u.memory_only_bytes), l);
  };
  for (const auto& [job, u] : m.jobs) {
    if (rows++ < kMaxJobRows) {
      row(job, u);
    } else {
      other.bytes += u.bytes;
      other.memory_only_bytes += u.memory_only_bytes;
    }
  }
  if (rows > kMaxJobRows) row("(other)", other);
  w.Counter("stagger_server_memory_puts_total",
            "Puts acknowledged once held in memory (durability \"memory\").",
            static_cast<double>(m.held_total));
  w.Counter("stagger_server_memory_puts_refused_total",
            "Memory puts that did not fit and were stored on disk first.",
            static_cast<double>(m.refused_total));
  w.Counter("stagger_server_memory_evictions_total",
            "Chunks on disk dropped from memory to make room.",
            static_cast<double>(m.evicted_total));
  w.Counter("stagger_server_memory_reads_total",
            "Chunk reads served from memory.",
            static_cast<double>(m.reads_total));
  w.Counter("stagger_server_write_behind_chunks_total",
            "Chunks written from memory to disk.",
            static_cast<double>(m.written_total));
  w.Counter("stagger_server_write_behind_failures_total",
            "Writes from memory to disk that failed (tried again).",
            static_cast<double>(m.write_failures_total));
}

}  // namespace

std::string RenderServerMetrics(const MetricsSources& s) {
  metrics::TextWriter w;
  metrics::WriteStandardFamilies(w, "server", Version(), FormatVersion());
  if (s.data != nullptr) {
    // Per job, at most JobCounters::kMaxJobs rows (then "(other)").
    for (const auto& [job, b] : s.data->job_counters().Snapshot()) {
      const metrics::Labels l = {{"job", job}};
      w.Counter("stagger_server_job_received_bytes_total",
                "Chunk payload bytes taken in from clients, per job.",
                static_cast<double>(b.received), l);
      w.Counter("stagger_server_job_written_bytes_total",
                "Chunk payload bytes stored durable, per job.",
                static_cast<double>(b.written), l);
      w.Counter("stagger_server_job_read_bytes_total",
                "Chunk payload bytes sent to readers, per job.",
                static_cast<double>(b.read), l);
    }
  }
  if (s.data != nullptr) {
    const DataServiceCounters& c = s.data->counters();
    w.Counter("stagger_server_received_bytes_total",
              "Chunk payload bytes taken in from clients (put requests).",
              c.bytes_received.load());
    w.Counter("stagger_server_written_bytes_total",
              "Chunk payload bytes stored and acknowledged durable.",
              c.bytes_written.load());
    w.Counter("stagger_server_chunks_written_total",
              "Chunks stored and acknowledged durable.",
              c.chunks_written.load());
    w.Counter("stagger_server_chunks_deduplicated_total",
              "Chunks put that were already stored (acknowledged, not "
              "written again).",
              c.chunks_deduplicated.load());
    w.Counter("stagger_server_read_bytes_total",
              "Chunk payload bytes sent to readers (load, restore, verify).",
              c.bytes_read.load());
    w.Counter("stagger_server_chunks_read_total", "Chunks sent to readers.",
              c.chunks_read.load());
    w.Counter("stagger_server_ranges_read_total",
              "Parts of chunks sent to readers, decoded here (resharding "
              "loads).",
              c.ranges_read.load());
    const DecodedChunks::Stats rc = s.data->range_cache_stats();
    w.Counter("stagger_server_range_decodes_total",
              "Chunks read and decoded for range reads.",
              static_cast<double>(rc.decodes));
    w.Counter("stagger_server_range_cache_hits_total",
              "Range reads of a chunk already decoded (or being decoded) "
              "for another.",
              static_cast<double>(rc.hits));
    w.Gauge("stagger_server_range_cache_bytes",
            "Bytes of decoded chunks kept for range reads.",
            static_cast<double>(rc.bytes));
    w.Counter("stagger_server_verify_failures_total",
              "Reads that found a stored record failing its checksums.",
              c.verify_failures.load());
    w.Counter("stagger_server_bad_requests_total",
              "Data-plane requests refused as malformed or inconsistent.",
              c.bad_requests.load());
    w.Gauge("stagger_server_puts_in_flight",
            "Put requests taken in and not yet answered (saves being "
            "written).",
            static_cast<double>(c.puts_in_flight.load()));
  }
  if (s.control != nullptr) {
    const ControlCounters& c = s.control->counters();
    w.Counter("stagger_server_shard_commits_total",
              "Rank manifests committed (CommitShard calls accepted).",
              c.shard_commits.load());
    w.Counter("stagger_server_steps_completed_total",
              "Commits that completed a step (every rank committed).",
              c.steps_completed.load());
    w.Counter("stagger_server_commit_failures_total",
              "CommitShard calls refused (missing chunks, bad manifest).",
              c.failed_commits.load());
    w.Counter("stagger_server_manifest_log_failures_total",
              "Commits or gcs whose manifest log (--rebuild-index) could not "
              "be written; the commit stands.",
              c.manifest_log_failures.load());
  }
  if (s.control_calls != nullptr) {
    for (const auto& [method, n] : s.control_calls->Counts()) {
      w.Counter("stagger_server_control_calls_total",
                "Control-plane (gRPC) calls taken, by method.",
                static_cast<double>(n), {{"method", method}});
    }
  }
  if (s.drainer != nullptr) WriteDrainMetrics(w, s.drainer->stats());
  if (s.memory != nullptr) WriteMemoryMetrics(w, s.memory->stats());
  if (s.promoter != nullptr) {
    const PromoterStats p = s.promoter->stats();
    w.Counter("stagger_server_memory_shards_promoted_total",
              "Memory-level shards this coordinator made disk-level itself "
              "(their chunks confirmed on the servers' disks).",
              static_cast<double>(p.promoted));
    w.Counter("stagger_server_memory_shards_dropped_total",
              "Memory-level shards set aside at start whose chunks were on "
              "no server's disk: dropped.",
              static_cast<double>(p.dropped));
    w.Gauge("stagger_server_memory_shards_pending",
            "Memory-level shards this coordinator waits to confirm on disk "
            "(set aside at start, or not yet written behind).",
            static_cast<double>(p.pending));
    w.Gauge("stagger_server_memory_shards_degraded",
            "Of those, shards with a chunk on fewer disks than its copies "
            "(being repaired: copied from a server holding it).",
            static_cast<double>(p.degraded));
    w.Counter("stagger_server_memory_chunks_repaired_total",
              "Chunk copies the promoter made for degraded memory-level "
              "shards (ReadRecords from a holder, StoreRecords elsewhere).",
              static_cast<double>(p.chunks_repaired));
    w.Counter("stagger_server_promoter_flush_calls_total",
              "Flush calls the promoter made to servers.",
              static_cast<double>(p.flush_calls));
  }
  if (s.rebaser != nullptr) {
    const RebaserStats r = s.rebaser->Stats();
    w.Counter("stagger_server_rebased_chunks_total",
              "Delta chunks written whole with their base made a delta of "
              "them (server/rebaser.h).",
              r.rebased);
    w.Counter("stagger_server_rebase_keyframes_total",
              "Delta chunks written whole with their base left as it was "
              "(a keyframe, or a base that was no smaller as a delta).",
              r.keyframes);
    w.Counter("stagger_server_rebase_bases_moved_total",
              "Previous versions left as they were and copied out of the "
              "short-lived segment a save stored them in, so that it dies "
              "whole (server/README.md, record lifetimes).",
              r.moved);
    w.Counter("stagger_server_rebase_failures_total",
              "Rebases that failed or lost a race (the chunk stays a delta "
              "of its previous version) or found the queue full.",
              r.failed + r.aborted + r.dropped);
    w.Counter("stagger_server_rebase_bytes_written_total",
              "Record payload bytes the rebases wrote.", r.bytes_written);
    w.Gauge("stagger_server_rebase_queue_chunks",
            "Delta chunks waiting for a rebase.",
            static_cast<double>(r.queued));
  }
  if (s.segments != nullptr) {
    const SegmentStoreStats st = s.segments->Stats();
    w.Counter("stagger_server_records_written_total",
              "Records written to segments and synced.", st.records_written);
    w.Counter("stagger_server_segment_bytes_written_total",
              "Segment bytes written and synced (records with their headers "
              "and padding).",
              st.bytes_written);
    w.Counter("stagger_server_commit_batches_total",
              "Group commits of the segment writer.", st.batches);
    w.Counter("stagger_server_commit_batches_failed_total",
              "Group commits that failed (their appends got the error).",
              st.failed_batches);
    w.Gauge("stagger_server_write_queue_appends",
            "Appends waiting for the segment writer.",
            static_cast<double>(st.queued));
    w.Gauge("stagger_server_io_requests_in_flight",
            "Disk requests submitted and not completed (the io_uring queue "
            "depth in use), writes and reads.",
            static_cast<double>(st.io_in_flight));
    w.Histogram("stagger_server_write_seconds",
                "Time to write one group commit's records (io_uring, all "
                "writes in flight).",
                st.write_seconds);
    w.Histogram("stagger_server_fsync_seconds",
                "Time of one fdatasync of a segment.", st.sync_seconds);
  }
  if (s.admission != nullptr) {
    const AdmissionStats a = s.admission->Stats();
    w.Gauge("stagger_server_ingest_budget_bytes",
            "Admission budget: client bytes allowed in flight inside the "
            "server.",
            static_cast<double>(a.budget_bytes));
    w.Gauge("stagger_server_ingest_in_flight_bytes",
            "Admission credit in use (pulled or being read, not yet "
            "written or sent).",
            static_cast<double>(a.in_flight_bytes));
    w.Gauge("stagger_server_ingest_queue_depth",
            "Requests waiting for admission credit.",
            static_cast<double>(a.queue_depth - a.restore_queue_depth),
            {{"class", "checkpoint"}});
    w.Gauge("stagger_server_ingest_queue_depth",
            "Requests waiting for admission credit.",
            static_cast<double>(a.restore_queue_depth), {{"class", "restore"}});
    w.Counter(
        "stagger_server_ingest_grants_total", "Admission grants since start.",
        static_cast<double>(a.checkpoint_grants), {{"class", "checkpoint"}});
    w.Counter("stagger_server_ingest_grants_total",
              "Admission grants since start.",
              static_cast<double>(a.restore_grants), {{"class", "restore"}});
    for (const auto& [client, c] : a.clients) {
      const std::string id = std::to_string(client);
      w.Gauge("stagger_server_client_credit_bytes",
              "Admission credit held by one client connection.",
              static_cast<double>(c.in_flight_bytes), {{"client", id}});
      w.Gauge("stagger_server_client_queued_requests",
              "Requests of one client connection waiting for credit.",
              static_cast<double>(c.queued), {{"client", id}});
    }
  }
  if (!s.data_dir.empty()) {
    struct statvfs v;
    if (::statvfs(s.data_dir.c_str(), &v) == 0) {
      w.Gauge("stagger_server_disk_free_bytes",
              "Bytes available to the server on its data directory's "
              "filesystem.",
              static_cast<double>(v.f_bavail) * v.f_frsize);
      w.Gauge("stagger_server_disk_size_bytes",
              "Size of the data directory's filesystem.",
              static_cast<double>(v.f_blocks) * v.f_frsize);
    }
  }
  return w.text();
}

}  // namespace stagger::server
