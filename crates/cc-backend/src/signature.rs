//! What a kernel's C function looks like to the caller: its [`Signature`] (parameter
//! kinds and how long each buffer must be), the arguments of a safe call ([`Arg`]) and
//! the C the backend generates from a signature (a prototype and a uniform-ABI entry).

use std::fmt::{self, Write as _};

use crate::error::CcError;

/// The element type of a buffer parameter, or the type of a scalar parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    /// `float` (Rust `f32`).
    F32,
    /// `double` (Rust `f64`).
    F64,
    /// `int32_t` (Rust `i32`).
    I32,
    /// `int64_t` (Rust `i64`).
    I64,
    /// `uint8_t` (Rust `u8`).
    U8,
    /// IEEE half precision carried as its bits: `uint16_t` in C, `u16` in Rust.
    F16Bits,
}

impl Elem {
    const ALL: [Elem; 6] = [
        Elem::F32,
        Elem::F64,
        Elem::I32,
        Elem::I64,
        Elem::U8,
        Elem::F16Bits,
    ];

    /// The C type the prototype uses. Compiler-predefined type macros (the types
    /// `<stdint.h>` itself uses), so the generated header needs no include and the
    /// caller's prelude comes before any include.
    fn c_type(self) -> &'static str {
        match self {
            Elem::F32 => "float",
            Elem::F64 => "double",
            Elem::I32 => "__INT32_TYPE__",
            Elem::I64 => "__INT64_TYPE__",
            Elem::U8 => "__UINT8_TYPE__",
            Elem::F16Bits => "__UINT16_TYPE__",
        }
    }

    fn code(self) -> u8 {
        match self {
            Elem::F32 => 0,
            Elem::F64 => 1,
            Elem::I32 => 2,
            Elem::I64 => 3,
            Elem::U8 => 4,
            Elem::F16Bits => 5,
        }
    }

    fn from_code(code: u8) -> Option<Elem> {
        Elem::ALL.into_iter().find(|e| e.code() == code)
    }

    /// Whether a scalar of this type can size a buffer.
    fn is_integer(self) -> bool {
        matches!(self, Elem::I32 | Elem::I64 | Elem::U8)
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Elem::F32 => "f32",
            Elem::F64 => "f64",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
            Elem::U8 => "u8",
            Elem::F16Bits => "f16 bits (u16)",
        })
    }
}

/// How many elements a buffer must hold at least: `times` x the product of the named
/// integer scalar parameters' values at the call (`times` alone when none is named).
///
/// The kernel promises to touch no element at or beyond that count; a call whose
/// buffer is shorter is refused ([`CcError::BufferTooShort`]). A named scalar with a
/// negative value, or a product that overflows, refuses the call too.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    /// The constant factor.
    pub times: usize,
    /// The integer scalar parameters multiplied in, by name.
    pub scalars: Vec<String>,
}

impl Extent {
    /// Exactly `count` elements, whatever the scalars say.
    pub fn fixed(count: usize) -> Extent {
        Extent {
            times: count,
            scalars: Vec::new(),
        }
    }

    /// As many elements as the integer scalar parameter `scalar` says.
    pub fn of(scalar: &str) -> Extent {
        Extent::product([scalar])
    }

    /// The product of the named integer scalar parameters (for example `m * k`).
    pub fn product<'a>(scalars: impl IntoIterator<Item = &'a str>) -> Extent {
        Extent {
            times: 1,
            scalars: scalars.into_iter().map(str::to_string).collect(),
        }
    }

    /// The same extent multiplied by `factor` (for example `4 * n`).
    pub fn times(mut self, factor: usize) -> Extent {
        self.times = self.times.saturating_mul(factor);
        self
    }
}

impl fmt::Display for Extent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scalars.is_empty() {
            return write!(f, "{}", self.times);
        }
        if self.times != 1 {
            write!(f, "{}*", self.times)?;
        }
        f.write_str(&self.scalars.join("*"))
    }
}

/// One parameter of a kernel, in C parameter order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// A pointer to `len` elements of `elem`: `const elem *` unless `writes`.
    Buffer {
        /// The parameter's name (for messages and for extents; the C prototype is
        /// unnamed).
        name: String,
        /// The element type.
        elem: Elem,
        /// Whether the kernel writes through it (`elem *` rather than `const elem *`).
        writes: bool,
        /// How many elements it must hold at least.
        len: Extent,
    },
    /// A value of `elem`, passed by value.
    Scalar {
        /// The parameter's name.
        name: String,
        /// Its type.
        elem: Elem,
    },
}

impl Param {
    /// The parameter's name.
    pub fn name(&self) -> &str {
        match self {
            Param::Buffer { name, .. } | Param::Scalar { name, .. } => name,
        }
    }

    fn c_decl(&self) -> String {
        match self {
            Param::Buffer {
                elem, writes: true, ..
            } => format!("{} *", elem.c_type()),
            Param::Buffer { elem, .. } => format!("const {} *", elem.c_type()),
            Param::Scalar { elem, .. } => elem.c_type().to_string(),
        }
    }
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Param::Buffer {
                name,
                elem,
                writes,
                len,
            } => {
                let access = if *writes { "mut" } else { "const" };
                write!(f, "{name}: {access} [{elem}; >= {len}]")
            }
            Param::Scalar { name, elem } => write!(f, "{name}: {elem}"),
        }
    }
}

/// The most parameters a signature may declare.
pub const MAX_PARAMS: usize = 64;

/// A kernel's C signature, declared once per kernel: `void name(<params>)`.
///
/// The backend writes the matching prototype ahead of the kernel's text, so a
/// definition of another C type (another parameter type, const-ness or count) fails to
/// compile; it also generates the uniform-ABI entry [`Kernel::call`](crate::Kernel::call)
/// goes through. The buffer extents are the kernel's promise (the compiler cannot check
/// them): the kernel touches no element of a buffer at or beyond its extent.
///
/// The parameter names are the signature's own: extents name scalars by them, errors
/// report them. The prototype is written without names, so they need not match the
/// names the kernel's text gives its parameters (nor enter the key: see
/// [`Source::key`](crate::Source::key)); only the order, types and const-ness do.
///
/// ```
/// use cc_backend::{Elem, Extent, Signature};
/// // void matmul(float *c, const float *a, const float *b, int m, int k, int n)
/// let sig = Signature::new()
///     .buffer_mut("c", Elem::F32, Extent::product(["m", "n"]))
///     .buffer("a", Elem::F32, Extent::product(["m", "k"]))
///     .buffer("b", Elem::F32, Extent::product(["k", "n"]))
///     .scalar("m", Elem::I32)
///     .scalar("k", Elem::I32)
///     .scalar("n", Elem::I32);
/// assert!(sig.check().is_ok());
/// assert_eq!(sig.to_string(), "(c: mut [f32; >= m*n], a: const [f32; >= m*k], b: const [f32; >= k*n], m: i32, k: i32, n: i32)");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Signature {
    /// The parameters, in order.
    pub params: Vec<Param>,
}

impl Signature {
    /// No parameters yet.
    pub fn new() -> Signature {
        Signature::default()
    }

    /// `(float *out, const float *a, const float *b, int n)`, each buffer of `n`
    /// elements: the signature of the generated kernels of the tests and benches
    /// (test-support's `kernels`).
    pub fn out_a_b_n() -> Signature {
        Signature::new()
            .buffer_mut("out", Elem::F32, Extent::of("n"))
            .buffer("a", Elem::F32, Extent::of("n"))
            .buffer("b", Elem::F32, Extent::of("n"))
            .scalar("n", Elem::I32)
    }

    /// Adds a read-only buffer parameter (`const elem *`).
    pub fn buffer(mut self, name: &str, elem: Elem, len: Extent) -> Signature {
        self.params.push(Param::Buffer {
            name: name.to_string(),
            elem,
            writes: false,
            len,
        });
        self
    }

    /// Adds a written buffer parameter (`elem *`).
    pub fn buffer_mut(mut self, name: &str, elem: Elem, len: Extent) -> Signature {
        self.params.push(Param::Buffer {
            name: name.to_string(),
            elem,
            writes: true,
            len,
        });
        self
    }

    /// Adds a scalar parameter.
    pub fn scalar(mut self, name: &str, elem: Elem) -> Signature {
        self.params.push(Param::Scalar {
            name: name.to_string(),
            elem,
        });
        self
    }

    /// The signature built so far, checked: ends a builder chain so that a malformed
    /// signature is refused where it is written, not at the first resolve of a kernel of
    /// it (`Signature::new().buffer(..).scalar(..).checked()?`).
    ///
    /// Errors with [`CcError::InvalidSignature`] as [`check`](Signature::check) does,
    /// naming the parameter at fault.
    ///
    /// ```
    /// use cc_backend::{Elem, Extent, Signature};
    /// // The extent names `m`, which is no parameter.
    /// let err = Signature::new()
    ///     .buffer_mut("out", Elem::F32, Extent::of("m"))
    ///     .scalar("n", Elem::I32)
    ///     .checked()
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("`m`"), "{err}");
    /// ```
    pub fn checked(self) -> Result<Signature, CcError> {
        self.check()?;
        Ok(self)
    }

    /// Checks that the signature is well-formed: at most [`MAX_PARAMS`] parameters,
    /// names that are distinct C identifiers, and every extent naming an integer
    /// (`I32`, `I64`, `U8`) scalar parameter. [`checked`](Signature::checked) and
    /// [`Source::try_new`](crate::Source::try_new) check this when a kernel is built;
    /// the backend checks it again before compiling (a [`Signature`] built without
    /// them, or changed through its public field, is refused there).
    pub fn check(&self) -> Result<(), CcError> {
        let bad = |why: String| Err(CcError::InvalidSignature(format!("{self}: {why}")));
        if self.params.len() > MAX_PARAMS {
            return bad(format!("more than {MAX_PARAMS} parameters"));
        }
        for (i, p) in self.params.iter().enumerate() {
            if !is_c_identifier(p.name()) {
                return bad(format!("parameter {i}'s name is not a C identifier"));
            }
            if self.params[..i].iter().any(|q| q.name() == p.name()) {
                return bad(format!("parameter name `{}` given twice", p.name()));
            }
        }
        for p in &self.params {
            if let Param::Buffer { name, len, .. } = p {
                for s in &len.scalars {
                    match self.scalar_index(s) {
                        Some((_, elem)) if elem.is_integer() => {}
                        Some((_, elem)) => {
                            return bad(format!(
                                "buffer `{name}`'s extent names scalar `{s}`, of type {elem}, not an integer"
                            ));
                        }
                        None => {
                            return bad(format!(
                                "buffer `{name}`'s extent names `{s}`, which is no scalar parameter"
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn scalar_index(&self, name: &str) -> Option<(usize, Elem)> {
        self.params.iter().enumerate().find_map(|(i, p)| match p {
            Param::Scalar { name: n, elem } if n == name => Some((i, *elem)),
            _ => None,
        })
    }

    /// The signature as a kernel key sees it: parameter names left out (they do not change
    /// what the kernel computes or accesses; extents name their scalars by position), so
    /// renamed twins with renamed parameters keep one key.
    pub fn keyed_form(&self) -> String {
        let mut out = String::from("(");
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            match p {
                Param::Buffer {
                    elem, writes, len, ..
                } => {
                    let access = if *writes { "mut" } else { "const" };
                    let _ = write!(out, "{access} [{elem}; >= {}", len.times);
                    for s in &len.scalars {
                        match self.scalar_index(s) {
                            Some((j, _)) => {
                                let _ = write!(out, "*#{j}");
                            }
                            // Unchecked signature: keep the name (never a wrong hit).
                            None => {
                                let _ = write!(out, "*{s}");
                            }
                        }
                    }
                    out.push(']');
                }
                Param::Scalar { elem, .. } => {
                    let _ = write!(out, "{elem}");
                }
            }
        }
        out.push(')');
        out
    }

    /// The C prototype of kernel `symbol`, on one line (parameters unnamed).
    pub(crate) fn prototype(&self, symbol: &str) -> String {
        let params: Vec<String> = self.params.iter().map(Param::c_decl).collect();
        let params = if params.is_empty() {
            "void".to_string()
        } else {
            params.join(", ")
        };
        format!("void {symbol}({params});")
    }

    /// The uniform-ABI entry of kernel `symbol`, on one line: `void
    /// <entry>(void *const *args)`, where `args[i]` is the data pointer of buffer `i`
    /// or a pointer to the value of scalar `i`.
    pub(crate) fn entry(&self, symbol: &str) -> String {
        let mut call = String::new();
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                call.push_str(", ");
            }
            match p {
                Param::Buffer { .. } => {
                    let _ = write!(call, "({})args[{i}]", p.c_decl());
                }
                Param::Scalar { elem, .. } => {
                    let _ = write!(call, "*(const {} *)args[{i}]", elem.c_type());
                }
            }
        }
        format!(
            "void {}(void *const *args) {{ (void)args; {symbol}({call}); }}",
            entry_symbol(symbol)
        )
    }

    /// Checks `args` against the signature: count, kinds, then every buffer's length
    /// against its extent. Returns the pointer array for the entry.
    pub(crate) fn marshal(
        &self,
        symbol: &str,
        args: &mut [Arg<'_>],
    ) -> Result<Vec<*mut std::ffi::c_void>, CcError> {
        if args.len() != self.params.len() {
            return Err(CcError::ArgCount {
                symbol: symbol.to_string(),
                expected: self.params.len(),
                given: args.len(),
            });
        }
        for (i, (p, a)) in self.params.iter().zip(args.iter()).enumerate() {
            let (elem, writes, is_buffer) = a.kind();
            let fits = match p {
                Param::Buffer {
                    elem: e, writes: w, ..
                } => is_buffer && *e == elem && *w == writes,
                Param::Scalar { elem: e, .. } => !is_buffer && *e == elem,
            };
            if !fits {
                return Err(CcError::ArgKind {
                    symbol: symbol.to_string(),
                    index: i,
                    param: p.to_string(),
                    given: a.describe(),
                });
            }
        }
        for (i, (p, a)) in self.params.iter().zip(args.iter()).enumerate() {
            let Param::Buffer { name, len, .. } = p else {
                continue;
            };
            let mut needed = Some(len.times);
            for s in &len.scalars {
                let (j, _) = self
                    .scalar_index(s)
                    .ok_or_else(|| CcError::InvalidSignature(format!("{self}")))?;
                let value = args[j].integer().unwrap_or(-1);
                let value = usize::try_from(value).map_err(|_| CcError::BadExtent {
                    symbol: symbol.to_string(),
                    param: name.clone(),
                    why: format!("scalar `{s}` is negative ({value})"),
                })?;
                needed = needed.and_then(|n| n.checked_mul(value));
            }
            let needed = needed.ok_or_else(|| CcError::BadExtent {
                symbol: symbol.to_string(),
                param: name.clone(),
                why: format!("{len} overflows"),
            })?;
            let given = a.len();
            if given < needed {
                return Err(CcError::BufferTooShort {
                    symbol: symbol.to_string(),
                    index: i,
                    param: name.clone(),
                    needed,
                    given,
                });
            }
        }
        Ok(args.iter_mut().map(Arg::pointer).collect())
    }

    /// The signature's bytes in a saved program (see `persist.rs`).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, self.params.len());
        for p in &self.params {
            match p {
                Param::Buffer {
                    name,
                    elem,
                    writes,
                    len,
                } => {
                    out.push(if *writes { 1 } else { 0 });
                    out.push(elem.code());
                    put_str(out, name);
                    put_u64(out, len.times as u64);
                    put_u32(out, len.scalars.len());
                    for s in &len.scalars {
                        put_str(out, s);
                    }
                }
                Param::Scalar { name, elem } => {
                    out.push(2);
                    out.push(elem.code());
                    put_str(out, name);
                }
            }
        }
    }

    /// Decodes [`encode`](Signature::encode)'s bytes from `r`; `None` when malformed.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Option<Signature> {
        let n = r.u32()?;
        if n > MAX_PARAMS {
            return None;
        }
        let mut params = Vec::with_capacity(n);
        for _ in 0..n {
            let tag = r.byte()?;
            let elem = Elem::from_code(r.byte()?)?;
            let name = r.string()?;
            params.push(match tag {
                0 | 1 => {
                    let times = usize::try_from(r.u64()?).ok()?;
                    let count = r.u32()?;
                    if count > MAX_PARAMS {
                        return None;
                    }
                    let scalars = (0..count).map(|_| r.string()).collect::<Option<_>>()?;
                    Param::Buffer {
                        name,
                        elem,
                        writes: tag == 1,
                        len: Extent { times, scalars },
                    }
                }
                2 => Param::Scalar { name, elem },
                _ => return None,
            });
        }
        let signature = Signature { params };
        signature.check().ok()?;
        Some(signature)
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{p}")?;
        }
        f.write_str(")")
    }
}

/// Whether `s` is a C identifier (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks a kernel symbol: a C identifier holding no generated symbol's
/// [`RESERVED_INFIX`](RESERVED_INFIX) (`__kcache_`).
pub(crate) fn check_symbol(symbol: &str) -> Result<(), CcError> {
    if is_c_identifier(symbol) && !symbol.contains(RESERVED_INFIX) {
        Ok(())
    } else {
        Err(CcError::InvalidSymbol(symbol.to_string()))
    }
}

/// The symbol of kernel `symbol`'s uniform-ABI entry. Kernel symbols ending in this
/// suffix are refused, so an entry never collides with a kernel.
pub(crate) fn entry_symbol(symbol: &str) -> String {
    format!("{symbol}{ENTRY_SUFFIX}")
}

/// The suffix of a generated entry's symbol.
pub(crate) const ENTRY_SUFFIX: &str = "__kcache_entry";

/// What every symbol the backend generates for a kernel holds (the entry's
/// [`ENTRY_SUFFIX`], the exported function's [`KERNEL_SUFFIX`]): no kernel's own symbol
/// may hold it, and a unit that refers to such a symbol it does not define is refused
/// ([`CcError::ReservedReference`](crate::CcError::ReservedReference)).
pub(crate) const RESERVED_INFIX: &str = "__kcache_";

/// The suffix of the name a kernel's own function is exported under from its program (on
/// ELF targets, where every other symbol of a unit is made local before the link): the
/// kernel's symbol itself is local, so no companion's reference can bind to it.
pub(crate) const KERNEL_SUFFIX: &str = "__kcache_kernel";

/// The name kernel `symbol`'s own function is exported under ([`KERNEL_SUFFIX`]; the
/// symbol itself on Apple targets, whose objects are not localized).
pub(crate) fn exported_symbol(symbol: &str) -> String {
    if cfg!(target_vendor = "apple") {
        symbol.to_string()
    } else {
        format!("{symbol}{KERNEL_SUFFIX}")
    }
}

/// One argument of a safe [`Kernel::call`](crate::Kernel::call): a buffer (shared for
/// a `const` pointer parameter, exclusive for a written one) or a scalar value. Its
/// kind must be exactly the parameter's.
#[derive(Debug)]
pub enum Arg<'a> {
    /// `const float *`.
    F32(&'a [f32]),
    /// `float *`.
    F32Mut(&'a mut [f32]),
    /// `const double *`.
    F64(&'a [f64]),
    /// `double *`.
    F64Mut(&'a mut [f64]),
    /// `const int32_t *`.
    I32(&'a [i32]),
    /// `int32_t *`.
    I32Mut(&'a mut [i32]),
    /// `const int64_t *`.
    I64(&'a [i64]),
    /// `int64_t *`.
    I64Mut(&'a mut [i64]),
    /// `const uint8_t *`.
    U8(&'a [u8]),
    /// `uint8_t *`.
    U8Mut(&'a mut [u8]),
    /// `const uint16_t *` holding half-precision bits.
    F16Bits(&'a [u16]),
    /// `uint16_t *` holding half-precision bits.
    F16BitsMut(&'a mut [u16]),
    /// A `float` value.
    F32Scalar(f32),
    /// A `double` value.
    F64Scalar(f64),
    /// An `int32_t` value.
    I32Scalar(i32),
    /// An `int64_t` value.
    I64Scalar(i64),
    /// A `uint8_t` value.
    U8Scalar(u8),
    /// A `uint16_t` value holding half-precision bits.
    F16BitsScalar(u16),
}

/// [`Arg`]'s methods that look at each kind, from one table: per element type, the shared
/// buffer, the written buffer and the scalar variant.
macro_rules! arg_kinds {
    ($($shared:ident, $written:ident, $scalar:ident: $elem:ident;)*) => {
        impl Arg<'_> {
            /// `(element type, written, is a buffer)`.
            fn kind(&self) -> (Elem, bool, bool) {
                match self {
                    $(
                        Arg::$shared(_) => (Elem::$elem, false, true),
                        Arg::$written(_) => (Elem::$elem, true, true),
                        Arg::$scalar(_) => (Elem::$elem, false, false),
                    )*
                }
            }

            /// A buffer's length in elements (0 for a scalar).
            fn len(&self) -> usize {
                match self {
                    $(
                        Arg::$shared(s) => s.len(),
                        Arg::$written(s) => s.len(),
                        Arg::$scalar(_) => 0,
                    )*
                }
            }

            /// The pointer the entry receives: a buffer's data pointer (from the exclusive
            /// slice for a written buffer), or a pointer to the scalar value held in `self`.
            fn pointer(&mut self) -> *mut std::ffi::c_void {
                match self {
                    $(
                        Arg::$shared(s) => s.as_ptr() as *mut std::ffi::c_void,
                        Arg::$written(s) => s.as_mut_ptr().cast(),
                        Arg::$scalar(v) => std::ptr::from_mut(v).cast(),
                    )*
                }
            }
        }
    };
}

arg_kinds! {
    F32, F32Mut, F32Scalar: F32;
    F64, F64Mut, F64Scalar: F64;
    I32, I32Mut, I32Scalar: I32;
    I64, I64Mut, I64Scalar: I64;
    U8, U8Mut, U8Scalar: U8;
    F16Bits, F16BitsMut, F16BitsScalar: F16Bits;
}

impl Arg<'_> {
    fn describe(&self) -> String {
        match self.kind() {
            (elem, true, true) => format!("mut [{elem}] of {}", self.len()),
            (elem, false, true) => format!("const [{elem}] of {}", self.len()),
            (elem, _, false) => format!("{elem} scalar"),
        }
    }

    /// An integer scalar's value.
    fn integer(&self) -> Option<i64> {
        match self {
            Arg::I32Scalar(v) => Some(i64::from(*v)),
            Arg::I64Scalar(v) => Some(*v),
            Arg::U8Scalar(v) => Some(i64::from(*v)),
            _ => None,
        }
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(&n.to_le_bytes());
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// A bounds-checked reader over saved bytes: every read is `None` past the end.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub(crate) fn u32(&mut self) -> Option<usize> {
        let b = self.take(4)?;
        usize::try_from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok()
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }

    pub(crate) fn string(&mut self) -> Option<String> {
        let n = self.u32()?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).ok()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn c_identifiers() {
        assert!(is_c_identifier("k_1"));
        assert!(is_c_identifier("_x"));
        assert!(!is_c_identifier("1k"));
        assert!(!is_c_identifier(""));
        assert!(!is_c_identifier("a b"));
        assert!(!is_c_identifier("a);int x("));
        assert!(check_symbol("k").is_ok());
        assert!(check_symbol("k__kcache_entry").is_err());
    }

    #[test]
    fn prototype_and_entry_follow_the_params() {
        let sig = Signature::out_a_b_n();
        assert_eq!(
            sig.prototype("k"),
            "void k(float *, const float *, const float *, __INT32_TYPE__);"
        );
        assert_eq!(
            sig.entry("k"),
            "void k__kcache_entry(void *const *args) { (void)args; k((float *)args[0], \
             (const float *)args[1], (const float *)args[2], *(const __INT32_TYPE__ *)args[3]); }"
        );
        assert_eq!(Signature::new().prototype("z"), "void z(void);");
        assert_eq!(
            sig.keyed_form(),
            "(mut [f32; >= 1*#3], const [f32; >= 1*#3], const [f32; >= 1*#3], i32)"
        );
        let renamed = Signature::new()
            .buffer_mut("o", Elem::F32, Extent::of("m"))
            .buffer("x", Elem::F32, Extent::of("m"))
            .buffer("y", Elem::F32, Extent::of("m"))
            .scalar("m", Elem::I32);
        assert_eq!(renamed.keyed_form(), sig.keyed_form());
    }

    #[test]
    fn malformed_signatures_are_refused() {
        let dup = Signature::new()
            .scalar("n", Elem::I32)
            .scalar("n", Elem::I64);
        assert!(dup.check().is_err());
        let float_extent = Signature::new()
            .buffer("a", Elem::F32, Extent::of("x"))
            .scalar("x", Elem::F32);
        assert!(float_extent.check().is_err());
        let missing = Signature::new().buffer("a", Elem::F32, Extent::of("n"));
        assert!(missing.check().is_err());
        let bad_name = Signature::new().scalar("a b", Elem::I32);
        assert!(bad_name.check().is_err());
    }

    #[test]
    fn encoding_round_trips_and_truncations_are_refused() {
        let sig = Signature::new()
            .buffer_mut("o", Elem::F16Bits, Extent::product(["m", "n"]).times(3))
            .buffer("x", Elem::U8, Extent::fixed(7))
            .scalar("m", Elem::I64)
            .scalar("n", Elem::U8)
            .scalar("s", Elem::F64);
        let mut bytes = Vec::new();
        sig.encode(&mut bytes);
        let back = Signature::decode(&mut Reader { bytes: &bytes }).unwrap();
        assert_eq!(back, sig);
        for cut in 0..bytes.len() {
            assert!(
                Signature::decode(&mut Reader {
                    bytes: &bytes[..cut]
                })
                .is_none()
            );
        }
    }

    use proptest::prelude::*;

    /// A buffer of `elem` and `len` elements (shared or exclusive), or a scalar.
    #[derive(Clone, Debug)]
    enum Given {
        Buffer(Elem, bool, usize),
        Scalar(Elem, i64),
    }

    fn elem() -> impl Strategy<Value = Elem> {
        proptest::sample::select(Elem::ALL.to_vec())
    }

    fn given() -> impl Strategy<Value = Given> {
        prop_oneof![
            (elem(), any::<bool>(), 0usize..40).prop_map(|(e, w, l)| Given::Buffer(e, w, l)),
            (elem(), -3i64..12).prop_map(|(e, v)| Given::Scalar(e, v)),
        ]
    }

    /// A signature of up to 6 parameters: each a buffer whose extent is a constant times
    /// up to two of the integer scalars, or a scalar.
    fn signature() -> impl Strategy<Value = Signature> {
        proptest::collection::vec(
            (
                any::<bool>(),
                elem(),
                any::<bool>(),
                0usize..5,
                proptest::collection::vec(0usize..6, 0..3),
            ),
            0..6,
        )
        .prop_map(|params| {
            let mut sig = Signature::new();
            for (i, (is_buffer, elem, writes, times, _)) in params.iter().enumerate() {
                let name = format!("p{i}");
                if !*is_buffer {
                    sig = sig.scalar(&name, *elem);
                    continue;
                }
                sig.params.push(Param::Buffer {
                    name,
                    elem: *elem,
                    writes: *writes,
                    len: Extent::fixed(*times),
                });
            }
            // Extents may name the integer scalars only.
            let ints: Vec<String> = sig
                .params
                .iter()
                .filter_map(|p| match p {
                    Param::Scalar { name, elem } if elem.is_integer() => Some(name.clone()),
                    _ => None,
                })
                .collect();
            for (p, (.., picks)) in sig.params.iter_mut().zip(&params) {
                if let Param::Buffer { len, .. } = p
                    && !ints.is_empty()
                {
                    len.scalars = picks.iter().map(|k| ints[k % ints.len()].clone()).collect();
                }
            }
            sig
        })
    }

    /// The arguments `given` describes, over storage that outlives them.
    struct Storage {
        f32s: Vec<Vec<f32>>,
        f64s: Vec<Vec<f64>>,
        i32s: Vec<Vec<i32>>,
        i64s: Vec<Vec<i64>>,
        u8s: Vec<Vec<u8>>,
        u16s: Vec<Vec<u16>>,
    }

    fn storage(given: &[Given]) -> Storage {
        let lens = |e: Elem| -> Vec<usize> {
            given
                .iter()
                .filter_map(|g| match g {
                    Given::Buffer(x, _, l) if *x == e => Some(*l),
                    _ => None,
                })
                .collect()
        };
        Storage {
            f32s: lens(Elem::F32).into_iter().map(|l| vec![0.0; l]).collect(),
            f64s: lens(Elem::F64).into_iter().map(|l| vec![0.0; l]).collect(),
            i32s: lens(Elem::I32).into_iter().map(|l| vec![0; l]).collect(),
            i64s: lens(Elem::I64).into_iter().map(|l| vec![0; l]).collect(),
            u8s: lens(Elem::U8).into_iter().map(|l| vec![0; l]).collect(),
            u16s: lens(Elem::F16Bits)
                .into_iter()
                .map(|l| vec![0; l])
                .collect(),
        }
    }

    fn args<'a>(given: &[Given], s: &'a mut Storage) -> Vec<Arg<'a>> {
        let mut f32s = s.f32s.iter_mut();
        let mut f64s = s.f64s.iter_mut();
        let mut i32s = s.i32s.iter_mut();
        let mut i64s = s.i64s.iter_mut();
        let mut u8s = s.u8s.iter_mut();
        let mut u16s = s.u16s.iter_mut();
        given
            .iter()
            .map(|g| match *g {
                Given::Buffer(Elem::F32, w, _) => {
                    let b = f32s.next().unwrap();
                    if w { Arg::F32Mut(b) } else { Arg::F32(b) }
                }
                Given::Buffer(Elem::F64, w, _) => {
                    let b = f64s.next().unwrap();
                    if w { Arg::F64Mut(b) } else { Arg::F64(b) }
                }
                Given::Buffer(Elem::I32, w, _) => {
                    let b = i32s.next().unwrap();
                    if w { Arg::I32Mut(b) } else { Arg::I32(b) }
                }
                Given::Buffer(Elem::I64, w, _) => {
                    let b = i64s.next().unwrap();
                    if w { Arg::I64Mut(b) } else { Arg::I64(b) }
                }
                Given::Buffer(Elem::U8, w, _) => {
                    let b = u8s.next().unwrap();
                    if w { Arg::U8Mut(b) } else { Arg::U8(b) }
                }
                Given::Buffer(Elem::F16Bits, w, _) => {
                    let b = u16s.next().unwrap();
                    if w {
                        Arg::F16BitsMut(b)
                    } else {
                        Arg::F16Bits(b)
                    }
                }
                Given::Scalar(Elem::F32, v) => Arg::F32Scalar(v as f32),
                Given::Scalar(Elem::F64, v) => Arg::F64Scalar(v as f64),
                Given::Scalar(Elem::I32, v) => Arg::I32Scalar(v as i32),
                Given::Scalar(Elem::I64, v) => Arg::I64Scalar(v),
                Given::Scalar(Elem::U8, v) => Arg::U8Scalar(v.clamp(0, 255) as u8),
                Given::Scalar(Elem::F16Bits, v) => Arg::F16BitsScalar(v.clamp(0, 9) as u16),
            })
            .collect()
    }

    /// The simple reference: does the call fit the signature?
    fn fits(sig: &Signature, given: &[Given]) -> bool {
        if sig.params.len() != given.len() {
            return false;
        }
        let value = |name: &str| -> Option<i64> {
            let j = sig.params.iter().position(|p| p.name() == name)?;
            match given[j] {
                Given::Scalar(Elem::U8, v) => Some(v.clamp(0, 255)),
                Given::Scalar(_, v) => Some(v),
                Given::Buffer(..) => None,
            }
        };
        let kinds = sig.params.iter().zip(given).all(|(p, g)| match (p, g) {
            (Param::Buffer { elem, writes, .. }, Given::Buffer(e, w, _)) => {
                elem == e && writes == w
            }
            (Param::Scalar { elem, .. }, Given::Scalar(e, _)) => elem == e,
            _ => false,
        });
        kinds
            && sig.params.iter().zip(given).all(|(p, g)| match (p, g) {
                (Param::Buffer { len, .. }, Given::Buffer(_, _, l)) => {
                    let mut need = len.times as i128;
                    for s in &len.scalars {
                        let v = value(s).unwrap_or(-1);
                        if v < 0 {
                            return false;
                        }
                        need *= i128::from(v);
                    }
                    need <= *l as i128
                }
                _ => true,
            })
    }

    proptest! {
        /// The safe call's check accepts exactly the calls the simple reference accepts,
        /// and an accepted call hands over one pointer per parameter.
        #[test]
        fn marshal_accepts_exactly_the_fitting_calls(
            sig in signature(),
            mutate in proptest::option::of((0usize..6, given())),
            drop_last in any::<bool>(),
        ) {
            prop_assert!(sig.check().is_ok(), "{}", sig);
            // Start from a fitting call, then perturb it.
            let mut given: Vec<Given> = sig.params.iter().map(|p| match p {
                Param::Buffer { elem, writes, len, .. } => Given::Buffer(*elem, *writes, len.times * 11 * 11),
                Param::Scalar { elem, .. } => Given::Scalar(*elem, 11),
            }).collect();
            if let Some((i, g)) = mutate && !given.is_empty() {
                let i = i % given.len();
                given[i] = g;
            }
            if drop_last {
                given.pop();
            }
            let mut store = storage(&given);
            let mut a = args(&given, &mut store);
            let result = sig.marshal("k", &mut a);
            prop_assert_eq!(result.is_ok(), fits(&sig, &given), "{} {:?}", sig, given);
            if let Ok(pointers) = result {
                prop_assert_eq!(pointers.len(), sig.params.len());
            }
        }

        /// Decoding never panics, whatever the bytes.
        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Signature::decode(&mut Reader { bytes: &bytes });
        }
    }
}
