// SegmentStore: reads and scans (segment_store.h).
#include <algorithm>
#include <cstring>

#include "server/storage/internal/segment_files.h"
#include "server/storage/internal/segment_store_impl.h"

namespace stagger::server {

using storage_internal::ListSegmentIds;
using storage_internal::SegmentFileName;
using storage_internal::ValidateJobName;
using storage_internal::Where;

Result<std::unique_ptr<File>> SegmentStore::Impl::OpenForRead(
    const std::string& job, uint64_t segment) {
  FileOptions fo;
  fo.direct = direct_io();
  return fs_->Open(JoinPath(JobDir(job), SegmentFileName(segment)), fo);
}

Result<format::RecordHeader> SegmentStore::Impl::ReadRecordAt(
    File* file, uint64_t size, uint64_t offset, transport::Buffer* out) {
  if (size - offset < format::kRecordAlignment) {
    return absl::DataLossError(absl::StrCat("torn record: ", size - offset,
                                            " bytes before end of segment"));
  }
  transport::Buffer first(format::kRecordAlignment);
  ReadRequest r{offset, first.data(), first.size()};
  STAGGER_RETURN_IF_ERROR(file->ReadAt(absl::MakeSpan(&r, 1)));
  if (r.bytes_read < r.len) {
    return absl::DataLossError("torn record: segment ends inside it");
  }
  if (std::all_of(first.data(), first.data() + format::kRecordHeaderSize,
                  [](char c) { return c == 0; })) {
    // Reserved space never written: the segment's records end here.
    return absl::OutOfRangeError("end of records");
  }
  STAGGER_ASSIGN_OR_RETURN(format::RecordHeader h,
                           format::DecodeRecordHeader(std::string_view(
                               first.data(), format::kRecordHeaderSize)));
  const uint64_t record_size = format::RecordSize(h.encoded_length);
  if (record_size > size - offset) {
    return absl::DataLossError(absl::StrCat("torn record: ", record_size,
                                            " bytes claimed, ", size - offset,
                                            " left in segment"));
  }
  transport::Buffer whole(record_size);
  std::memcpy(whole.data(), first.data(), first.size());
  if (record_size > first.size()) {
    ReadRequest rest{offset + first.size(), whole.data() + first.size(),
                     record_size - first.size()};
    STAGGER_RETURN_IF_ERROR(file->ReadAt(absl::MakeSpan(&rest, 1)));
    if (rest.bytes_read < rest.len) {
      return absl::DataLossError("torn record: segment ends inside it");
    }
  }
  STAGGER_ASSIGN_OR_RETURN(h, format::VerifyRecord(whole.view()));
  *out = std::move(whole);
  return h;
}

Result<StoredRecord> SegmentStore::Impl::Read(const std::string& job,
                                              const ChunkLocation& loc,
                                              const IOOptions& io) {
  STAGGER_RETURN_IF_ERROR(ValidateJobName(job));
  const std::string where = Where(job, loc.segment, loc.offset);
  if (loc.offset % format::kRecordAlignment != 0 ||
      loc.record_size < format::kRecordAlignment ||
      loc.record_size % format::kRecordAlignment != 0 ||
      loc.record_size > format::RecordSize(format::kMaxChunkEncodedBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": invalid location (record size ", loc.record_size, ")"));
  }
  auto file = OpenForRead(job, loc.segment);
  if (!file.ok()) return WithContext(file.status(), where);
  transport::Buffer buf(loc.record_size);
  ReadRequest r{loc.offset, buf.data(), buf.size()};
  Status s = (*file)->ReadAt(absl::MakeSpan(&r, 1), io);
  if (!s.ok()) return WithContext(s, where);
  if (r.bytes_read < r.len) {
    return absl::DataLossError(
        absl::StrCat(where, ": truncated record (", r.bytes_read, " of ", r.len,
                     " bytes in ", (*file)->path(), ")"));
  }
  auto h = format::VerifyRecord(buf.view(), io.check_payload);
  if (!h.ok()) {
    return absl::DataLossError(absl::StrCat(where, " (", (*file)->path(),
                                            "): ", h.status().message()));
  }
  if (format::RecordSize(h->encoded_length) != loc.record_size) {
    return absl::DataLossError(absl::StrCat(
        where, ": record is ", format::RecordSize(h->encoded_length),
        " bytes, location says ", loc.record_size));
  }
  // The header becomes headroom: the payload is sent from where it was
  // read, not copied (a chunk can be 64 MiB).
  buf.DropFront(format::kRecordHeaderSize);
  buf.resize(h->encoded_length);
  return StoredRecord{*h, std::move(buf)};
}

Status SegmentStore::Impl::Scan(
    const std::string& job,
    const std::function<void(const format::RecordHeader&,
                             const ChunkLocation&)>& on_record,
    const std::function<void(const Status&)>& on_error) {
  STAGGER_RETURN_IF_ERROR(ValidateJobName(job));
  auto ids = ListSegmentIds(fs_, JobDir(job));
  if (!ids.ok()) return WithContext(ids.status(), absl::StrCat("job ", job));
  for (uint64_t id : *ids) {
    auto file = OpenForRead(job, id);
    if (!file.ok()) return WithContext(file.status(), Where(job, id, 0));
    auto size = (*file)->Size();
    if (!size.ok()) return WithContext(size.status(), Where(job, id, 0));
    for (uint64_t offset = 0; offset < *size;) {
      transport::Buffer record;
      auto h = ReadRecordAt(file->get(), *size, offset, &record);
      if (absl::IsOutOfRange(h.status())) break;  // zeros: reserved space
      if (!h.ok()) {
        if (!absl::IsDataLoss(h.status())) {
          return WithContext(h.status(), Where(job, id, offset));
        }
        if (on_error) {
          on_error(absl::DataLossError(
              absl::StrCat(Where(job, id, offset), " (", (*file)->path(),
                           "): ", h.status().message())));
        }
        break;  // nothing after a torn record is trusted
      }
      const uint64_t record_size = format::RecordSize(h->encoded_length);
      if (on_record) on_record(*h, ChunkLocation{id, offset, record_size});
      offset += record_size;
    }
  }
  return absl::OkStatus();
}

}  // namespace stagger::server
