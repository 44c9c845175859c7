// Writes the seed corpora of the fuzz targets (tests/fuzz/<target>/) from
// the real encoders: valid inputs of every kind, for the fuzzer to mutate.
//   make_seeds OUT_DIR
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "format/codec.h"
#include "format/crc32c.h"
#include "format/data_plane.h"
#include "format/manifest.pb.h"
#include "format/record.h"
#include "transport/internal/frame.h"

namespace {

using namespace stagger;

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string Record(format::Codec want, const std::string& raw,
                   const std::string* base) {
  format::RecordHeader h;
  h.chunk_id = format::ChunkId::Of(raw.data(), raw.size());
  h.raw_length = raw.size();
  std::string payload;
  format::EncodeOptions eo;
  eo.element_size = 4;
  if (base != nullptr) {
    auto c = format::EncodeDelta(
        raw, *base, format::ChunkId::Of(base->data(), base->size()), &payload,
        eo);
    h.codec = *c;
  } else if (want == format::Codec::kRaw) {
    payload = raw;
    h.codec = want;
  } else {
    h.codec = *format::Encode(want, raw, &payload, eo);
  }
  h.encoded_length = payload.size();
  h.payload_crc32c = format::Crc32c(payload.data(), payload.size());
  std::string rec(format::RecordSize(payload.size()), '\0');
  format::EncodeRecordHeader(h, rec.data());
  std::memcpy(rec.data() + format::kRecordHeaderSize, payload.data(),
              payload.size());
  return rec;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string out = argv[1];
  std::string floats(8192, '\0');
  for (size_t i = 0; i < floats.size(); ++i) floats[i] = char(i * 7 % 251);
  std::string drifted = floats;
  drifted[100] ^= 1;
  Write(out + "/record/raw", Record(format::Codec::kRaw, floats, nullptr));
  Write(out + "/record/zstd", Record(format::Codec::kZstd, floats, nullptr));
  Write(out + "/record/bytegroup",
        Record(format::Codec::kByteGroupZstd, floats, nullptr));
  Write(out + "/record/delta",
        Record(format::Codec::kXorByteGroupZstd, drifted, &floats));

  pb::ShardManifest m;
  m.set_job("seed");
  m.set_step(3);
  m.set_rank(1);
  m.set_world_size(2);
  m.set_chunk_size(4096);
  pb::TensorEntry* t = m.add_tensors();
  t->set_name("w");
  t->set_dtype("F32");
  t->add_shape(2048);
  t->set_byte_size(8192);
  for (int i = 0; i < 2; ++i) {
    pb::ChunkRef* c = t->add_chunks();
    c->set_id(format::ChunkId::Of(floats.data() + 4096 * i, 4096).ToBytes());
    c->set_raw_length(4096);
    c->set_stored_length(4096);
  }
  Write(out + "/manifest/manifest",
        std::string(1, '\0') + m.SerializeAsString());
  format::PutChunkRequest put;
  put.job = "seed";
  put.record.chunk_id = format::ChunkId::Of(floats.data(), floats.size());
  put.record.raw_length = floats.size();
  put.record.encoded_length = floats.size();
  Write(out + "/manifest/put",
        std::string(1, '\1') + format::EncodePutChunk(put));
  put.in_memory = true;
  Write(out + "/manifest/put_memory",
        std::string(1, '\1') + format::EncodePutChunk(put));
  put.in_memory = false;
  Write(out + "/manifest/get",
        std::string(1, '\2') +
            format::EncodeGetChunk({"seed", put.record.chunk_id}));
  Write(out + "/manifest/reply_ok",
        std::string(1, '\3') +
            format::EncodeReply(absl::OkStatus(), &put.record));
  Write(out + "/manifest/reply_error",
        std::string(1, '\3') +
            format::EncodeReply(absl::NotFoundError("no such chunk"), nullptr));
  Write(out + "/manifest/get_range",
        std::string(1, '\4') +
            format::EncodeGetRange(
                {"seed", put.record.chunk_id, {{4096, 8192}, {0, 64}}}));
  Write(out + "/manifest/range_reply",
        std::string(1, '\5') +
            format::EncodeRangeReply(absl::OkStatus(), 0x1234abcd));

  for (int kind = 1; kind <= 5; ++kind) {
    transport_internal::Frame f;
    f.kind = static_cast<transport_internal::FrameKind>(kind);
    f.op = 7;
    f.header_len = kind == 1 ? 40 : 0;
    f.request_id = 99;
    f.payload_len = kind == 1 ? 1 << 20 : 0;
    char buf[transport_internal::kFrameBytes];
    transport_internal::EncodeFrame(f, buf);
    uint64_t data_len = f.payload_len;
    std::string in(reinterpret_cast<const char*>(&data_len), 8);
    in.append(buf, sizeof buf);
    in.append(f.header_len, 'h');
    Write(out + "/frame/kind" + std::to_string(kind), in);
  }
  return 0;
}
