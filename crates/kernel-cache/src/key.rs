//! Kernel keys over canonical text: [`kernel_key`].

use canonical_text::{Names, canonical_kernel};

use crate::backend::BatchKernel;

/// Names the layout of the parts [`kernel_key`] hashes; a change of layout changes it,
/// so keys of two layouts never meet.
const KEY_LAYOUT: &[u8] = b"kcache-kernel-key-1";

/// The key of a kernel: the canonical-text key of `text` (its own bindings renamed; its
/// name `kernel_name` keyed by its role where sound, else as its kernel token:
/// `canonical_text::Names::kernel_name_by_role`), together
/// with its compiler option list (in order: a compiler reads flags in order) and
/// `backend_identity` (what identifies the compiler, for example
/// `CcBackend::identity`).
///
/// Two kernels get equal keys exactly when their canonical forms (own-name part and
/// encoding, see `canonical_text::Canonical::key`), option lists and backend identities
/// are equal, so a hit never answers a kernel compiled under other
/// options or by another compiler; a difference in anything else costs a miss, never a
/// wrong hit. The key is taken over the text as given: the content of files the text
/// includes is not in it (a backend whose programs outlive the process checks those
/// itself, as cc-backend does for headers). The key is 64 lowercase hex characters.
///
/// ```
/// use kernel_cache::{Names, kernel_key};
/// let names = Names::default();
/// let a = "void step__seg1(float *out) { for (int i3 = 0; i3 < 4; ++i3) out[i3] = 0; }";
/// let b = "void step__seg6(float *out) { for (int i9 = 0; i9 < 4; ++i9) out[i9] = 0; }";
/// let o2 = ["-O2".to_string()];
/// assert_eq!(kernel_key(a, "step__seg1", &names, &o2, b"cc"), kernel_key(b, "step__seg6", &names, &o2, b"cc"));
/// assert_ne!(kernel_key(a, "step__seg1", &names, &o2, b"cc"), kernel_key(a, "step__seg1", &names, &[], b"cc"));
/// ```
pub fn kernel_key(
    text: &str,
    kernel_name: &str,
    names: &Names,
    options: &[String],
    backend_identity: &[u8],
) -> String {
    let count = (options.len() as u64).to_le_bytes();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(options.len() + 3);
    parts.push(KEY_LAYOUT);
    parts.push(&count);
    parts.extend(options.iter().map(|o| o.as_bytes()));
    parts.push(backend_identity);
    canonical_kernel(text, Some(kernel_name), names).key(&parts)
}

impl BatchKernel<String> {
    /// A batch kernel whose source is its `text`, keyed by [`kernel_key`].
    pub fn keyed(
        symbol: &str,
        text: String,
        names: &Names,
        options: Vec<String>,
        backend_identity: &[u8],
    ) -> Self {
        BatchKernel {
            key: kernel_key(&text, symbol, names, &options, backend_identity),
            options,
            symbol: symbol.to_string(),
            source: text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_identity_enter_the_key() {
        let names = Names::default();
        let text = "void k(float *out) { out[0] = 1.0f; }";
        let key = |opts: &[&str], id: &[u8]| {
            let opts: Vec<String> = opts.iter().map(|o| o.to_string()).collect();
            kernel_key(text, "k", &names, &opts, id)
        };
        let base = key(&["-O2"], b"cc");
        assert_eq!(base.len(), 64);
        assert_eq!(base, key(&["-O2"], b"cc"));
        assert_ne!(base, key(&["-O3"], b"cc"));
        assert_ne!(base, key(&["-O2"], b"clang"));
        assert_ne!(key(&["-O2", "-g"], b""), key(&["-g", "-O2"], b""));
        // The option count delimits the list from the identity.
        assert_ne!(key(&["-O2"], b"x"), key(&["-O2", "x"], b""));
    }
}
