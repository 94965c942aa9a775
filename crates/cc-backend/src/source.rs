//! What a kernel is given to the backend as: [`Source`] (prelude, text, signature), the
//! translation unit the backend makes of it, and its key.

use kernel_cache::{BatchKernel, Names, kernel_key};

use crate::error::CcError;
use crate::observers;
use crate::signature::Signature;
use crate::toolchain::TEXT_LINE;

/// The prelude [`Source::new`] gives a kernel: the headers the crate's generated
/// kernels use.
pub const DEFAULT_PRELUDE: &str = "#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n";

/// One kernel as the backend compiles it: its own translation unit.
///
/// The translation unit is, line by line: the prototype of the kernel's
/// [`Signature`] under its symbol, the generated uniform-ABI entry (both one line, and
/// written with compiler-predefined types, so they need no header), then `prelude`, a
/// newline, `#line 1 "kernel.c"` and `text`: the compiler's diagnostics number lines
/// as the text does (line 1 is the text's first line). Nothing of another kernel is in it: a `#define`, a `static`
/// helper or a `#pragma` of one kernel never reaches another, whichever kernels share a
/// program.
///
/// **Kernel text contract.** `prelude` is the caller's (headers, helper definitions,
/// macros); prelude and text are trusted C, as any C the caller compiles. `text` defines
/// the kernel under its symbol with a C type compatible with the signature's prototype
/// (else it fails to compile), touches no buffer element at or beyond the signature's
/// extent for it, writes only through written buffers and keeps no pointer after
/// returning (promises the compiler cannot check; the safe call relies on them). It must
/// be safe to run on several threads at once: safe calls of one [`Kernel`](crate::Kernel)
/// may overlap (no unsynchronised `static` state). Definitions with external linkage in a
/// prelude or a text (a non-`static` helper) would be defined once per kernel of a
/// program and fail to link: make helpers `static` (or `static inline`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    /// Headers and helper definitions ahead of the kernel (see [`DEFAULT_PRELUDE`]).
    pub prelude: String,
    /// The kernel's definition.
    pub text: String,
    /// The kernel's C signature.
    pub signature: Signature,
}

impl Source {
    /// A kernel of `text` and `signature`, with [`DEFAULT_PRELUDE`], its signature
    /// checked ([`Signature::check`]): a malformed one (an extent naming no parameter or
    /// a non-integer one, a name given twice, ...) is refused here, where the kernel is
    /// built, rather than when a batch holding it is resolved.
    ///
    /// Errors with [`CcError::InvalidSignature`], naming the parameter at fault.
    ///
    /// ```
    /// use cc_backend::{CcError, Elem, Extent, Signature, Source};
    /// let text = "void k(float *out, int n) { for (int i = 0; i < n; ++i) out[i] = 0; }";
    /// let sig = Signature::new().buffer_mut("out", Elem::F32, Extent::of("n"));
    /// // `n` is not declared: refused at once.
    /// let err = Source::try_new(text, sig.clone()).unwrap_err();
    /// assert!(matches!(err, CcError::InvalidSignature(_)));
    /// assert!(Source::try_new(text, sig.scalar("n", Elem::I32)).is_ok());
    /// ```
    pub fn try_new(text: impl Into<String>, signature: Signature) -> Result<Source, CcError> {
        signature.check()?;
        Ok(Source::new(text, signature))
    }

    /// A kernel of `text` and `signature`, with [`DEFAULT_PRELUDE`], unchecked: a
    /// malformed signature is refused only when the backend compiles the kernel (with
    /// [`CcError::InvalidSignature`]). Prefer [`try_new`](Source::try_new), or build the
    /// signature with [`Signature::checked`].
    pub fn new(text: impl Into<String>, signature: Signature) -> Source {
        Source {
            prelude: DEFAULT_PRELUDE.to_string(),
            text: text.into(),
            signature,
        }
    }

    /// The same kernel with `prelude` instead.
    pub fn with_prelude(mut self, prelude: impl Into<String>) -> Source {
        self.prelude = prelude.into();
        self
    }

    /// The caller's part of the translation unit: prelude, a newline, the text. This is
    /// what the key is computed over (the generated lines before it follow from the
    /// symbol and the signature).
    pub fn keyed_text(&self) -> String {
        format!("{}\n{}", self.prelude, self.text)
    }

    /// The translation unit the backend compiles for kernel `symbol`: prototype, entry,
    /// prelude, then the text after [`TEXT_LINE`], so the compiler's line numbers (and
    /// `__LINE__`) are the text's own.
    pub(crate) fn translation_unit(&self, symbol: &str) -> String {
        format!(
            "{}\n{}\n{}\n{TEXT_LINE}\n{}",
            self.signature.prototype(symbol),
            self.signature.entry(symbol),
            self.prelude,
            self.text
        )
    }

    /// The kernel's key: [`kernel_key`] over [`keyed_text`](Source::keyed_text) (its
    /// own names renamed as `names` allows, `symbol` keyed by its role where that is sound
    /// or else reduced to its kernel token: `canonical_text::Names::kernel_name_by_role`), the
    /// option list, and `backend_identity` together with the signature (its
    /// [`keyed_form`](Signature::keyed_form): types, access and extents, not the
    /// parameter names, which the text's renaming covers). Two sources
    /// with equal keys compile to the same code and promise the same extents, so the
    /// cache may answer one with the other's program, as long as the headers they
    /// include hold the same content (the key does not cover it; see
    /// [`CcBackend`](crate::CcBackend) for what checks it).
    ///
    /// For an identity a [`CcBackend`](crate::CcBackend) of this process made, the
    /// compiler is asked once per prelude and option list which macros of the prelude
    /// observe spellings or positions (they stringify or paste a parameter, or expand to
    /// `__LINE__`, `__func__` and their kin, transitively) and which names it declares:
    /// a text naming such a macro is keyed over its exact text, and a declared name or C
    /// keyword is never renamed (a bound name equal to one refuses renaming).
    pub fn key(
        &self,
        symbol: &str,
        names: &Names,
        options: &[String],
        backend_identity: &str,
    ) -> String {
        let identity = format!(
            "{backend_identity}\nsignature {}",
            self.signature.keyed_form()
        );
        let text = self.keyed_text();
        let names = observers::keyed_names(
            backend_identity,
            &self.prelude,
            options,
            &text,
            symbol,
            names,
        );
        kernel_key(&text, symbol, &names, options, identity.as_bytes())
    }

    /// A batch kernel of this source under `symbol`, keyed by [`key`](Source::key).
    pub fn batch_kernel(
        self,
        symbol: &str,
        names: &Names,
        options: Vec<String>,
        backend_identity: &str,
    ) -> BatchKernel<Source> {
        BatchKernel {
            key: self.key(symbol, names, &options, backend_identity),
            options,
            symbol: symbol.to_string(),
            source: self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::{Elem, Extent};

    #[test]
    fn the_signature_and_prelude_enter_the_key() {
        let names = Names::default();
        let text = "void k(float *o, int n) { for (int i = 0; i < n; ++i) o[i] = 1; }";
        let sig = Signature::new()
            .buffer_mut("o", Elem::F32, Extent::of("n"))
            .scalar("n", Elem::I32);
        let base = Source::new(text, sig.clone());
        let key = |s: &Source| s.key("k", &names, &[], "cc");
        assert_eq!(key(&base), key(&base.clone()));
        let longer = Source::new(
            text,
            Signature::new()
                .buffer_mut("o", Elem::F32, Extent::of("n").times(2))
                .scalar("n", Elem::I32),
        );
        assert_ne!(key(&base), key(&longer), "another extent is another kernel");
        let defined = base.clone().with_prelude("#define o q\n");
        assert_ne!(key(&base), key(&defined));
        assert_ne!(key(&base), base.key("k", &names, &[], "clang"));
        let mut written = base.clone();
        written.signature = Signature::new()
            .buffer_mut("o", Elem::F64, Extent::of("n"))
            .scalar("n", Elem::I32);
        assert_ne!(key(&base), key(&written), "another type is another kernel");
    }
}
