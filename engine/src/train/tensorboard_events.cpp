#include "tensorboard_events.h"

#include <fmt/format.h>
#include <unistd.h>

#include <boost/crc.hpp>
#include <chrono>
#include <climits>

#include "../io/protobuf_wire.h"
#include "kestrel/error.h"

namespace kestrel {

namespace {

namespace wire = io::wire;

// Field numbers of TensorBoard's protos (tensorboard/compat/proto): Event, Summary, Summary.Value,
// SummaryMetadata, its PluginData, TensorProto, SessionLog.
enum EventField { kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7 };
enum ValueField { kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9 };
constexpr int kSummaryValue = 1, kPluginData = 1, kPluginName = 1;
constexpr int kTensorDtype = 1, kTensorShape = 2, kStringVal = 8, kDtString = 7;
constexpr int kSessionStatus = 1, kSessionStart = 1;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// TFRecord's checksum: CRC-32C (Castagnoli), rotated and offset so that a CRC of CRCs stays strong.
uint32_t masked_crc(const std::string& bytes) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(bytes.data(), bytes.size());
  const uint32_t value = crc.checksum();
  return ((value >> 15) | (value << 17)) + 0xa282ead8u;
}

std::string little_endian(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return out;
}

std::string summary_of(const std::string& value) {
  std::string summary;
  wire::bytes(summary, kSummaryValue, value);
  std::string event;
  wire::bytes(event, kSummary, summary);
  return event;
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

TensorBoardEvents::TensorBoardEvents(const std::string& dir, int64_t resume_step) {
  const std::string path = fmt::format("{}/events.out.tfevents.{}.{}.{}.kestrel", dir, int64_t(now_seconds()),
                                       host_name(), getpid());
  out_.open(path, std::ios::binary);
  if (!out_) throw InvalidArgument(fmt::format("cannot create the TensorBoard event file '{}'", path));
  std::string version;
  wire::bytes(version, kFileVersion, "brain.Event:2");
  write(0, version);
  if (resume_step >= 0) {
    std::string session, event;
    wire::integer(session, kSessionStatus, kSessionStart);
    wire::bytes(event, kSessionLog, session);
    write(resume_step + 1, event);  // TensorBoard drops the steps from this one on: the checkpoint's stays
  }
}

void TensorBoardEvents::scalar(const std::string& tag, int64_t step, double value) {
  std::string v;
  wire::bytes(v, kTag, tag);
  wire::float32(v, kSimpleValue, static_cast<float>(value));
  write(step, summary_of(v));
}

void TensorBoardEvents::text(const std::string& tag, int64_t step, const std::string& text) {
  // The text plugin reads a string tensor whose metadata names it.
  std::string plugin, metadata, tensor, v;
  wire::bytes(plugin, kPluginName, "text");
  wire::bytes(metadata, kPluginData, plugin);
  wire::integer(tensor, kTensorDtype, kDtString);
  wire::bytes(tensor, kTensorShape, "");  // a scalar
  wire::bytes(tensor, kStringVal, text);
  wire::bytes(v, kTag, tag);
  wire::bytes(v, kMetadata, metadata);
  wire::bytes(v, kTensor, tensor);
  write(step, summary_of(v));
}

void TensorBoardEvents::write(int64_t step, const std::string& body) {
  std::string event;
  wire::float64(event, kWallTime, now_seconds());
  wire::integer(event, kStep, step);
  event += body;
  const std::string length = little_endian(event.size(), 8);
  out_ << length << little_endian(masked_crc(length), 4) << event << little_endian(masked_crc(event), 4);
  out_.flush();  // TensorBoard reads the file while the run goes on
}

}  // namespace kestrel
