// The families every stagger metrics page carries besides its own:
// stagger_build_info (version and format, value 1) and the standard
// process_* families Prometheus client libraries export (CPU time,
// resident and virtual memory, open and maximum file descriptors, start
// time), read from /proc/self.
//
// Thread-safety: thread-safe (reads /proc each call).
#ifndef STAGGER_METRICS_PROCESS_H_
#define STAGGER_METRICS_PROCESS_H_

#include <string>

#include "metrics/text_format.h"

namespace stagger::metrics {

// `component`: "server" or "client"; `version`: the project's version;
// `format_version`: the on-disk format's. A process_* family whose /proc
// source cannot be read is left out.
void WriteStandardFamilies(TextWriter& w, const std::string& component,
                           const std::string& version, int format_version);

}  // namespace stagger::metrics

#endif  // STAGGER_METRICS_PROCESS_H_
