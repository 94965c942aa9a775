//! Where a kcache directory keeps each store: the one layout the `kcache` tool, the demo and
//! the examples share.

use std::path::{Path, PathBuf};

/// The layout of one kcache directory `root`, shared by every program that opens its stores
/// and by the `kcache` tool that inspects them (`kcache stats DIR`, `verify DIR`, `gc DIR`):
///
/// - the **schedule store** (`schedule_cache::DiskCache`) is `root` itself
///   ([`Layout::schedules`]);
/// - the **kernel store** (`kernel_cache::store::KernelStore`) is `root/kernels`
///   ([`Layout::kernels`], [`Layout::KERNELS`]), a subdirectory the schedule store never
///   reads as an entry.
///
/// A program that opens its stores at these paths gets a directory `kcache DIR` reads whole;
/// one that puts them elsewhere gets stores the tool does not find (it then says it found
/// nothing, exit status 3). `docs/disk-format.md` ("One directory, two stores") is the
/// specification.
///
/// ```
/// use cache_dir::Layout;
///
/// let layout = Layout::new("/var/cache/my-backend");
/// assert_eq!(layout.schedules(), std::path::Path::new("/var/cache/my-backend"));
/// assert_eq!(layout.kernels(), std::path::Path::new("/var/cache/my-backend/kernels"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The kernel store's directory name inside the root.
    pub const KERNELS: &'static str = "kernels";

    /// The layout of the kcache directory `root` (nothing is created or read).
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the schedule store is: the root.
    pub fn schedules(&self) -> PathBuf {
        self.root.clone()
    }

    /// Where the kernel store is: `root/kernels`.
    pub fn kernels(&self) -> PathBuf {
        self.root.join(Self::KERNELS)
    }
}
