// DataService: the server's data-plane request handler. PutChunk requests
// go to the SegmentStore (group-committed, fdatasynced) and then into the
// chunk index; the reply is sent only after both. GetChunk requests are
// read and verified on an executor thread and answered with the record.
//
// Nothing in a request is trusted: names, lengths and the payload checksum
// are checked before anything is written. A chunk already stored for the
// job is acknowledged without writing it again (chunks are content-addressed).
//
// Threads: OnRequest runs on the transport's progress thread and only
// decodes headers and queues; checksums, the index lookup and the hand-off
// to the segment store run on `ingest`; writes complete on the segment
// writer thread; reads run on `readers`.
#ifndef STAGGER_SERVER_DATA_SERVICE_H_
#define STAGGER_SERVER_DATA_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "qos/executor.h"
#include "server/meta_store.h"
#include "server/storage/segment_store.h"
#include "transport/transport.h"

namespace stagger::server {

struct DataServiceCounters {
  std::atomic<uint64_t> chunks_written{0};
  std::atomic<uint64_t> chunks_deduplicated{0};
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> chunks_read{0};
  std::atomic<uint64_t> bad_requests{0};
};

class DataService : public transport::RequestHandler {
 public:
  // None owned; all must outlive the service.
  DataService(SegmentStore* segments, MetaStore* meta, qos::Executor* ingest,
              qos::Executor* readers);

  void OnRequest(transport::Message request,
                 std::unique_ptr<transport::ReplyChannel> reply) override;

  const DataServiceCounters& counters() const { return counters_; }

  // From now on every new request is answered UNAVAILABLE ("shutting
  // down"); requests already accepted run to completion.
  void StopAccepting();
  // Blocks until every accepted request has been replied to.
  void WaitIdle();

 private:
  void HandlePut(transport::Message request,
                 std::unique_ptr<transport::ReplyChannel> reply);
  void HandleGet(transport::Message request,
                 std::unique_ptr<transport::ReplyChannel> reply);

  SegmentStore* segments_;
  MetaStore* meta_;
  qos::Executor* ingest_;
  qos::Executor* readers_;
  DataServiceCounters counters_;

  class CountedReply;
  absl::Mutex mu_;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stagger::server

#endif  // STAGGER_SERVER_DATA_SERVICE_H_
