//===- Checkpoint.cpp - the checkpoint format of a run --------------------===//
//
// Checkpoint.h: writing, reading and checking checkpoints, one rank's and
// sharded ones, and the --save directory's checks and lock.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Run/Checkpoint.h"
#include "trainmem/Support/DynamicMap.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir;
using namespace mlir::train;

static llvm::Error checkpointError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// Version 02 adds the run's seed and the fingerprint of its data after the
// step; version 01 checkpoints (no seed, no data) still load. Version 03 is
// a rank's shard: after the identity, the layout that wrote it (rank,
// ranks, ZeRO stage, tensor-parallel parts) and, after each tensor's shape,
// the dimension its tensor-parallel part is cut along (0: none, d + 1:
// dimension d), all under the checksum, so that a shard read for another
// rank or a manifest's split rewritten is refused.
static constexpr char kMagic[8] = {'T', 'M', 'C', 'K', 'P', 'T', '0', '2'};
static constexpr char kMagicV1[8] = {'T', 'M', 'C', 'K', 'P', 'T', '0', '1'};
static constexpr char kMagicShard[8] = {'T', 'M', 'C', 'K',
                                        'P', 'T', '0', '3'};

/// A descriptor of the file at `path` when it is a regular file (a link to
/// one is one) and its size then; else the reason it is not opened. A
/// device (/dev/zero) would be read without end and a FIFO would block its
/// open: the file is opened without blocking and its type checked before
/// a byte is read.
static llvm::Expected<int> openRegularFile(const std::string &path,
                                           uint64_t &size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return checkpointError(std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return checkpointError("it is not a regular file (a device, a pipe or a "
                           "directory), as a checkpoint's files are");
  }
  size = static_cast<uint64_t>(info.st_size);
  return fd;
}

/// The regular file at `path` read whole at the size it had when opened.
static llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readRegularFile(const Twine &path) {
  std::string name = path.str();
  uint64_t size = 0;
  llvm::Expected<int> fd = openRegularFile(name, size);
  if (!fd)
    return fd.takeError();
  auto buffer = llvm::MemoryBuffer::getOpenFile(
      *fd, name, size, /*RequiresNullTerminator=*/false);
  ::close(*fd);
  if (!buffer)
    return checkpointError(buffer.getError().message());
  return std::move(*buffer);
}

uint64_t mlir::train::fnv1a(StringRef data) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : data)
    hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

bool mlir::train::isState(const TensorSlot &slot) {
  return slot.role == SlotRole::param || slot.role == SlotRole::optimizerState;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

static void appendU64(std::string &out, uint64_t value) {
  out.append(reinterpret_cast<const char *>(&value), 8);
}
static void appendString(std::string &out, const std::string &value) {
  appendU64(out, value.size());
  out += value;
}

llvm::Error mlir::train::writeAtomically(StringRef dir, StringRef name,
                                         StringRef data) {
  std::string path = (dir + "/" + name).str();
  // A name of this process's: two writers never share a temporary (the
  // directory's lock keeps a second run out; this keeps any writer safe).
  std::string temporary = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return checkpointError("cannot write '" + temporary +
                           "': " + std::strerror(errno));
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n <= 0) {
      llvm::Error error = checkpointError("cannot write '" + temporary +
                                          "': " + std::strerror(errno));
      ::close(fd);
      ::unlink(temporary.c_str());
      return error;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0 ||
      ::rename(temporary.c_str(), path.c_str()) != 0) {
    llvm::Error error = checkpointError("cannot commit '" + path +
                                        "': " + std::strerror(errno));
    ::unlink(temporary.c_str());
    return error;
  }
  int dirFd = ::open(dir.str().c_str(), O_RDONLY);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
  return llvm::Error::success();
}

llvm::Error mlir::train::writeCheckpoint(
    StringRef dir, int64_t step, const RunIdentity &identity,
    ArrayRef<TensorSlot> slots,
    llvm::function_ref<Bytes(const TensorSlot &)> read, StringRef name,
    const CheckpointLayout *layout) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return checkpointError("cannot create '" + dir + "': " + ec.message());
  std::string data(layout ? kMagicShard : kMagic, 8);
  appendU64(data, static_cast<uint64_t>(step));
  appendU64(data, static_cast<uint64_t>(identity.seed));
  appendU64(data, identity.dataBytes);
  appendU64(data, identity.dataHash);
  if (layout)
    for (int64_t field : {layout->rank, layout->ranks, layout->stage,
                          layout->tensorParts})
      appendU64(data, static_cast<uint64_t>(field));
  appendU64(data, llvm::count_if(slots, isState));
  for (const TensorSlot &slot : slots) {
    if (!isState(slot))
      continue;
    appendString(data, slot.roleName().str());
    appendString(data, slot.key);
    appendString(data, slot.dtypeName().str());
    appendU64(data, slot.shape.size());
    for (int64_t d : slot.shape)
      appendU64(data, static_cast<uint64_t>(d));
    if (layout)
      appendU64(data, slot.splitParts > 1
                          ? static_cast<uint64_t>(slot.splitDim) + 1
                          : 0);
    Bytes bytes = read(slot);
    appendU64(data, bytes.size());
    data.append(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  }
  appendU64(data, fnv1a(data));
  return writeAtomically(dir, name, data);
}

std::string mlir::train::shardFileName(int64_t rank, int64_t ranks) {
  return "shard-" + std::to_string(rank) + "-of-" + std::to_string(ranks) +
         ".bin";
}

/// "8x16", or "scalar" for a shape of no dimensions.
static std::string shapeText(ArrayRef<int64_t> shape) {
  std::string text;
  for (size_t d = 0; d < shape.size(); ++d)
    text += (d ? "x" : "") + std::to_string(shape[d]);
  return text.empty() ? std::string("scalar") : text;
}

/// A manifest's "FILE SIZE CHECKSUM" line of `dir`/`file` (`what` it is,
/// for the error where it cannot be read).
static llvm::Expected<std::string>
manifestEntry(StringRef dir, const std::string &file, const Twine &what) {
  auto buffer =
      llvm::MemoryBuffer::getFile((dir + "/" + file).str(), /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!buffer)
    return checkpointError("cannot read " + what + " ('" + file +
                           "'): " + buffer.getError().message());
  StringRef data = (*buffer)->getBuffer();
  return file + " " + std::to_string(data.size()) + " " +
         std::to_string(fnv1a(data)) + "\n";
}

llvm::Error mlir::train::writeManifest(StringRef dir, StringRef stepName,
                                       const CheckpointLayout &layout,
                                       int64_t step,
                                       ArrayRef<TensorSlot> slots) {
  int64_t ranks = layout.ranks;
  std::string manifest = "trainmem sharded checkpoint 1\nranks " +
                         std::to_string(ranks) + "\nstage " +
                         std::to_string(layout.stage) + "\nstep " +
                         std::to_string(step) + "\n";
  if (layout.tensorParts > 1)
    manifest += "tensor-parallel " + std::to_string(layout.tensorParts) + "\n";
  // What each tensor is: its rank's shape, the whole tensor's, and the
  // dimension a tensor-parallel part is cut along.
  for (const TensorSlot &slot : slots)
    if (isState(slot))
      manifest +=
          "tensor " + slot.stateName() + " " + slot.dtypeName().str() + " " +
          shapeText(slot.shape) + " " + shapeText(slot.wholeShape()) +
          (slot.splitParts > 1 ? " split " + std::to_string(slot.splitDim)
                               : std::string()) +
          "\n";
  for (int64_t r = 0; r < ranks; ++r) {
    std::string file = (stepName + "/" + shardFileName(r, ranks)).str();
    llvm::Expected<std::string> entry =
        manifestEntry(dir, file, "the shard of rank " + Twine(r));
    if (!entry)
      return entry.takeError();
    manifest += "shard " + std::to_string(r) + " " + *entry;
  }
  return writeAtomically(dir, "manifest", manifest);
}

void mlir::train::removeOtherCheckpoints(StringRef dir, StringRef keep) {
  std::error_code ec;
  std::vector<std::string> stale;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    StringRef name = llvm::sys::path::filename(it->path());
    if (name == keep)
      continue;
    if (name == "checkpoint.bin" ||
        (name == "manifest" && keep == "checkpoint.bin") ||
        name.starts_with("step-"))
      stale.push_back(it->path());
  }
  for (const std::string &path : stale) {
    std::error_code inner;
    for (llvm::sys::fs::directory_iterator file(path, inner), last;
         file != last && !inner; file.increment(inner))
      llvm::sys::fs::remove(file->path());
    llvm::sys::fs::remove(path);
  }
}

llvm::Error mlir::train::checkSaveDir(StringRef dir) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return checkpointError("cannot create --save directory '" + dir +
                           "': " + ec.message());
  std::string probe = (dir + "/checkpoint.bin.tmp." + Twine(::getpid())).str();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return checkpointError("cannot write into --save directory '" + dir +
                           "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return llvm::Error::success();
}

llvm::Error mlir::train::lockSaveDir(StringRef dir) {
  std::string path = (dir + "/" + kSaveDirLockName).str();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return checkpointError("cannot lock --save directory '" + dir +
                           "': " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int why = errno;
    char holder[32] = {};
    ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    if (why != EWOULDBLOCK)
      return checkpointError("cannot lock --save directory '" + dir +
                             "': " + std::strerror(why));
    return checkpointError(
        "--save directory '" + dir + "' is in use by another trainmem-run" +
        (n > 0 ? " (pid " + StringRef(holder).trim().str() + ")"
               : std::string()) +
        "; give each run its own directory");
  }
  // Held until the process ends (the descriptor stays open); the pid says
  // who holds it.
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) !=
                                     static_cast<ssize_t>(pid.size())) {
    // The lock holds without the pid.
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Reading one file
//===----------------------------------------------------------------------===//

/// Bytes per element of the dtypes a checkpoint may hold.
static std::optional<uint64_t> dtypeBytes(StringRef dtype) {
  return llvm::StringSwitch<std::optional<uint64_t>>(dtype)
      .Cases({"f32", "i32"}, 4)
      .Cases({"bf16", "f16"}, 2)
      .Case("i64", 8)
      .Case("i8", 1)
      .Default(std::nullopt);
}

/// The index of the first NaN or infinity of `bytes` as a tensor of
/// `dtype` (f32, bf16, f16: an exponent of all ones); none for integers.
static std::optional<int64_t> firstNonFinite(StringRef dtype, StringRef bytes) {
  auto scan = [&](auto word, uint64_t exponentMask) -> std::optional<int64_t> {
    using Word = decltype(word);
    size_t n = bytes.size() / sizeof(Word);
    for (size_t i = 0; i < n; ++i) {
      Word bits;
      std::memcpy(&bits, bytes.data() + i * sizeof(Word), sizeof(Word));
      if ((bits & exponentMask) == exponentMask)
        return static_cast<int64_t>(i);
    }
    return std::nullopt;
  };
  if (dtype == "f32")
    return scan(uint32_t(), 0x7f800000u);
  if (dtype == "bf16")
    return scan(uint16_t(), 0x7f80u);
  if (dtype == "f16")
    return scan(uint16_t(), 0x7c00u);
  return std::nullopt;
}

namespace {
/// The fields of a checkpoint file's body, read in order. Every length is
/// checked against what is left before it is used, so no field can make a
/// read run past the file or a size wrap around: past the end, `truncated`
/// is set and reads return nothing.
struct FieldReader {
  StringRef body;
  size_t pos = 8;
  bool truncated = false;

  uint64_t u64() {
    if (truncated || body.size() - pos < 8) {
      truncated = true;
      return 0;
    }
    uint64_t value;
    std::memcpy(&value, body.data() + pos, 8);
    pos += 8;
    return value;
  }
  StringRef bytes(uint64_t size) {
    if (truncated || size > body.size() - pos) {
      truncated = true;
      return "";
    }
    StringRef value = body.substr(pos, size);
    pos += size;
    return value;
  }
};

/// What a checkpoint's tensor is: its dtype and shape.
struct SavedType {
  std::string dtype;
  std::vector<int64_t> shape;
  /// A shard's record of the dimension its tensor-parallel part is cut
  /// along (-1: not a part); absent before version 03.
  std::optional<int64_t> split;
  /// "f32[8x16]".
  std::string text() const {
    std::string dims;
    for (size_t d = 0; d < shape.size(); ++d)
      dims += (d ? "x" : "") + std::to_string(shape[d]);
    return dtype + "[" + dims + "]";
  }
};

/// A checkpoint file's tensors as read, and what each is.
struct ParsedCheckpoint {
  Checkpoint checkpoint;
  std::map<std::string, SavedType> types;
  /// A shard's record of the layout that wrote it (version 03).
  std::optional<CheckpointLayout> layout;
};
} // namespace

/// Reads one tensor entry into `parsed`; nothing (and `fields.truncated`)
/// where the file ends first.
static llvm::Error
readTensor(FieldReader &fields, ParsedCheckpoint &parsed,
           function_ref<llvm::Error(const Twine &)> corrupt) {
  bool shard = parsed.layout.has_value();
  std::string role = fields.bytes(fields.u64()).str();
  std::string key = fields.bytes(fields.u64()).str();
  std::string dtype = fields.bytes(fields.u64()).str();
  uint64_t rank = fields.u64();
  if (fields.truncated)
    return llvm::Error::success();
  if (rank > 8)
    return corrupt("tensor '" + key + "' has rank " + Twine(rank));
  std::optional<uint64_t> elementBytes = dtypeBytes(dtype);
  if (!elementBytes)
    return corrupt("tensor '" + key + "' has unknown dtype '" + dtype + "'");
  SavedType type{dtype, {}};
  uint64_t expectedBytes = *elementBytes;
  for (uint64_t d = 0; d < rank && !fields.truncated; ++d) {
    uint64_t dim = fields.u64();
    if (dim > (uint64_t(1) << 40) ||
        (dim && expectedBytes > std::numeric_limits<uint64_t>::max() / dim))
      return corrupt("tensor '" + key + "' has an absurd dimension " +
                     Twine(dim));
    expectedBytes *= dim;
    type.shape.push_back(static_cast<int64_t>(dim));
  }
  if (shard) {
    // The whole tensor's dimension (a ZeRO shard of a part is flat).
    uint64_t split = fields.u64();
    if (!fields.truncated && split > 8)
      return corrupt("tensor '" + key + "' is split along dimension " +
                     Twine(split - 1));
    type.split = static_cast<int64_t>(split) - 1;
  }
  uint64_t bytes = fields.u64();
  if (!fields.truncated && bytes != expectedBytes)
    return corrupt("tensor '" + key + "' holds " + Twine(bytes) + " bytes; " +
                   type.text() + " needs " + Twine(expectedBytes));
  StringRef values = fields.bytes(bytes);
  if (fields.truncated)
    return llvm::Error::success();
  // Training state is finite (a non-finite update is skipped): a NaN or
  // infinity is a diverged run or an altered file, refused here rather than
  // blamed on the first step that reads it.
  if (std::optional<int64_t> at = firstNonFinite(dtype, values))
    return corrupt(role + " '" + key + "' holds a NaN or infinity (element " +
                   Twine(*at) + "): resume from an earlier checkpoint");
  std::string name = role + ":" + key;
  if (parsed.checkpoint.tensors.count(name))
    return corrupt("it holds " + role + " '" + key + "' twice");
  parsed.checkpoint.tensors[name] =
      Bytes(values.bytes_begin(), values.bytes_end());
  parsed.types[name] = std::move(type);
  return llvm::Error::success();
}

/// Reads and checks the checkpoint file at `path`, its tensors taken as
/// they are.
static llvm::Expected<ParsedCheckpoint> parseCheckpointFile(StringRef path) {
  auto buffer = readRegularFile(path);
  if (!buffer)
    return checkpointError("cannot read checkpoint '" + path +
                           "': " + llvm::toString(buffer.takeError()));
  StringRef data = (*buffer)->getBuffer();
  auto corrupt = [&](const Twine &why) {
    return checkpointError("checkpoint '" + path + "' is corrupt: " + why);
  };
  if (data.size() < 16 || (std::memcmp(data.data(), kMagic, 8) != 0 &&
                           std::memcmp(data.data(), kMagicV1, 8) != 0 &&
                           std::memcmp(data.data(), kMagicShard, 8) != 0))
    return checkpointError("'" + path + "' is not a trainmem checkpoint");
  bool version1 = std::memcmp(data.data(), kMagicV1, 8) == 0;
  bool shard = std::memcmp(data.data(), kMagicShard, 8) == 0;
  uint64_t stored;
  std::memcpy(&stored, data.data() + data.size() - 8, 8);
  if (data.size() < 24 || fnv1a(data.drop_back(8)) != stored)
    return checkpointError("checkpoint '" + path +
                           "' is truncated or corrupt (checksum mismatch)");
  FieldReader fields{data.drop_back(8)};
  ParsedCheckpoint parsed;
  uint64_t savedStep = fields.u64();
  if (!fields.truncated && savedStep > kMaxStep)
    return corrupt("its step " + Twine(static_cast<int64_t>(savedStep)) +
                   " is negative or absurd");
  if (!version1) {
    RunIdentity identity;
    identity.seed = static_cast<int64_t>(fields.u64());
    identity.dataBytes = fields.u64();
    identity.dataHash = fields.u64();
    parsed.checkpoint.identity = identity;
  }
  if (shard) {
    CheckpointLayout layout;
    layout.rank = static_cast<int64_t>(fields.u64());
    layout.ranks = static_cast<int64_t>(fields.u64());
    layout.stage = static_cast<int64_t>(fields.u64());
    layout.tensorParts = static_cast<int64_t>(fields.u64());
    if (!fields.truncated &&
        (layout.ranks < 1 || layout.rank < 0 || layout.rank >= layout.ranks ||
         layout.stage < 0 || layout.stage > 3 || layout.tensorParts < 1 ||
         layout.ranks % layout.tensorParts != 0))
      return corrupt("it claims to be rank " + Twine(layout.rank) + "'s of " +
                     Twine(layout.ranks) + " ranks, ZeRO stage " +
                     Twine(layout.stage) + ", tensor-parallel size " +
                     Twine(layout.tensorParts));
    parsed.layout = layout;
  }
  uint64_t count = fields.u64();
  // Each entry takes at least 5 words; a count beyond that is a lie.
  if (!fields.truncated && count > (fields.body.size() - fields.pos) / 40)
    return corrupt("it claims " + Twine(count) + " tensors");
  for (uint64_t i = 0; i < count && !fields.truncated; ++i)
    if (llvm::Error error = readTensor(fields, parsed, corrupt))
      return std::move(error);
  if (fields.truncated || fields.pos != fields.body.size())
    return checkpointError("checkpoint '" + path +
                           "' is truncated or has trailing bytes");
  parsed.checkpoint.step = static_cast<int64_t>(savedStep);
  return parsed;
}

/// "split along dimension D" or "not split".
static std::string splitText(int64_t split) {
  return split < 0 ? std::string("not split")
                   : "split along dimension " + std::to_string(split);
}

/// Every state tensor of the step must be in the checkpoint at `path`
/// with its shape and type, and nothing else.
static llvm::Error checkAgainstSlots(StringRef path,
                                     const ParsedCheckpoint &parsed,
                                     ArrayRef<TensorSlot> slots) {
  auto mismatch = [&](const Twine &why) {
    return checkpointError("checkpoint '" + path +
                           "' does not match this step: " + why);
  };
  size_t expectedCount = 0;
  for (const TensorSlot &slot : slots) {
    if (!isState(slot))
      continue;
    ++expectedCount;
    std::string name = slot.stateName();
    SavedType expected{slot.dtypeName().str(), slot.shape};
    auto it = parsed.types.find(name);
    if (it == parsed.types.end())
      return mismatch("it has no " + slot.roleName() + " '" + slot.key + "'");
    if (it->second.text() != expected.text() ||
        parsed.checkpoint.tensors.at(name).size() != slot.bytes)
      return mismatch(slot.roleName() + " '" + slot.key + "' is " +
                      it->second.text() + " there and " + expected.text() +
                      " here");
    int64_t split = slot.splitParts > 1 ? slot.splitDim : -1;
    if (it->second.split && *it->second.split != split)
      return mismatch(slot.roleName() + " '" + slot.key + "' is " +
                      splitText(*it->second.split) + " there and " +
                      splitText(split) + " here");
  }
  if (parsed.checkpoint.tensors.size() != expectedCount)
    return mismatch("it holds other tensors as well");
  return llvm::Error::success();
}

/// The checkpoint file at `path`; with `slots`, checked against them
/// (without, its tensors taken as they are: the shards of another number
/// of ranks, to re-shard).
static llvm::Expected<Checkpoint>
readCheckpointFile(StringRef path, std::optional<ArrayRef<TensorSlot>> slots) {
  llvm::Expected<ParsedCheckpoint> parsed = parseCheckpointFile(path);
  if (!parsed)
    return parsed.takeError();
  if (slots)
    if (llvm::Error error = checkAgainstSlots(path, *parsed, *slots))
      return std::move(error);
  return std::move(parsed->checkpoint);
}

/// The step in the header of the checkpoint file at `path` (its first 16
/// bytes: magic and step); none when the file is too short or not one.
static std::optional<uint64_t> checkpointStep(StringRef path) {
  // Not a regular file: none (the full read that follows says why).
  uint64_t size = 0;
  llvm::Expected<int> fd = openRegularFile(path.str(), size);
  if (!fd) {
    llvm::consumeError(fd.takeError());
    return std::nullopt;
  }
  char header[16];
  bool read = ::pread(*fd, header, sizeof header, 0) ==
              static_cast<ssize_t>(sizeof header);
  ::close(*fd);
  if (!read || (std::memcmp(header, kMagic, 8) != 0 &&
                std::memcmp(header, kMagicV1, 8) != 0))
    return std::nullopt;
  uint64_t step;
  std::memcpy(&step, header + 8, 8);
  return step;
}

llvm::Expected<std::optional<Checkpoint>>
mlir::train::readInitialWeights(StringRef dir, ArrayRef<TensorSlot> slots) {
  std::string path = (dir + "/checkpoint.bin").str();
  if (llvm::sys::fs::exists(dir + "/manifest") || !llvm::sys::fs::exists(path))
    return std::nullopt;
  // A run's checkpoint past step 0 is not read twice: its header says so.
  if (std::optional<uint64_t> step = checkpointStep(path); step && *step != 0)
    return std::nullopt;
  llvm::Expected<ParsedCheckpoint> parsed = parseCheckpointFile(path);
  if (!parsed)
    return parsed.takeError();
  std::string prefix = getSlotRoleName(SlotRole::param).str() + ":";
  if (parsed->checkpoint.step != 0 ||
      !llvm::all_of(parsed->checkpoint.tensors, [&](const auto &entry) {
        return StringRef(entry.first).starts_with(prefix);
      }))
    return std::nullopt;
  auto mismatch = [&](const Twine &why) {
    return checkpointError("the initial weights in '" + path +
                           "' do not match this step: " + why);
  };
  size_t params = 0;
  for (const TensorSlot &slot : slots) {
    if (slot.role != SlotRole::param)
      continue;
    ++params;
    SavedType expected{slot.dtypeName().str(), slot.wholeShape()};
    auto it = parsed->types.find(slot.stateName());
    if (it == parsed->types.end())
      return mismatch("they have no parameter '" + slot.key + "'");
    if (it->second.text() != expected.text())
      return mismatch("parameter '" + slot.key + "' is " + it->second.text() +
                      " there and " + expected.text() + " here");
  }
  if (parsed->checkpoint.tensors.size() != params)
    return mismatch("they hold parameters this step does not have");
  return std::optional<Checkpoint>(std::move(parsed->checkpoint));
}

llvm::Expected<Checkpoint>
mlir::train::readCheckpoint(StringRef dir, ArrayRef<TensorSlot> slots,
                            StringRef name) {
  return readCheckpointFile((dir + "/" + name).str(), slots);
}

//===----------------------------------------------------------------------===//
// Reading a sharded checkpoint
//===----------------------------------------------------------------------===//

/// "8x16" or "scalar" as a shape.
static std::optional<std::vector<int64_t>> parseShape(StringRef text) {
  std::vector<int64_t> shape;
  if (text == "scalar")
    return shape;
  SmallVector<StringRef> dims;
  text.split(dims, 'x');
  for (StringRef dim : dims) {
    int64_t size = 0;
    if (dim.getAsInteger(10, size) || size < 0 || size > (int64_t(1) << 40))
      return std::nullopt;
    shape.push_back(size);
  }
  return shape;
}

static uint64_t elementsOf(ArrayRef<int64_t> shape) {
  uint64_t elements = 1;
  for (int64_t d : shape)
    elements *= static_cast<uint64_t>(d);
  return elements;
}

namespace {
/// A sharded checkpoint's manifest: what each tensor was (dtype, a rank's
/// shape, the whole shape) and where each rank's shard is.
struct Manifest {
  std::string path;
  int64_t ranks = 0, stage = 0, step = 0, tensorParts = 1;
  struct Tensor {
    std::string dtype;
    std::vector<int64_t> shard, whole;
    /// A tensor-parallel part: the dimension it is cut along.
    std::optional<int64_t> splitDim;
  };
  struct Shard {
    std::string file;
    uint64_t size = 0, hash = 0;
  };
  std::map<std::string, Tensor> tensors;
  std::map<int64_t, Shard> shards;

  /// "manifest", or "checkpoint" for one rank's file read as a manifest
  /// of one rank.
  std::string what = "manifest";

  llvm::Error bad(const Twine &why) const {
    return checkpointError(what + " '" + path + "' " + why);
  }
};
} // namespace

/// The manifest's header: its ranks, stage and step, checked.
static llvm::Error parseManifestHeader(ArrayRef<StringRef> header,
                                       Manifest &manifest) {
  // More ranks than any run has is a corrupt number, not a cluster.
  constexpr int64_t kMaxRanks = int64_t(1) << 20;
  StringRef ranks = header[1], stage = header[2], step = header[3];
  if (header[0] != "trainmem sharded checkpoint 1" ||
      !ranks.consume_front("ranks ") ||
      ranks.getAsInteger(10, manifest.ranks) || manifest.ranks < 1 ||
      manifest.ranks > kMaxRanks || !stage.consume_front("stage ") ||
      stage.getAsInteger(10, manifest.stage) || !step.consume_front("step ") ||
      step.getAsInteger(10, manifest.step))
    return manifest.bad("is not a trainmem sharded checkpoint's");
  // The stage and step it claims are checked, not taken on trust.
  if (manifest.stage < 0 || manifest.stage > 3)
    return manifest.bad("has stage " + Twine(manifest.stage) +
                        ": ZeRO stages are 0, 1, 2 and 3");
  if (manifest.step < 0)
    return manifest.bad("has step " + Twine(manifest.step) +
                        ": steps count from 0");
  return llvm::Error::success();
}

/// A manifest's "tensor NAME DTYPE SHARD WHOLE [split DIM]" line: a
/// tensor-parallel part's shape times its parts along DIM is the whole.
static llvm::Error parseManifestTensor(ArrayRef<StringRef> fields,
                                       Manifest &manifest) {
  auto shard = parseShape(fields[3]), whole = parseShape(fields[4]);
  auto bad = [&]() {
    return manifest.bad("has a bad line for tensor '" + fields[1] + "'");
  };
  if (!shard || !whole)
    return bad();
  Manifest::Tensor tensor{fields[2].str(), *shard, *whole, std::nullopt};
  if (fields.size() == 7) {
    int64_t dim = 0;
    // A rank holds the part (the whole cut along DIM) or, under ZeRO, a
    // flat shard of it.
    if (fields[5] != "split" || fields[6].getAsInteger(10, dim) || dim < 0 ||
        dim >= static_cast<int64_t>(whole->size()) ||
        (*whole)[dim] % manifest.tensorParts != 0)
      return bad();
    std::vector<int64_t> part = *whole;
    part[dim] /= manifest.tensorParts;
    if (*shard != part && shard->size() != 1)
      return bad();
    tensor.splitDim = dim;
  }
  manifest.tensors[fields[1].str()] = std::move(tensor);
  return llvm::Error::success();
}

static llvm::Expected<Manifest> readManifest(StringRef dir) {
  Manifest manifest;
  manifest.path = (dir + "/manifest").str();
  auto buffer = readRegularFile(manifest.path);
  if (!buffer)
    return checkpointError(
        "cannot read the manifest of the sharded checkpoint '" + manifest.path +
        "': " + llvm::toString(buffer.takeError()));
  SmallVector<StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n', -1, /*KeepEmpty=*/false);
  if (lines.size() < 4)
    return manifest.bad("is not a trainmem sharded checkpoint's");
  if (llvm::Error error =
          parseManifestHeader(ArrayRef(lines).take_front(4), manifest))
    return std::move(error);
  for (StringRef line : llvm::drop_begin(lines, 4)) {
    SmallVector<StringRef> fields;
    line.split(fields, ' ');
    if (fields.size() == 2 && fields[0] == "tensor-parallel") {
      if (fields[1].getAsInteger(10, manifest.tensorParts) ||
          manifest.tensorParts < 1 ||
          manifest.ranks % manifest.tensorParts != 0)
        return manifest.bad("has a tensor-parallel size that does not divide "
                            "its ranks: '" +
                            line + "'");
      continue;
    }
    if ((fields.size() == 5 || fields.size() == 7) && fields[0] == "tensor") {
      if (llvm::Error error = parseManifestTensor(fields, manifest))
        return error;
      continue;
    }
    int64_t r = 0;
    Manifest::Shard shard;
    if (fields.size() != 5 || fields[0] != "shard" ||
        fields[1].getAsInteger(10, r) || r < 0 || r >= manifest.ranks ||
        fields[3].getAsInteger(10, shard.size) ||
        fields[4].getAsInteger(10, shard.hash) || manifest.shards.count(r))
      return manifest.bad("has a bad line: '" + line + "'");
    shard.file = fields[2].str();
    manifest.shards[r] = shard;
  }
  if (static_cast<int64_t>(manifest.shards.size()) != manifest.ranks)
    return manifest.bad("names " + Twine(manifest.shards.size()) +
                        " shards of its " + Twine(manifest.ranks) + " ranks");
  return manifest;
}

/// What shard `file` records of itself (version 03: the rank and layout
/// that wrote it, each tensor's split) must be what the manifest says of
/// rank `r`'s: a manifest whose shard lines or splits were rewritten names
/// state of another rank or cut another way.
static llvm::Error checkShardRecord(const Manifest &manifest, int64_t r,
                                    StringRef file,
                                    const ParsedCheckpoint &parsed) {
  if (!parsed.layout)
    return llvm::Error::success();
  const CheckpointLayout &wrote = *parsed.layout;
  if (wrote.rank != r || wrote.ranks != manifest.ranks ||
      wrote.stage != manifest.stage ||
      wrote.tensorParts != manifest.tensorParts)
    return manifest.bad(
        "names '" + file + "' as rank " + Twine(r) + "'s of " +
        Twine(manifest.ranks) + " ranks (ZeRO stage " + Twine(manifest.stage) +
        ", tensor-parallel size " + Twine(manifest.tensorParts) +
        "), but the shard holds rank " + Twine(wrote.rank) + "'s of " +
        Twine(wrote.ranks) + " ranks (ZeRO stage " + Twine(wrote.stage) +
        ", tensor-parallel size " + Twine(wrote.tensorParts) + ")");
  for (const auto &[name, type] : parsed.types) {
    auto described = manifest.tensors.find(name);
    if (described == manifest.tensors.end())
      return manifest.bad("does not describe tensor '" + name + "' of '" +
                          file + "'");
    int64_t split = described->second.splitDim.value_or(-1);
    if (type.split && *type.split != split)
      return manifest.bad("says tensor '" + name + "' is " +
                          splitText(split) + ", but '" + file +
                          "' holds it " + splitText(*type.split));
  }
  return llvm::Error::success();
}

/// Rank `r`'s shard, checked against its size and checksum, against what
/// it records of itself, and against `slots`.
static llvm::Expected<Checkpoint>
readShard(StringRef dir, const Manifest &manifest, int64_t r,
          std::optional<ArrayRef<TensorSlot>> slots) {
  const Manifest::Shard &shard = manifest.shards.at(r);
  std::string file = (dir + "/" + shard.file).str();
  auto data = readRegularFile(file);
  if (!data)
    return manifest.bad("names '" + file + "' for rank " + Twine(r) +
                        ", which cannot be read: " +
                        llvm::toString(data.takeError()));
  StringRef bytes = (*data)->getBuffer();
  if (bytes.size() != shard.size || fnv1a(bytes) != shard.hash)
    return manifest.bad("names '" + file + "' for rank " + Twine(r) +
                        " with another size or checksum: the shard is not "
                        "the one the manifest was written for");
  llvm::Expected<ParsedCheckpoint> parsed = parseCheckpointFile(file);
  if (!parsed)
    return parsed.takeError();
  if (llvm::Error error = checkShardRecord(manifest, r, file, *parsed))
    return std::move(error);
  if (slots)
    if (llvm::Error error = checkAgainstSlots(file, *parsed, *slots))
      return std::move(error);
  return std::move(parsed->checkpoint);
}

/// The manifest's step must be its shards'.
static llvm::Error checkStep(const Manifest &manifest, int64_t shardStep) {
  if (shardStep == manifest.step)
    return llvm::Error::success();
  return manifest.bad("has step " + Twine(manifest.step) +
                      ", but its shards are of step " + Twine(shardStep));
}

/// The whole tensor of `slot` from the old ranks' shards (as every old
/// rank held it, its flat shards joined, or its tensor-parallel parts
/// joined along their dimension), checked against the manifest.
static llvm::Expected<Bytes> wholeTensor(const Manifest &manifest,
                                         ArrayRef<Checkpoint> old,
                                         const TensorSlot &slot) {
  std::string name = slot.stateName();
  std::vector<int64_t> wholeShape = slot.wholeShape();
  auto saved = manifest.tensors.find(name);
  if (saved == manifest.tensors.end())
    return manifest.bad("has no " + slot.roleName() + " '" + slot.key +
                        "', which this step has");
  const Manifest::Tensor &tensor = saved->second;
  if (tensor.dtype != slot.dtypeName() || tensor.whole != wholeShape)
    return manifest.bad("has " + slot.roleName() + " '" + slot.key +
                        "' of another type or shape than this step's");
  uint64_t elementBytes = slot.bytes / std::max<int64_t>(1, slot.numElements());
  uint64_t wholeBytes = elementsOf(wholeShape) * elementBytes;
  uint64_t shardBytes = elementsOf(tensor.shard) * elementBytes;
  for (const Checkpoint &shard : old) {
    auto it = shard.tensors.find(name);
    if (it == shard.tensors.end() || it->second.size() != shardBytes)
      return manifest.bad("names shards whose " + slot.roleName() + " '" +
                          slot.key + "' is not the manifest's");
  }
  if (tensor.shard == tensor.whole)
    return old[0].tensors.at(name);
  if (tensor.splitDim) {
    // Each part: rank p's (the first data rank's group), or its ZeRO
    // shards over the data ranks d·t + p joined and unpadded.
    int64_t t = manifest.tensorParts, data = manifest.ranks / t;
    std::vector<int64_t> partShape = tensor.whole;
    partShape[*tensor.splitDim] /= t;
    uint64_t partBytes = elementsOf(partShape) * elementBytes;
    std::vector<Bytes> parts;
    for (int64_t p = 0; p < t; ++p) {
      Bytes part;
      for (int64_t d = 0; d < (tensor.shard == partShape ? 1 : data); ++d) {
        const Bytes &shard = old[d * t + p].tensors.at(name);
        part.insert(part.end(), shard.begin(), shard.end());
      }
      if (part.size() < partBytes)
        return manifest.bad("names shards of " + slot.roleName() + " '" +
                            slot.key + "' that hold less than its parts");
      part.resize(partBytes);
      parts.push_back(std::move(part));
    }
    return joinAlong<uint8_t>(parts, partShape, *tensor.splitDim, elementBytes);
  }
  // ZeRO's flat shards, one per data rank (the ranks of a tensor-parallel
  // group hold the same shard of a whole tensor).
  Bytes joined;
  for (int64_t r = 0; r < manifest.ranks; r += manifest.tensorParts) {
    const Bytes &part = old[r].tensors.at(name);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  if (joined.size() < wholeBytes)
    return manifest.bad("names shards of " + slot.roleName() + " '" + slot.key +
                        "' that hold " + Twine(joined.size()) +
                        " bytes of its " + Twine(wholeBytes));
  joined.resize(wholeBytes);
  return joined;
}

/// Rank `rank`'s part of a whole tensor: a tensor-parallel part along its
/// dimension, or a flat shard padded as a fresh one's (zeros, the code of
/// 0 for 8-bit codes).
static Bytes partOf(const TensorSlot &slot, const Bytes &wholeBytes,
                    const CheckpointLayout &layout) {
  Bytes whole = wholeBytes;
  if (slot.splitParts > 1)
    whole = partAlong<uint8_t>(whole, slot.wholeShape(), slot.splitDim,
                               slot.splitParts, layout.tensorPosition(),
                               slot.bytes /
                                   std::max<int64_t>(1, slot.numElements()));
  if (slot.fullShape.empty())
    return whole;
  uint8_t pad = 0;
  if (slot.statePart == StatePart::codes)
    pad = trainmem::zeroCode(slot.stateMap == QuantMap::signed_dynamic
                                 ? trainmem::signedDynamicMap()
                                 : trainmem::unsignedDynamicMap());
  Bytes part(slot.bytes, pad);
  uint64_t first = static_cast<uint64_t>(layout.dataRank()) * slot.bytes;
  for (uint64_t i = 0; i < slot.bytes && first + i < whole.size(); ++i)
    part[i] = whole[first + i];
  return part;
}

/// 8-bit state of a parameter split in either layout holds blocks of each
/// rank's part: it has no whole tensor to cut another way.
static llvm::Error checkBlocksKeepLayout(const Manifest &manifest,
                                         ArrayRef<TensorSlot> slots,
                                         const TensorSlot &slot,
                                         const CheckpointLayout &layout) {
  if (!isState(slot) || slot.statePart == StatePart::value)
    return llvm::Error::success();
  auto param = manifest.tensors.find("param:" + slot.stateParam);
  bool splitThen = param != manifest.tensors.end() && param->second.splitDim;
  bool splitNow = llvm::any_of(slots, [&](const TensorSlot &other) {
    return other.role == SlotRole::param && other.key == slot.stateParam &&
           other.splitParts > 1;
  });
  if (!splitThen && !splitNow)
    return llvm::Error::success();
  auto describe = [](int64_t ranks, int64_t parts, int64_t stage) {
    return std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") +
           ", tensor-parallel size " + std::to_string(parts) + ", ZeRO stage " +
           std::to_string(stage);
  };
  return manifest.bad(
      "was written by " +
      describe(manifest.ranks, manifest.tensorParts, manifest.stage) +
      "; this run has " +
      describe(layout.ranks, layout.tensorParts, layout.stage) +
      ": the 8-bit state of '" + slot.stateParam +
      "' holds blocks of each rank's part and resumes on the layout it was "
      "saved on only");
}

/// Rank `layout.rank`'s part of every state tensor of `slots` from the old
/// ranks' checkpoints of another layout.
static llvm::Expected<Checkpoint> relayout(const Manifest &manifest,
                                           ArrayRef<Checkpoint> old,
                                           ArrayRef<TensorSlot> slots,
                                           const CheckpointLayout &layout) {
  Checkpoint checkpoint;
  checkpoint.step = old[0].step;
  checkpoint.identity = old[0].identity;
  for (const TensorSlot &slot : slots) {
    if (!isState(slot))
      continue;
    if (llvm::Error error =
            checkBlocksKeepLayout(manifest, slots, slot, layout))
      return std::move(error);
    llvm::Expected<Bytes> whole = wholeTensor(manifest, old, slot);
    if (!whole)
      return whole.takeError();
    checkpoint.tensors[slot.stateName()] = partOf(slot, *whole, layout);
  }
  return checkpoint;
}

llvm::Expected<Checkpoint>
mlir::train::readShardedCheckpoint(StringRef dir, ArrayRef<TensorSlot> slots,
                                   const CheckpointLayout &layout) {
  llvm::Expected<Manifest> manifest = readManifest(dir);
  if (!manifest)
    return manifest.takeError();
  if (manifest->ranks == layout.ranks && manifest->stage == layout.stage &&
      manifest->tensorParts == layout.tensorParts) {
    llvm::Expected<Checkpoint> shard =
        readShard(dir, *manifest, layout.rank, slots);
    if (!shard)
      return shard.takeError();
    if (llvm::Error error = checkStep(*manifest, shard->step))
      return std::move(error);
    return shard;
  }

  // Another layout: every old shard, joined into whole tensors, then this
  // rank's part of each, padded as this run's shards are. The manifest
  // says what each tensor was; it must be this step's.
  std::vector<Checkpoint> old;
  for (int64_t r = 0; r < manifest->ranks; ++r) {
    llvm::Expected<Checkpoint> shard =
        readShard(dir, *manifest, r, std::nullopt);
    if (!shard)
      return shard.takeError();
    old.push_back(std::move(*shard));
    if (old[r].step != old[0].step)
      return manifest->bad("names shards of steps " + Twine(old[0].step) +
                           " and " + Twine(old[r].step));
  }
  if (llvm::Error error = checkStep(*manifest, old[0].step))
    return std::move(error);
  return relayout(*manifest, old, slots, layout);
}

llvm::Expected<Checkpoint>
mlir::train::readCheckpointFor(StringRef dir, ArrayRef<TensorSlot> slots,
                               const CheckpointLayout &layout) {
  if (layout.ranks == 1)
    return readCheckpoint(dir, slots);
  // One rank's tensors, whole: a manifest of one rank describes them.
  std::string path = (dir + "/checkpoint.bin").str();
  llvm::Expected<ParsedCheckpoint> parsed = parseCheckpointFile(path);
  if (!parsed)
    return parsed.takeError();
  // Data parallelism without shards: every rank the whole checkpoint.
  if (llvm::Error mismatch = checkAgainstSlots(path, *parsed, slots))
    llvm::consumeError(std::move(mismatch));
  else
    return std::move(parsed->checkpoint);
  Manifest manifest;
  manifest.what = "checkpoint";
  manifest.path = path;
  manifest.ranks = 1;
  manifest.step = parsed->checkpoint.step;
  for (auto &[name, type] : parsed->types)
    manifest.tensors[name] = {type.dtype, type.shape, type.shape, std::nullopt};
  std::vector<Checkpoint> old;
  old.push_back(std::move(parsed->checkpoint));
  return relayout(manifest, old, slots, layout);
}

//===----------------------------------------------------------------------===//
// A pipeline's checkpoint
//===----------------------------------------------------------------------===//

static constexpr llvm::StringLiteral kPipelineManifestHeader =
    "trainmem pipeline checkpoint 1";

std::string mlir::train::stageFileName(int64_t stage, int64_t stages) {
  return "stage-" + std::to_string(stage) + "-of-" + std::to_string(stages) +
         ".bin";
}

llvm::Error mlir::train::writePipelineManifest(StringRef dir,
                                               StringRef stepName,
                                               int64_t stages, int64_t step) {
  std::string manifest = kPipelineManifestHeader.str() + "\nstages " +
                         std::to_string(stages) + "\nstep " +
                         std::to_string(step) + "\n";
  for (int64_t k = 0; k < stages; ++k) {
    std::string file = (stepName + "/" + stageFileName(k, stages)).str();
    llvm::Expected<std::string> entry =
        manifestEntry(dir, file, "the file of stage " + Twine(k));
    if (!entry)
      return entry.takeError();
    manifest += "file " + std::to_string(k) + " " + *entry;
  }
  return writeAtomically(dir, "manifest", manifest);
}

bool mlir::train::isPipelineCheckpoint(StringRef dir) {
  // A manifest that is not a regular file (a FIFO) is not read here: the
  // sharded reader says what it is.
  auto buffer = readRegularFile(dir + "/manifest");
  if (!buffer) {
    llvm::consumeError(buffer.takeError());
    return false;
  }
  return (*buffer)->getBuffer().starts_with(
      (kPipelineManifestHeader + "\n").str());
}

namespace {
/// A pipeline checkpoint's manifest: its stages, step and files.
struct PipelineManifest {
  std::string path;
  int64_t stages = 0, step = 0;
  struct File {
    std::string name;
    uint64_t size = 0, hash = 0;
  };
  std::vector<File> files;
  llvm::Error bad(const Twine &why) const {
    return checkpointError("manifest '" + path + "' " + why);
  }
};
} // namespace

static llvm::Expected<PipelineManifest> readPipelineManifest(StringRef dir) {
  PipelineManifest manifest;
  manifest.path = (dir + "/manifest").str();
  auto buffer = readRegularFile(manifest.path);
  if (!buffer)
    return checkpointError("cannot read the manifest '" + manifest.path +
                           "': " + llvm::toString(buffer.takeError()));
  SmallVector<StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n', -1, /*KeepEmpty=*/false);
  constexpr int64_t kMaxStages = int64_t(1) << 16;
  StringRef stages = lines.size() > 1 ? lines[1] : "",
            step = lines.size() > 2 ? lines[2] : "";
  if (lines.size() < 3 || lines[0] != kPipelineManifestHeader ||
      !stages.consume_front("stages ") ||
      stages.getAsInteger(10, manifest.stages) || manifest.stages < 1 ||
      manifest.stages > kMaxStages || !step.consume_front("step ") ||
      step.getAsInteger(10, manifest.step) || manifest.step < 0)
    return manifest.bad("is not a trainmem pipeline checkpoint's");
  for (StringRef line : llvm::drop_begin(lines, 3)) {
    SmallVector<StringRef> fields;
    line.split(fields, ' ');
    int64_t stage = 0;
    PipelineManifest::File file;
    if (fields.size() != 5 || fields[0] != "file" ||
        fields[1].getAsInteger(10, stage) ||
        stage != static_cast<int64_t>(manifest.files.size()) ||
        fields[2].contains("..") || fields[3].getAsInteger(10, file.size) ||
        fields[4].getAsInteger(10, file.hash))
      return manifest.bad("has a line that is not a stage's file: '" + line +
                          "'");
    file.name = fields[2].str();
    manifest.files.push_back(std::move(file));
  }
  if (static_cast<int64_t>(manifest.files.size()) != manifest.stages)
    return manifest.bad("names " + Twine(manifest.files.size()) +
                        " files for " + Twine(manifest.stages) + " stages");
  return manifest;
}

/// The tensors of `slots` from `all` (each checked against its saved
/// type); with `partial`, `all` may hold others.
static llvm::Expected<Checkpoint>
selectSlots(const std::string &what, const Checkpoint &all,
            const std::map<std::string, SavedType> &types,
            ArrayRef<TensorSlot> slots, bool partial) {
  Checkpoint checkpoint;
  checkpoint.step = all.step;
  checkpoint.identity = all.identity;
  auto mismatch = [&](const Twine &why) {
    return checkpointError(what + " does not match this step: " + why);
  };
  for (const TensorSlot &slot : slots) {
    if (!isState(slot))
      continue;
    std::string name = slot.stateName();
    auto it = types.find(name);
    if (it == types.end())
      return mismatch("it has no " + slot.roleName() + " '" + slot.key + "'");
    SavedType expected{slot.dtypeName().str(), slot.shape};
    if (it->second.text() != expected.text() ||
        all.tensors.at(name).size() != slot.bytes)
      return mismatch(slot.roleName() + " '" + slot.key + "' is " +
                      it->second.text() + " there and " + expected.text() +
                      " here");
    checkpoint.tensors[name] = all.tensors.at(name);
  }
  if (!partial && checkpoint.tensors.size() != all.tensors.size())
    return mismatch("it holds other tensors as well");
  return checkpoint;
}

llvm::Expected<Checkpoint>
mlir::train::readPipelineCheckpoint(StringRef dir, ArrayRef<TensorSlot> slots,
                                    bool partial) {
  llvm::Expected<PipelineManifest> manifest = readPipelineManifest(dir);
  if (!manifest)
    return manifest.takeError();
  Checkpoint joined;
  std::map<std::string, SavedType> types;
  for (auto [stage, file] : llvm::enumerate(manifest->files)) {
    std::string path = (dir + "/" + file.name).str();
    auto buffer = readRegularFile(path);
    if (!buffer)
      return manifest->bad(
          "names '" + file.name + "' for stage " + Twine(stage) +
          ", which cannot be read: " + llvm::toString(buffer.takeError()));
    StringRef data = (*buffer)->getBuffer();
    if (data.size() != file.size || fnv1a(data) != file.hash)
      return manifest->bad("names '" + file.name + "' for stage " +
                           Twine(stage) +
                           " with another size or checksum than the file has");
    llvm::Expected<ParsedCheckpoint> parsed = parseCheckpointFile(path);
    if (!parsed)
      return parsed.takeError();
    if (parsed->checkpoint.step != manifest->step)
      return manifest->bad("is of step " + Twine(manifest->step) + ", '" +
                           file.name + "' of step " +
                           Twine(parsed->checkpoint.step));
    if (stage == 0)
      joined.identity = parsed->checkpoint.identity;
    joined.step = parsed->checkpoint.step;
    for (auto &[name, bytes] : parsed->checkpoint.tensors) {
      auto [it, inserted] = joined.tensors.try_emplace(name, bytes);
      if (!inserted && it->second != bytes)
        return manifest->bad("holds '" + name +
                             "' on two stages with different values");
      types.try_emplace(name, parsed->types.at(name));
    }
  }
  return selectSlots(("pipeline checkpoint '" + dir + "'").str(), joined, types,
                     slots, partial);
}

llvm::Expected<Checkpoint>
mlir::train::readStageOfCheckpoint(StringRef dir, ArrayRef<TensorSlot> slots) {
  std::string path = (dir + "/checkpoint.bin").str();
  llvm::Expected<ParsedCheckpoint> parsed = parseCheckpointFile(path);
  if (!parsed)
    return parsed.takeError();
  return selectSlots("checkpoint '" + path + "'", parsed->checkpoint,
                     parsed->types, slots, /*partial=*/true);
}

std::optional<std::string> mlir::train::describeCheckpoint(StringRef dir) {
  if (isPipelineCheckpoint(dir)) {
    llvm::Expected<PipelineManifest> manifest = readPipelineManifest(dir);
    if (!manifest) {
      llvm::consumeError(manifest.takeError());
      return std::string("a pipeline checkpoint");
    }
    return "a pipeline checkpoint of step " + std::to_string(manifest->step) +
           " over " + std::to_string(manifest->stages) + " stages";
  }
  if (llvm::sys::fs::exists(dir + "/manifest")) {
    llvm::Expected<Manifest> manifest = readManifest(dir);
    if (!manifest) {
      llvm::consumeError(manifest.takeError());
      return std::string("a sharded checkpoint");
    }
    return "a sharded checkpoint of step " + std::to_string(manifest->step) +
           " over " + std::to_string(manifest->ranks) + " ranks";
  }
  std::string path = (dir + "/checkpoint.bin").str();
  if (!llvm::sys::fs::exists(path))
    return std::nullopt;
  std::optional<uint64_t> step = checkpointStep(path);
  if (!step)
    return std::string("a file checkpoint.bin");
  if (*step == 0)
    return std::string("a checkpoint of step 0 (initial weights)");
  return "a checkpoint of step " + std::to_string(*step);
}
