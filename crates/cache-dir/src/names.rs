//! Which file names an entry may have: the protocol's own names and staging names are never
//! entries, and no name can leave the directory.

use crate::error::Error;
use crate::lock::LOCK_FILE;
use crate::regime::STAMP_FILE;

/// The longest entry file name (the common file-system limit on one path component).
pub const MAX_NAME_LEN: usize = 255;

/// Checks that `name` may be the file name of an entry: 1 to [`MAX_NAME_LEN`] bytes of
/// `[A-Za-z0-9_.-]`, not starting with `.` (names starting with `.` are staging and hidden
/// files, which scans skip), and neither the lock file nor the stamp. So a valid name is never
/// `.` or `..`, never holds `/`, and never names a protocol file.
///
/// ```
/// assert!(cache_dir::validate_name("0f1e-cc.ron").is_ok());
/// assert!(cache_dir::validate_name("../x").is_err());
/// assert!(cache_dir::validate_name(cache_dir::LOCK_FILE).is_err());
/// ```
///
/// # Errors
/// [`Error::InvalidName`] saying which rule `name` breaks.
pub fn validate_name(name: &str) -> Result<(), Error> {
    let why = if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("longer than 255 bytes")
    } else if name.starts_with('.') {
        Some("starts with `.` (staging and hidden names)")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        Some("holds a byte outside [A-Za-z0-9_.-]")
    } else if name == LOCK_FILE || name == STAMP_FILE {
        Some("a protocol file's name")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => Err(Error::InvalidName {
            name: name.chars().take(64).collect(),
            why,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A valid name is one path component that is not a protocol or staging name.
        #[test]
        fn valid_names_stay_in_the_directory(name in "[ -~]{0,40}|[A-Za-z0-9_.-]{1,300}") {
            if validate_name(&name).is_ok() {
                let p = std::path::Path::new(&name);
                prop_assert_eq!(p.components().count(), 1);
                prop_assert!(matches!(p.components().next(), Some(std::path::Component::Normal(_))));
                prop_assert!(!name.starts_with('.'));
                prop_assert!(name != LOCK_FILE && name != STAMP_FILE);
                prop_assert!(name.len() <= MAX_NAME_LEN);
            }
        }
    }

    #[test]
    fn rejects_each_rule() {
        for bad in [
            "",
            ".",
            "..",
            ".atomicwriteX",
            "a/b",
            "a b",
            "é",
            LOCK_FILE,
            STAMP_FILE,
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_name(&"a".repeat(256)).is_err());
        assert!(validate_name(&"a".repeat(255)).is_ok());
    }
}
