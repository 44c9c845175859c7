// `stagger import-dcp` / `export-dcp`: hands over to the Python module that
// reads and writes DCP checkpoints with torch's own code.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/session.h"

namespace stagger::client {
namespace {

// The folder holding the `stagger` Python package: build/python beside
// build/bin, or the install prefix above bin/.
std::string PackageRoot() {
  std::error_code ec;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const std::filesystem::path bin = exe.parent_path();
  for (const auto& root : {bin.parent_path() / "python", bin.parent_path()}) {
    if (std::filesystem::exists(root / "stagger" / "torch" / "dcp.py", ec)) {
      return root.string();
    }
  }
  return "";
}

// Run by the python: checks that it can import what the module needs
// before running it, so that a python without them gets one line saying
// so instead of a traceback.
constexpr char kBootstrap[] = R"py(import sys
what = sys.argv[1]
try:
    import numpy, torch, stagger.torch
except ImportError as e:
    sys.exit("stagger " + what + ": " + sys.executable + " cannot import " +
             repr(e.name or str(e)) + ": set STAGGER_PYTHON to a python "
             "with torch >= 2.2 and numpy (the one this stagger was built "
             "for)")
import runpy
sys.argv = ["stagger.torch.dcp"] + sys.argv[2:]
runpy.run_module("stagger.torch.dcp", run_name="__main__", alter_sys=True)
)py";

}  // namespace

int RunDcp(const DcpArgs& a) {
  const char* what = a.import ? "import-dcp" : "export-dcp";
  const std::string root = PackageRoot();
  if (root.empty()) {
    return Fail(what, absl::FailedPreconditionError(
                          "the stagger Python package (stagger/torch/dcp.py) "
                          "is not beside this stagger binary"));
  }
  const char* env_python = std::getenv("STAGGER_PYTHON");
  const std::string python = env_python != nullptr ? env_python : "python3";
  std::vector<std::string> args = {
      python,  "-c",  kBootstrap,  what,     a.import ? "import" : "export",
      "--dir", a.dir, "--servers", a.server, "--job",
      a.job};
  if (!a.step.empty()) args.insert(args.end(), {"--step", a.step});
  if (!a.token.empty()) args.insert(args.end(), {"--token", a.token});
  const char* old = std::getenv("PYTHONPATH");
  const std::string path =
      old != nullptr && *old != '\0' ? absl::StrCat(root, ":", old) : root;
  setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  return Fail(what,
              absl::FailedPreconditionError(absl::StrCat(
                  "cannot run ", python, ": ", strerror(errno),
                  " (set STAGGER_PYTHON to a python with torch >= 2.2)")));
}

}  // namespace stagger::client
