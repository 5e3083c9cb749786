//! Every bound of thor-storage, with the reason for its value. The log's tunable bounds are
//! fields of [`LogOptions`](crate::LogOptions); their defaults and hard limits live here, and
//! the compile-time assertions at the bottom keep the relations between them true.

/// Bytes of a log record header: `len: u32 | crc32c: u32 | lsn: u64` (see [`crate::log`]).
pub const RECORD_HEADER_BYTES: usize = 16;

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

/// The longest file name accepted by every [`Disk`](crate::Disk): the common limit of Linux
/// file systems (255 bytes).
pub const FILE_NAME_BYTES_MAX: usize = 255;

/// The longest log file-name prefix: the prefix, a dot and 16 hex digits must fit in a name.
pub const LOG_PREFIX_BYTES_MAX: usize = FILE_NAME_BYTES_MAX - 1 - 16;

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

const _: () = assert!(MEM_SECTOR_BYTES_DEFAULT > 0);
const _: () = assert!(RECORD_BYTES_MAX_DEFAULT <= RECORD_BYTES_MAX_LIMIT);
const _: () = assert!(BUFFER_BYTES_MAX_DEFAULT >= BUFFER_BYTES_MIN);
const _: () = assert!(BUFFER_BYTES_MIN > RECORD_HEADER_BYTES);
const _: () = assert!(SEGMENT_BYTES_DEFAULT > 0);
const _: () = assert!(LOG_PREFIX_BYTES_MAX > 0);
