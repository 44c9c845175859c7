#include "client/cli/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace stagger::client {
namespace {

constexpr size_t kPathMax = 4096;
// Two buffers for the file being written, so that the handler always reads
// one that is not being changed: `current` says which.
char partial[2][kPathMax];
std::atomic<int> current{0};
char dir[kPathMax];
std::atomic<int> done{0};
int total = 0;

void Append(char* out, size_t* at, const char* s) {
  for (; *s != '\0' && *at + 1 < kPathMax * 2; ++s) out[(*at)++] = *s;
}

void AppendInt(char* out, size_t* at, int v) {
  char digits[16];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && n < 15);
  while (n > 0 && *at + 1 < kPathMax * 2) out[(*at)++] = digits[--n];
}

void OnSignal(int sig) {
  const char* path = partial[current.load()];
  const bool removed = path[0] != '\0' && unlink(path) == 0;
  static char line[kPathMax * 2];
  size_t at = 0;
  Append(line, &at, "stagger restore: interrupted by ");
  Append(line, &at, sig == SIGINT ? "SIGINT" : "SIGTERM");
  if (removed) {
    Append(line, &at, "; removed ");
    Append(line, &at, path);
  }
  Append(line, &at, "; ");
  AppendInt(line, &at, done.load());
  Append(line, &at, " of ");
  AppendInt(line, &at, total);
  Append(line, &at, " files complete in ");
  Append(line, &at, dir);
  line[at++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, at);
  (void)ignored;  // nothing more can be done about a closed stderr
  _exit(128 + sig);
}

void Copy(char* out, const std::string& s) {
  const size_t n = std::min(s.size(), kPathMax - 1);
  std::memcpy(out, s.data(), n);
  out[n] = '\0';
}

}  // namespace

void InstallRestoreInterrupts(const std::string& out_dir, int files) {
  Copy(dir, out_dir);
  total = files;
  struct sigaction sa {};
  sa.sa_handler = &OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void RestoreWriting(const std::string& path) {
  const int next = 1 - current.load();
  Copy(partial[next], path);
  current.store(next);
}

void RestoreWrote() { done.fetch_add(1); }

}  // namespace stagger::client
