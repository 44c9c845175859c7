// Runs a fuzz target over files, without libFuzzer: every file named, and
// every file in every directory named (not recursive). Built with the
// regular compiler, so that `make test` replays the seed corpora on every
// target (tests/fuzz/<target>/) and keeps the targets building.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int RunFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)),
                          std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st;
    if (::stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (RunFile(argv[i]) != 0) return 1;
      ++inputs;
      continue;
    }
    DIR* d = ::opendir(argv[i]);
    if (d == nullptr) return 1;
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (RunFile(std::string(argv[i]) + "/" + name) != 0) return 1;
      ++inputs;
    }
    ::closedir(d);
  }
  std::printf("replay: %d inputs, no crash\n", inputs);
  // A corpus that went missing must not pass as an empty success.
  return inputs > 0 ? 0 : 1;
}
