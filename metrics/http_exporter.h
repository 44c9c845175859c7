// HttpExporter: serves a metrics page over HTTP for Prometheus to scrape.
// GET /metrics answers 200 with `render()`'s text (Prometheus text format
// 0.0.4); any other path is 404, any other method 405, a request that is
// not HTTP 400. One connection at a time, closed after each answer; a
// client that sends nothing for 2 s is dropped.
//
// Thread-safety: `render` runs on the exporter's thread and must be
// thread-safe with respect to whatever it reads.
#ifndef STAGGER_METRICS_HTTP_EXPORTER_H_
#define STAGGER_METRICS_HTTP_EXPORTER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "stagger/status.h"

namespace stagger::metrics {

class HttpExporter {
 public:
  // Listens on "host:port" (port 0 picks a free one). INVALID_ARGUMENT for
  // a malformed address, UNAVAILABLE when it cannot bind.
  static Result<std::unique_ptr<HttpExporter>> Start(
      const std::string& host_port, std::function<std::string()> render);
  ~HttpExporter();  // stops serving and joins the thread
  HttpExporter(const HttpExporter&) = delete;
  HttpExporter& operator=(const HttpExporter&) = delete;

  // "host:port" actually bound.
  const std::string& address() const { return address_; }

 private:
  HttpExporter(int listen_fd, int stop_fd, std::string address,
               std::function<std::string()> render);
  void Loop();
  void Serve(int fd);

  const int listen_fd_;
  const int stop_fd_;  // eventfd: written once to stop the loop
  const std::string address_;
  const std::function<std::string()> render_;
  std::thread thread_;
};

// GETs http://host:port/path and returns the body of a 200 answer; other
// statuses are errors naming the status line. For tests and tools.
Result<std::string> HttpGet(const std::string& host_port,
                            const std::string& path);

}  // namespace stagger::metrics

#endif  // STAGGER_METRICS_HTTP_EXPORTER_H_
