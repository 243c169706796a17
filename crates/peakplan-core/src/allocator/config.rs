//! The allocator's settings (what `PYTORCH_CUDA_ALLOC_CONF` sets) and the size arithmetic every request goes
//! through: rounding a request, choosing its pool, and the size of the segment a pool miss asks the device for.
//!
//! Line numbers are those of the copy of `c10/cuda/CUDACachingAllocator.cpp` named in the module doc
//! ([`super`]).

use serde::{Deserialize, Serialize};

/// `kMinBlockSize` (line 118): every request is rounded to a multiple of 512 bytes, and to at least 512.
pub const MIN_BLOCK_BYTES: u64 = 512;
/// `kSmallSize` (line 120): requests up to 1 MiB go to the small pool; a large-pool block is split only
/// when more than this would remain.
pub const SMALL_SIZE_BYTES: u64 = 1 << 20;
/// `kSmallBuffer` (line 121): the small pool's segments, and its expandable segments' page size.
pub const SMALL_BUFFER_BYTES: u64 = 2 << 20;
/// `kLargeBuffer` (line 48): the segment of a 1-10 MiB request, the large pool's expandable page, and
/// how far an oversize cached block may exceed a request it serves.
pub const LARGE_BUFFER_BYTES: u64 = 20 << 20;
/// `kMinLargeAlloc` (line 123): requests from here up get a segment of their own size.
pub const MIN_LARGE_ALLOC_BYTES: u64 = 10 << 20;
/// `kRoundLarge` (line 125): segments of 10 MiB and more are rounded up to 2 MiB.
pub const ROUND_LARGE_BYTES: u64 = 2 << 20;
/// `one_exa_bytes` in `NativeCachingAllocator::allocate`: a request this large is refused before the allocator
/// sees it ("Tried to allocate more than 1EB memory").
pub const MAX_REQUEST_BYTES: u64 = 1 << 60;
/// The largest capacity modelled (4 EiB); beyond it address arithmetic could overflow and no device exists.
pub const MAX_CAPACITY_BYTES: u64 = 1 << 62;

/// The allocator's settings. `capacity_bytes` is what the allocator may reserve: PyTorch's
/// `allowed_memory_maximum`, as `torch.cuda.set_per_process_memory_fraction` sets it, checked before every
/// segment is requested (`alloc_block`, line 2629); a plain device behaves alike with its free memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllocatorConfig {
    pub capacity_bytes: u64,
    /// `max_split_size_mb` in bytes; `None` is PyTorch's default (unlimited: every block may be split).
    /// PyTorch refuses values of 20 MiB or less; they are raised to 21 MiB here.
    pub max_split_size_bytes: Option<u64>,
    /// `garbage_collection_threshold`, a fraction of the capacity in (0, 1); anything else is off, as PyTorch's
    /// parser refuses it.
    pub garbage_collection_threshold: Option<f64>,
    pub expandable_segments: bool,
    /// `roundup_power2_divisions` as one value for every size (PyTorch's per-interval list is not modelled).
    /// `None`, 0 and 1 are off; PyTorch accepts only powers of two, other values are taken down to one.
    pub roundup_power2_divisions: Option<u32>,
    /// Before every new segment, release the cached segments and retry, as PyTorch does only once the device is
    /// full: the allocator then behaves at every growth as on the smallest device that could hold the step, and
    /// its reserved peak is that device's size (to be confirmed by a replay on a device of that size: the two
    /// place blocks alike up to the first growth that a larger device would serve without releasing).
    pub release_before_growing: bool,
}

impl AllocatorConfig {
    /// PyTorch's defaults on a device of `capacity_bytes`.
    pub fn with_capacity(capacity_bytes: u64) -> Self {
        AllocatorConfig {
            capacity_bytes,
            max_split_size_bytes: None,
            garbage_collection_threshold: None,
            expandable_segments: false,
            roundup_power2_divisions: None,
            release_before_growing: false,
        }
    }
}

/// The settings as the allocator uses them: every value in the range PyTorch's parser admits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub capacity_bytes: u64,
    /// `u64::MAX` when unlimited, as `std::numeric_limits<size_t>::max()` is in PyTorch.
    pub max_split_bytes: u64,
    pub gc_threshold: Option<f64>,
    pub expandable: bool,
    /// A power of two; 1 means off.
    pub divisions: u64,
    pub release_before_growing: bool,
}

impl Limits {
    pub fn new(config: &AllocatorConfig) -> Limits {
        let max_split_bytes = match config.max_split_size_bytes {
            Some(bytes) => bytes.max(LARGE_BUFFER_BYTES + SMALL_SIZE_BYTES),
            None => u64::MAX,
        };
        let gc_threshold = config
            .garbage_collection_threshold
            .filter(|t| *t > 0.0 && *t < 1.0);
        let divisions = match config.roundup_power2_divisions {
            Some(d) if d > 1 => 1u64 << (31 - d.leading_zeros()),
            _ => 1,
        };
        Limits {
            capacity_bytes: config.capacity_bytes.min(MAX_CAPACITY_BYTES),
            max_split_bytes,
            gc_threshold,
            expandable: config.expandable_segments,
            divisions,
            release_before_growing: config.release_before_growing,
        }
    }
}

/// `round_size` (line 2026): under 512 bytes a request takes 512; with `roundup_power2_divisions` a request
/// above 512 × divisions rounds up to the next of `divisions` equal steps between two powers of two; otherwise
/// up to a multiple of 512.
pub fn round_size(size_bytes: u64, divisions: u64) -> u64 {
    if size_bytes < MIN_BLOCK_BYTES {
        MIN_BLOCK_BYTES
    } else if divisions > 1 && size_bytes > MIN_BLOCK_BYTES.saturating_mul(divisions) {
        roundup_power2_next_division(size_bytes, divisions)
    } else {
        round_up(size_bytes, MIN_BLOCK_BYTES)
    }
}

/// `roundup_power2_next_division` (line 2006): 1200 with 4 divisions lies between 1024
/// and 2048, whose quarters are 1024, 1280, 1536, 1792, so it becomes 1280. A power of two stays.
pub fn roundup_power2_next_division(size_bytes: u64, divisions: u64) -> u64 {
    if size_bytes == 0 || size_bytes.is_power_of_two() {
        return size_bytes;
    }
    let power2_floor = 1u64 << (63 - size_bytes.leading_zeros());
    // The source shifts by log2 of the divisions (a power of two), so the step is floor / divisions.
    let step = power2_floor >> (63 - divisions.max(1).leading_zeros());
    if step == 0 {
        return power2_floor.saturating_mul(2);
    }
    let floor = size_bytes & !(step - 1);
    if floor == size_bytes {
        size_bytes
    } else {
        floor.saturating_add(step)
    }
}

/// `get_allocation_size` (line 2487): the segment a pool miss asks for. A small request gets a 2 MiB
/// segment that later small requests split; a request under 10 MiB gets 20 MiB, so a few of them share one
/// segment; a larger one gets its own size rounded up to 2 MiB.
pub fn get_allocation_size(size_bytes: u64) -> u64 {
    if size_bytes <= SMALL_SIZE_BYTES {
        SMALL_BUFFER_BYTES
    } else if size_bytes < MIN_LARGE_ALLOC_BYTES {
        LARGE_BUFFER_BYTES
    } else {
        round_up(size_bytes, ROUND_LARGE_BYTES)
    }
}

/// `size` rounded up to a multiple of `unit`, saturating at the largest multiple that fits.
pub(super) fn round_up(size: u64, unit: u64) -> u64 {
    let unit = unit.max(1);
    match size.checked_add(unit - 1) {
        Some(s) => s / unit * unit,
        None => u64::MAX / unit * unit,
    }
}
