#include "bench/torch_trace.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "stagger/checkpointer.h"

namespace stagger::bench {
namespace {

Result<std::vector<char>> ReadFile(const std::string& path, uint64_t want) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<char> bytes(want);
  f.read(bytes.data(), static_cast<std::streamsize>(want));
  if (static_cast<uint64_t>(f.gcount()) != want || f.peek() != EOF) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " does not hold exactly ", want, " bytes"));
  }
  return bytes;
}

uint64_t Bytes(const TraceTensor& t) {
  uint64_t n = t.dtype == "BF16" ? 2 : 4;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

// The class a dumped tensor belongs to, by its name's prefix.
std::string ClassOf(const std::string& name) {
  if (name.rfind("bf16.", 0) == 0) return "torch_bf16";
  if (name.rfind("optim.", 0) == 0) return "torch_adam";
  return "torch_fp32";
}

}  // namespace

Result<std::vector<TraceStep>> ReadTrace(const std::string& dir) {
  std::vector<TraceStep> steps;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat("no trace directory ", dir));
  }
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("step_", 0) != 0) continue;
    TraceStep s;
    s.step = atoll(n.c_str() + 5);
    s.dir = dir + "/" + n;
    steps.push_back(std::move(s));
  }
  closedir(d);
  if (steps.empty()) {
    return absl::NotFoundError(absl::StrCat("no step_* dumps in ", dir));
  }
  std::sort(
      steps.begin(), steps.end(),
      [](const TraceStep& a, const TraceStep& b) { return a.step < b.step; });
  for (TraceStep& s : steps) {
    const std::string index = s.dir + "/index.txt";
    std::ifstream f(index);
    if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", index));
    std::string line;
    for (int no = 1; std::getline(f, line); ++no) {
      if (line.empty()) continue;
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      TraceTensor t;
      bool ok = parts.size() == 4 && (parts[1] == "F32" || parts[1] == "BF16");
      if (ok) {
        t.name = parts[0];
        t.dtype = parts[1];
        t.file = parts[3];
        std::vector<std::string> dims = absl::StrSplit(parts[2], ',');
        for (const std::string& dim : dims) {
          char* end = nullptr;
          long long v = strtoll(dim.c_str(), &end, 10);
          ok &= !dim.empty() && *end == '\0' && v > 0;
          t.shape.push_back(v);
        }
        ok &= t.file.find('/') == std::string::npos;
      }
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat(
            index, ":", no, ": expected 'name F32|BF16 d0,d1,... file'"));
      }
      s.tensors.push_back(std::move(t));
    }
  }
  return steps;
}

Status ReplayTrace(const std::vector<TraceStep>& trace, DiskMeter* meter,
                   uint64_t chunk_size, bool adaptive, double deadline_s,
                   ResultLine* result) {
  // Buffers registered once (from the first dump's layout), refilled from
  // each dump before its save.
  struct Run {
    std::unique_ptr<Checkpointer> ck;
    std::vector<std::pair<const TraceTensor*, std::vector<char>>> tensors;
    SaveStats last;
    uint64_t raw = 0, shipped = 0;  // dumps 2..N
  };
  std::map<std::string, Run> runs;
  for (const TraceTensor& t : trace.front().tensors) {
    Run& r = runs[ClassOf(t.name)];
    r.tensors.emplace_back(&t, std::vector<char>(Bytes(t)));
  }
  std::vector<std::string> jobs;
  for (auto& [cls, r] : runs) jobs.push_back("trace." + cls);
  for (auto& [cls, r] : runs) {
    CheckpointerOptions o;
    o.servers = meter->grpc_address();
    o.job = "trace." + cls;
    o.chunk_size = chunk_size;
    o.adaptive_codec = adaptive;
    if (deadline_s > 0) o.qos_deadline_s = deadline_s;
    STAGGER_ASSIGN_OR_RETURN(r.ck, Checkpointer::Open(o));
    for (auto& [t, bytes] : r.tensors) {
      STAGGER_RETURN_IF_ERROR(
          r.ck->Register({t->name, t->dtype, t->shape, bytes.data()}));
    }
  }
  if (trace.size() < 2) {
    return absl::InvalidArgumentError(
        "a trace needs at least 2 dumps (the first is the full save)");
  }
  DiskUsage first;
  for (size_t k = 0; k < trace.size(); ++k) {
    const TraceStep& step = trace[k];
    if (k == 1) {
      STAGGER_ASSIGN_OR_RETURN(first, meter->Measure(jobs));
    }
    std::map<std::string, const TraceTensor*> by_name;
    for (const TraceTensor& t : step.tensors) by_name[t.name] = &t;
    for (auto& [cls, r] : runs) {
      for (auto& [t, bytes] : r.tensors) {
        auto it = by_name.find(t->name);
        if (it == by_name.end() || it->second->shape != t->shape ||
            it->second->dtype != t->dtype) {
          return absl::InvalidArgumentError(
              absl::StrCat(step.dir, ": tensor ", t->name,
                           " is missing or changed its layout"));
        }
        STAGGER_ASSIGN_OR_RETURN(
            std::vector<char> now,
            ReadFile(step.dir + "/" + t->file, bytes.size()));
        bytes.swap(now);
        // The registration points at the old vector's memory: re-register.
      }
      r.ck->ClearRegistrations();
      for (auto& [t, bytes] : r.tensors) {
        STAGGER_RETURN_IF_ERROR(
            r.ck->Register({t->name, t->dtype, t->shape, bytes.data()}));
      }
      STAGGER_ASSIGN_OR_RETURN(SaveHandle h, r.ck->Save(step.step));
      STAGGER_RETURN_IF_ERROR(h.Wait());
      r.last = h.stats();
      if (k > 0) {
        r.raw += r.last.bytes_raw;
        r.shipped += r.last.bytes_shipped;
      }
    }
  }
  STAGGER_ASSIGN_OR_RETURN(DiskUsage last, meter->Measure(jobs));
  printf("torch trace: %zu dumps (steps %lld..%lld), last step per class\n",
         trace.size(), static_cast<long long>(trace.front().step),
         static_cast<long long>(trace.back().step));
  Table table({"class", "raw 2..N", "disk 2..N", "raw/disk", "client 2..N",
               "last raw/shipped", "unchanged/chunks", "deltas", "codec mix",
               "why"});
  for (auto& [cls, r] : runs) {
    const std::string job = "trace." + cls;
    const uint64_t disk = last.jobs[job] - first.jobs[job];
    std::string mix, why;
    for (const auto& [c, n] : r.last.codec_chunks) {
      absl::StrAppend(&mix, mix.empty() ? "" : " ", c, ":", n);
    }
    for (const auto& [c, n] : r.last.codec_reasons) {
      absl::StrAppend(&why, why.empty() ? "" : " ", c, ":", n);
    }
    table.AddRow({cls, FormatBytes(r.raw), FormatBytes(disk),
                  Ratio(r.raw, disk), FormatBytes(r.shipped),
                  Ratio(r.last.bytes_raw, r.last.bytes_shipped),
                  absl::StrCat(r.last.chunks_unchanged, "/", r.last.chunks),
                  absl::StrCat(r.last.chunks_delta), mix.empty() ? "-" : mix,
                  why.empty() ? "-" : why});
    std::string key = cls.substr(std::string("torch_").size());
    result->Add("trace_" + key + "_ratio",
                Div(r.last.bytes_raw, r.last.bytes_shipped));
    result->Add("trace_" + key + "_disk_ratio",
                Div(static_cast<double>(r.raw), static_cast<double>(disk)));
  }
  table.Print();
  return absl::OkStatus();
}

}  // namespace stagger::bench
