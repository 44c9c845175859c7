// A stagger-server data directory on a fault-injecting file system: the
// default file system wrapped in a FaultInjectionFileSystem, and the
// ServerOptions of an in-process server that writes through it. For tests
// that crash the disk or fill it
// (server/storage/fault_injection_file_system.h).
#ifndef STAGGER_TESTS_TESTUTIL_FAULTY_DISK_H_
#define STAGGER_TESTS_TESTUTIL_FAULTY_DISK_H_

#include <memory>
#include <string>
#include <utility>

#include "server/server.h"
#include "server/storage/fault_injection_file_system.h"
#include "server/storage/file_system.h"
#include "stagger/status.h"

namespace stagger::testutil {

class FaultyDisk {
 public:
  // Data under `dir`/data; the server listens on 127.0.0.1:0.
  static Result<std::unique_ptr<FaultyDisk>> Make(const std::string& dir) {
    STAGGER_ASSIGN_OR_RETURN(std::unique_ptr<server::FileSystem> base,
                             server::NewDefaultFileSystem(8));
    return std::unique_ptr<FaultyDisk>(new FaultyDisk(std::move(base), dir));
  }

  server::FaultInjectionFileSystem& fs() { return fs_; }
  const server::ServerOptions& options() const { return options_; }

 private:
  FaultyDisk(std::unique_ptr<server::FileSystem> base, const std::string& dir)
      : base_(std::move(base)), fs_(base_.get()) {
    options_.data_dir = dir + "/data";
    options_.listen = "127.0.0.1:0";
    options_.file_system = &fs_;
  }

  std::unique_ptr<server::FileSystem> base_;
  server::FaultInjectionFileSystem fs_;
  server::ServerOptions options_;
};

}  // namespace stagger::testutil

#endif  // STAGGER_TESTS_TESTUTIL_FAULTY_DISK_H_
