//! Every bound of thor-storage, with the reason for its value. The log's tunable bounds are
//! fields of [`LogOptions`](crate::LogOptions); their defaults and hard limits live here, and
//! the compile-time assertions at the bottom keep the relations between them true.

/// Bytes of a log record header: `crc32c: u32 | len: u32 | lsn: u64 | batch: u32` (see
/// [`crate::log`]).
pub const RECORD_HEADER_BYTES: usize = 20;

/// Bytes of a log segment header: `magic: [u8; 8] | version: u32 | crc32c: u32 | first_lsn:
/// u64` (see [`crate::log`]).
pub const SEGMENT_HEADER_BYTES: usize = 24;

/// Default `LogOptions::segment_bytes`: a new segment is started once the active one reaches
/// this size. 64 MiB keeps the number of files small while letting `truncate_before` free
/// space in reasonable steps.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;

/// Default `LogOptions::buffer_bytes_max`: appended but not yet written bytes. 16 MiB absorbs
/// the commits that arrive during one fsync (milliseconds on most disks) many times over, yet
/// bounds the memory a burst of commits can pin.
pub const BUFFER_BYTES_MAX_DEFAULT: usize = 16 * 1024 * 1024;

/// Default `LogOptions::record_bytes_max`: the largest payload accepted. A commit carrying more
/// than 64 MiB of new object versions is almost certainly a bug in the caller.
pub const RECORD_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;

/// The hard upper bound on `LogOptions::buffer_bytes_max`: a flush batch holds at most this
/// many bytes of records (or a single larger record), and each record's index in its batch is
/// stored in 32 bits. With records of at least a header each, the indexes stay far below 2^32.
pub const BUFFER_BYTES_MAX_LIMIT: usize = u32::MAX as usize;

/// Default `LogOptions::read_chunk_bytes`: the bytes recovery and log readers read at a time.
/// 1 MiB makes each read large enough to cost little per byte, and bounds what `open` holds
/// (two such buffers) however large the log.
pub const READ_CHUNK_BYTES_DEFAULT: usize = 1024 * 1024;

/// The alignment of a direct read (`O_DIRECT`) of a [`FileDisk`](crate::FileDisk): its file
/// offset, length and buffer address are multiples of this. `O_DIRECT` needs the device's
/// logical block size (512 on most disks, 4096 on "4Kn" ones); 4096 is a multiple of both and
/// the page size, so one constant serves every device thor expects. A device with larger
/// logical blocks makes direct reads fail with `EINVAL` (an I/O error naming the file).
pub const DIRECT_IO_ALIGN_BYTES: usize = 4096;

/// The smallest `LogOptions::read_chunk_bytes`: a few headers' worth. Tests use small chunks
/// to exercise records that span reads.
pub const READ_CHUNK_BYTES_MIN: usize = 64;

/// How many files keeping torn log tails may share one LSN (`{prefix}.{lsn}.torn`, then
/// `.torn.1` ... `.torn.63`). A second file for an LSN appears only when a crash interrupts
/// recovery's own cut and leaves a different tail (an open that finds a file already holding
/// the same tail, or a prefix of it, reuses it, and removes a copy it could not finish, so
/// failed opens add none); 64 such crashes in a row mean something else is wrong, and `open`
/// then refuses rather than overwrite evidence.
pub const TORN_FILES_PER_LSN_MAX: u32 = 64;

/// The longest suffix a torn-tail file adds to a segment name: `.torn.63`.
pub const TORN_SUFFIX_BYTES_MAX: usize = 8;

/// The hard upper bound on `LogOptions::record_bytes_max`: the record header stores the
/// payload length in 32 bits, and the header plus payload must also fit in a `u32`.
pub const RECORD_BYTES_MAX_LIMIT: usize = u32::MAX as usize - RECORD_HEADER_BYTES;

/// The smallest `LogOptions::buffer_bytes_max`: room for a header and a few payload bytes, so
/// that small records are not all forced through one-record flushes. Records larger than the
/// buffer are still accepted (they are written alone), see [`crate::log`].
pub const BUFFER_BYTES_MIN: usize = 64;

/// Capacity above which a flushed buffer is released rather than kept for reuse. A single
/// oversized batch (a huge record) should not pin its memory for the life of the log.
pub const BUFFER_KEEP_BYTES_MAX: usize = 4 * 1024 * 1024;

/// The smallest payload [`Log::append_shared`](crate::Log::append_shared) keeps by reference
/// instead of copying into the pending buffer. Each such record costs its flush one more
/// write call, so small records (most commits) are copied, and a batch holds at most
/// `BUFFER_BYTES_MAX_LIMIT / SHARED_RECORD_BYTES_MIN + 1` of them.
pub const SHARED_RECORD_BYTES_MIN: usize = 64 * 1024;
const _: () = assert!(SHARED_RECORD_BYTES_MIN > BUFFER_BYTES_MIN);

/// The longest file name accepted by every [`Disk`](crate::Disk): the common limit of Linux
/// file systems (255 bytes).
pub const FILE_NAME_BYTES_MAX: usize = 255;

/// The longest log file-name prefix: the prefix, a dot, 16 hex digits and the longest torn-tail
/// suffix must fit in a name.
pub const LOG_PREFIX_BYTES_MAX: usize = FILE_NAME_BYTES_MAX - 1 - 16 - TORN_SUFFIX_BYTES_MAX;

/// The largest file a [`MemDisk`](crate::MemDisk) holds. Its files are plain `Vec`s, so a
/// write at a huge offset (a corrupt length, a page id near the top of the range) would try to
/// allocate that much memory and abort the test process; past this bound it is refused with
/// [`StorageError::InvalidArgument`](crate::StorageError::InvalidArgument) instead. 1 GiB is far
/// above what any in-memory test writes.
pub const MEM_FILE_BYTES_MAX: u64 = 1 << 30;

/// The default sector of a [`MemDisk`](crate::MemDisk): the unit a simulated crash tears
/// writes into. 512 bytes is the smallest atomic write unit of real drives (4 KiB on many), and
/// code correct at the smallest unit is correct at every larger one.
pub const MEM_SECTOR_BYTES_DEFAULT: usize = 512;

/// The unit an [`OverlayDisk`](crate::OverlayDisk) copies a file in on its first write there:
/// a page of the smallest database page size is never split across more than one write of it,
/// the file system's usual block, and small enough that a scattered write costs little memory.
pub const OVERLAY_BLOCK_BYTES: usize = 4096;

/// The most bytes of a directory's `LOCK` file read to name its holder. The file is a few
/// short lines; anything longer was not written by thor, and is not worth more memory.
pub const LOCK_FILE_BYTES_MAX: usize = 4096;

/// The longest field (program name, host name) written to or shown from a `LOCK` file: enough
/// for any real program or host name, short enough for an error message.
pub const LOCK_FIELD_BYTES_MAX: usize = 256;

const _: () = assert!(LOCK_FIELD_BYTES_MAX < LOCK_FILE_BYTES_MAX);
const _: () = assert!(MEM_SECTOR_BYTES_DEFAULT > 0);
const _: () = assert!(OVERLAY_BLOCK_BYTES.is_power_of_two());
const _: () =
    assert!(DIRECT_IO_ALIGN_BYTES.is_power_of_two() && DIRECT_IO_ALIGN_BYTES.is_multiple_of(512));
const _: () = assert!(RECORD_BYTES_MAX_DEFAULT <= RECORD_BYTES_MAX_LIMIT);
const _: () = assert!(BUFFER_BYTES_MAX_DEFAULT >= BUFFER_BYTES_MIN);
const _: () = assert!(BUFFER_BYTES_MAX_DEFAULT <= BUFFER_BYTES_MAX_LIMIT);
// A batch's record indexes (0 ..= one more than the records of headers that fit the buffer)
// fit the 32-bit batch field.
const _: () = assert!(BUFFER_BYTES_MAX_LIMIT / RECORD_HEADER_BYTES < u32::MAX as usize);
const _: () = assert!(READ_CHUNK_BYTES_DEFAULT >= READ_CHUNK_BYTES_MIN);
const _: () = assert!(READ_CHUNK_BYTES_MIN >= SEGMENT_HEADER_BYTES);
const _: () = assert!(READ_CHUNK_BYTES_MIN >= RECORD_HEADER_BYTES);
const _: () = assert!(TORN_FILES_PER_LSN_MAX <= 100, ".torn.NN has two digits at most");
const _: () = assert!(BUFFER_BYTES_MIN > RECORD_HEADER_BYTES);
const _: () = assert!(SEGMENT_BYTES_DEFAULT > 0);
const _: () = assert!(LOG_PREFIX_BYTES_MAX > 0);
