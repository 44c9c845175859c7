#include "bench/children.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/common.h"

namespace stagger::bench {

Result<Child> SpawnChild(const std::vector<std::string>& args) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    std::vector<char*> argv;
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  return Child{pid, in[1], out[0], ""};
}

// Reads what the children printed until each one's output contains `word`
// (or it exited). Returns an error naming the first child that failed.
Status WaitFor(std::vector<Child>& kids, const std::string& word,
               double timeout_s, const std::function<void()>& tick) {
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout_s));
  while (true) {
    bool all = true;
    std::vector<pollfd> fds;
    for (Child& k : kids) {
      if (k.out.find("error") != std::string::npos) {
        return absl::UnavailableError(
            absl::StrCat("client pid ", k.pid, ": ", k.out));
      }
      if (k.out.find(word) == std::string::npos) {
        all = false;
        fds.push_back({k.from, POLLIN, 0});
      }
    }
    if (all) return absl::OkStatus();
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("clients did not print '", word, "' in time"));
    }
    ::poll(fds.data(), fds.size(), 100);
    if (tick) tick();
    for (Child& k : kids) {
      pollfd p = {k.from, POLLIN, 0};
      while (::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP))) {
        char buf[4096];
        ssize_t n = ::read(k.from, buf, sizeof buf);
        if (n <= 0) {
          if (k.out.find(word) == std::string::npos) {
            return absl::UnavailableError(absl::StrCat(
                "client pid ", k.pid, " exited early; it printed: ", k.out));
          }
          break;
        }
        k.out.append(buf, n);
      }
    }
  }
}

uint64_t RssBytes(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      uint64_t kb = 0;
      std::string v = line.substr(6);
      v.erase(0, v.find_first_not_of(" \t"));
      v = v.substr(0, v.find(' '));
      if (absl::SimpleAtoi(v, &kb)) return kb * 1024;
    }
  }
  return 0;
}

}  // namespace stagger::bench
