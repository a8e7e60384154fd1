// The processes of a run: read from MPI when a launcher started them, else a world of one; or the
// ranks of one process, a thread per device.
#include "kestrel/distributed.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "local_rendezvous.h"

#ifdef KESTREL_WITH_MPI
#include <mpi.h>
#endif

namespace kestrel {

namespace {

// How long the ranks of one process wait for each other while setting a run up (loading data, building
// the model): a rank that fails stops the others sooner (LocalRendezvous::fail).
constexpr double kSetupTimeoutSeconds = 600;

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// Which launcher started this process, from the variables it sets; "" when none did.
// srun's tasks carry a step id (a batch script's own process has SLURM_PROCID but no step); they also
// carry PMIX_RANK, which alone means some other PMI launcher.
std::string detect_launcher() {
  if (!environment("OMPI_COMM_WORLD_SIZE").empty()) return "mpirun";
  if (!environment("SLURM_PROCID").empty() && !environment("SLURM_STEP_ID").empty()) return "srun";
  if (!environment("PMIX_RANK").empty() || !environment("PMI_RANK").empty()) return "mpirun";
  return "";
}

#ifdef KESTREL_WITH_MPI
// Finalises MPI at exit when this process initialised it. A static object: after main returns, when the
// trainers (and their communicators) are gone.
struct MpiFinalizer {
  bool owed = false;
  ~MpiFinalizer() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owed && !finalized) MPI_Finalize();
  }
};
MpiFinalizer& finalizer() {
  static MpiFinalizer instance;
  return instance;
}

void initialise_mpi() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) return;
  finalizer();  // constructed before MPI is up, so destroyed after everything that uses it
  int provided = 0;
  // The backends' collectives run on threads of their own, and a stalled one is inspected from another.
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw BackendUnavailable("MPI_Init_thread failed: check the launcher (mpirun, srun) and the MPI installation");
  finalizer().owed = true;
}
#endif

}  // namespace

World& World::get() {
  static World world;
  return world;
}

std::vector<World> World::in_process(int devices) {
  if (get().distributed())
    throw Unsupported(fmt::format("several devices in one process (distributed.devices) under {}: start one process per "
                                  "device instead (each takes the device of its local rank)",
                                  get().launcher()));
  auto local = std::make_shared<LocalRendezvous>(devices);
  std::vector<World> worlds;
  for (int rank = 0; rank < devices; ++rank) worlds.push_back(World(rank, devices, local));
  return worlds;
}

World::World(int rank, int size, std::shared_ptr<LocalRendezvous> local)
    : rank_(rank), size_(size), local_rank_(rank), local_size_(size),
      launcher_(fmt::format("threads ({} devices)", size)), local_(std::move(local)) {}

World::World() {
  launcher_ = detect_launcher();
  if (launcher_.empty()) return;
#ifdef KESTREL_WITH_MPI
  initialise_mpi();
  mpi_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  // The ranks sharing this machine, in rank order: the local rank picks the device.
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  launcher_ = fmt::format("{} ({} processes)", launcher_, size_);
#else
  const std::string size = environment("OMPI_COMM_WORLD_SIZE").empty() ? environment("SLURM_NTASKS")
                                                                       : environment("OMPI_COMM_WORLD_SIZE");
  if (!size.empty() && size != "1")
    throw Unsupported(fmt::format("this process was started by {} as one of {}, but Kestrel was built without MPI: "
                                  "install libopenmpi-dev and rebuild (or run a single process)",
                                  launcher_, size));
  launcher_.clear();
#endif
}

void World::require_mpi(const std::string& backend) {
#ifdef KESTREL_WITH_MPI
  (void)backend;
  initialise_mpi();
  mpi_ = true;
#else
  throw Unsupported(fmt::format("Kestrel was built without MPI, which the {} backend's collectives need: install "
                                "libopenmpi-dev and rebuild",
                                backend));
#endif
}

std::vector<std::string> World::all_gather(const std::string& mine) {
  if (size_ == 1) return {mine};
  if (local_) {
    std::vector<std::string> out;
    for (const std::vector<char>& theirs :
         local_->exchange(rank_, std::vector<char>(mine.begin(), mine.end()), kSetupTimeoutSeconds, "setting the run up"))
      out.emplace_back(theirs.begin(), theirs.end());
    return out;
  }
#ifdef KESTREL_WITH_MPI
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size_), starts(size_);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    starts[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), starts.data(), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) out.push_back(all.substr(starts[r], lengths[r]));
  return out;
#else
  return {mine};
#endif
}

void World::abort(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
#ifdef KESTREL_WITH_MPI
  if (mpi_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
#endif
  std::_Exit(exit_code);
}

}  // namespace kestrel
