// TensorBoard event files: a run's scalars and its config, as `tensorboard --logdir` reads them.
// Engine-internal.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

namespace kestrel {

// One file, OUT/events.out.tfevents.<seconds>.<host>.<pid>.kestrel, of TFRecords (length, masked CRC-32C
// of it, an Event message, its masked CRC-32C) that TensorBoard reads while the run goes on: each event
// is flushed as written. A resumed run starts a new file with a session START at the resume step, so
// TensorBoard drops what the interrupted run had logged past it.
class TensorBoardEvents {
 public:
  // resume_step: the step a resumed run continues from, or -1 for a new run.
  TensorBoardEvents(const std::string& dir, int64_t resume_step);
  void scalar(const std::string& tag, int64_t step, double value);
  // Text (markdown) for TensorBoard's text dashboard.
  void text(const std::string& tag, int64_t step, const std::string& text);

 private:
  // event: an encoded Event without its wall_time and step, which are added here.
  void write(int64_t step, const std::string& event);
  std::ofstream out_;
};

}  // namespace kestrel
