//! Canonical text and keys for C-like kernel source.
//!
//! A tensor compiler renders the same kernel under different names from one run to the
//! next: loop symbols (`i12`), scope-locals (`v3_acc`), disambiguated node names
//! (`n17_weights`) and segment kernel names (`step__seg4`) come from process-wide
//! counters. This crate computes a key that is equal for two renderings that differ
//! only in the names the kernel *owns* (its own bindings), and different whenever
//! anything else differs: a free name, a member name, a literal, an operator, a
//! preprocessor line, an attribute, or the binding structure itself.
//!
//! * [`lexer`] tokenizes C, CUDA and Metal C-like text over bytes and never panics.
//! * [`canonical_kernel`] renames the owned names to canonical tokens numbered by first
//!   occurrence and returns a [`Canonical`] whose [`Canonical::key`] is the cache key.
//! * [`NameScope`] prepares the names a renderer's kernels share once, and keys each
//!   kernel with its declared names as borrowed strings (no [`Names`] built per kernel).
//! * [`digest_of_parts`] is the length-prefixed SHA-256 digest every kcache key uses.
//! * [`segment_kernel_name`] and [`kernel_token`] name fissioned segment kernels and
//!   strip their positional index.
//!
//! ```
//! use canonical_text::{canonical_kernel, Names};
//!
//! let names = Names::new().with_bound(["n17_weights", "n18_out"]);
//! let a = "void step__seg3(float *n17_weights, float *n18_out) {\n\
//!          for (int i12 = 0; i12 < 64; ++i12) { float v3_acc = n17_weights[i12]; n18_out[i12] = v3_acc * 2.0f; }\n}";
//! let b = "void step__seg7(float *n21_weights, float *n22_out) {\n\
//!          for (int i40 = 0; i40 < 64; ++i40) { float v9_acc = n21_weights[i40]; n22_out[i40] = v9_acc * 2.0f; }\n}";
//! let names_b = Names::new().with_bound(["n21_weights", "n22_out"]);
//! let ka = canonical_kernel(a, Some("step__seg3"), &names);
//! let kb = canonical_kernel(b, Some("step__seg7"), &names_b);
//! // Same kernel up to its own bindings and its own name's spelling: same key.
//! assert_eq!(ka.key(&[b"-O3"]), kb.key(&[b"-O3"]));
//! assert_eq!(ka.text(), kb.text());
//! assert!(ka.text().starts_with("void kc_kernel(float *kc0"));
//! // Different compiler options: different key.
//! assert_ne!(ka.key(&[b"-O3"]), ka.key(&[b"-O2"]));
//! // A different operator: different key.
//! let c = a.replace("v3_acc * 2.0f", "v3_acc + 2.0f");
//! assert_ne!(canonical_kernel(&c, Some("step__seg3"), &names).key(&[]), ka.key(&[]));
//! ```
//!
//! # Keying your own renderer's kernels
//!
//! By default nothing needs declaring: the names the kernel text binds itself (its
//! parameters, block-scope declarations, loop variables and labels) are renamed
//! whatever their spelling ([`Names::text_names`]), each only where every occurrence of
//! it lies in the scope of one of the text's own declarations of it, so a renderer that
//! mints `gidx574`, `ridx2`, `acc578` and `alu3` from counters gets one key per kernel
//! across processes:
//!
//! ```
//! use canonical_text::{canonical_kernel, Names};
//!
//! let render = |n: u32| format!(
//!     "void r_16_4_{n}(float* restrict data{n}, const float* restrict data{m}) {{\n\
//!        float acc{n} = 0.0f;\n\
//!        for (int ridx{n} = 0; ridx{n} < 16; ridx{n}++) {{ float alu{n} = data{m}[ridx{n}]; acc{n} += alu{n}; }}\n\
//!        *(data{n}+0) = acc{n};\n}}",
//!     m = n + 1,
//! );
//! // Kernel names minted `<shape>_<counter>`: keyed by their role, nothing declared.
//! let names = Names::new();
//! let (a, b) = (render(577), render(9));
//! let ka = canonical_kernel(&a, Some("r_16_4_577"), &names);
//! let kb = canonical_kernel(&b, Some("r_16_4_9"), &names);
//! assert_eq!(ka.key(&[b"clang -O2"]), kb.key(&[b"clang -O2"])); // renamed twins: one key
//! assert_eq!(ka.text_names().renamed(), 5); // data577, data578, acc577, ridx577, alu577
//! // A kernel calling another function never shares it.
//! let c = a.replace("acc577 += alu577", "acc577 += expf(alu577)");
//! assert_ne!(canonical_kernel(&c, Some("r_16_4_577"), &names).key(&[b"clang -O2"]), ka.key(&[b"clang -O2"]));
//! ```
//!
//! [`Canonical::text_names`] says which declared names were kept and why (a name also
//! used outside its declaration's scope, a member, a file-scope name, a construct the
//! reading cannot tell apart), [`Canonical::kernel_name_kept`] why the own name was keyed
//! as spelled, and [`Canonical::refusals`] why nothing was renamed: together, why a kernel
//! was keyed over its exact text. [`Canonical::kept_names`] lists them all, one line each.
//!
//! A renderer may still declare names: to add one the reading keeps, or to pin the
//! behaviour of texts the reading cannot read. A renderer that is not OCANNL's declares names of its own (tinygrad's `data0`,
//! `ridx0`, `acc0`, `val0`; TVM's `T_add`, `p0`). List in [`Names::bound`] every name
//! the renderer *declared* in the kernel (its parameters and locals) and nothing else:
//! a function, global or macro the kernel only uses must not be listed (see the
//! contract on [`Names`]; listing one would give kernels calling different functions one
//! key). Pass the name the text defines the kernel under as `kernel_name`; it is keyed by
//! its role where that is sound ([`Names::kernel_name_by_role`]: a minted name the text
//! defines, holding a `_` and a digit, which no observer sees), and otherwise stays in
//! the key except for a [`segment_kernel_name`] index, or the counter of a renderer that
//! mints kernel names its own way and says how ([`Names::with_minted_kernel_names`]: with
//! `"_"`, `E_16_3` and `E_16_4` share a key); [`Canonical::kernel_name_kept`] says why it
//! was kept. A hit then answers one kernel with its twin's code, called under the twin's
//! symbol (kernel-cache's `Resolved::symbol`). Put everything else that changes
//! the compiled code (compiler options, target, compiler version) in the key's extra
//! parts, or use `kernel_cache::kernel_key`, which adds the options and a backend
//! identity.
//!
//! ```
//! use canonical_text::{canonical_kernel, Names};
//!
//! // Your renderer: it knows which names it declared while rendering.
//! fn render(kernel: &str, params: [&str; 2], ridx: &str, acc: &str, f: &str) -> (String, Names) {
//!     let [out, x] = params;
//!     let text = format!(
//!         "void {kernel}(float* restrict {out}, const float* restrict {x}) {{\n\
//!          for (int {ridx} = 0; {ridx} < 16; {ridx}++) {{ float {acc} = {x}[{ridx}]; {out}[{ridx}] = {f}({acc}); }}\n}}"
//!     );
//!     (text, Names::new().with_bound([out, x, ridx, acc])) // declared names only: not `f`
//! }
//! let key = |kernel: &str, (text, names): &(String, Names)| {
//!     let c = canonical_kernel(text, Some(kernel), names);
//!     assert!(c.refusals().is_empty(), "{:?}", c.refusals()); // why names were kept, if any
//!     c.key(&[b"cc -O2", b"x86_64-linux-gnu"])
//! };
//! let a = render("E_16", ["data0", "data1"], "ridx0", "acc0", "sqrtf");
//! let b = render("E_16", ["buf0", "buf1"], "gidx0", "acc3", "sqrtf");
//! assert_eq!(key("E_16", &a), key("E_16", &b)); // renamed twins: one key
//! let c = render("E_16", ["data0", "data1"], "ridx0", "acc0", "expf");
//! assert_ne!(key("E_16", &a), key("E_16", &c)); // another function: another key
//! // The kernel's own name is keyed by its role (tinygrad's deduplicated `E_16n1`)...
//! let d = render("E_16n1", ["data0", "data1"], "ridx0", "acc0", "sqrtf");
//! assert_eq!(key("E_16", &a), key("E_16n1", &d));
//! // ...unless the compiler may know its spelling (no `_` and digit: `relu`, `memset`).
//! let e = render("relu", ["data0", "data1"], "ridx0", "acc0", "sqrtf");
//! let f = render("gelu", ["data0", "data1"], "ridx0", "acc0", "sqrtf");
//! assert_ne!(key("relu", &e), key("gelu", &f));
//! ```
//!
//! # Why equal keys mean equal kernels up to renaming
//!
//! The key is not taken over the human-readable [`Canonical::text`] but over a tagged
//! byte encoding ([`Canonical::encoding`]): the kernel's exact bytes, except that each
//! occurrence of a renamed name becomes a `RENAMED` tag byte (`0xFF`) and the name's
//! number, and each occurrence of the kernel's own name an `OWN` tag byte (`0xFE`). The
//! text is UTF-8, in which these two bytes never occur. So:
//!
//! * **No confusion between renamed and kept names.** A name kept as spelled stays its
//!   own bytes, a renamed one is a tag: a free identifier spelled `kc0` (or spelled
//!   like the kernel token) can never be read as a renamed one.
//! * **No shifting of boundaries.** The encoding is a prefix code (a text byte, or a tag
//!   then a self-delimiting LEB128 number), so it decodes uniquely and no concatenation of
//!   elements can move a token boundary; whitespace is kept exactly, so the text between
//!   renamed names is byte-for-byte the same in two kernels with equal keys.
//! * **Renaming is a bijection.** Numbers are given per distinct name by first
//!   occurrence, so equal encodings mean the two texts are equal except that renamed
//!   names correspond one to one.
//! * **Every occurrence or none.** A renamable name that also occurs where nothing is
//!   renamed (after `.`, `->` or `::`, in a preprocessor line or attribute) is kept as
//!   spelled everywhere ([`Canonical::pinned`]), so a renamed name is renamed at every
//!   place the compiler could see it, and a kept one at none.
//! * **Tokenization agrees with the compiler.** Names are recognized as maximal
//!   identifier runs outside literals, comments, preprocessor lines and attributes, with
//!   preprocessing numbers, encoding prefixes and CRLF line ends handled as gcc (gnu17)
//!   does. One module decides which text that reading is exact for (C translation phases
//!   1-3, for every dialect we accept); the [`lexer`] and the renamer both follow it, and
//!   [`reference::disagreement`] holds the renamer to the lexer in the property tests and
//!   the differential fuzz target. Everything else is keyed over its exact bytes with
//!   nothing renamed ([`Refusal::AmbiguousLexing`]), wherever in the text it occurs
//!   (code, literal, comment or directive):
//!   - a line splice (a backslash, optional blanks, then a line end or the end of the
//!     text), a carriage return not followed by `\n`, a NUL byte, a trigraph;
//!   - in code, comments, directives and attributes: a `$` (an identifier byte in some
//!     dialects only; inside a string or character literal it is one character of it,
//!     as OCANNL's logging kernels print it), and any non-ASCII byte (clang reads U+00A0
//!     and the other Unicode spaces as white space, so `i1 -\u{a0}i2` names `i2`; inside
//!     a literal it is part of it);
//!   - in code, directives and attributes: a `'` right after a number or a name other
//!     than the encoding prefixes `L`, `u`, `U` (a digit separator in C23 and C++14, a
//!     character literal in gnu17; `u8'x'` likewise), a C++ raw string, a backslash in
//!     code (a universal character name).
//! * **No renamed spelling is observable.** Where the text can observe a name's spelling,
//!   nothing is renamed and the kernel's own name is kept whole, segment index included
//!   ([`Refusal::SpellingObserved`]): `__func__`, `__FUNCTION__`, `__PRETTY_FUNCTION__`,
//!   `__builtin_FUNCTION` (the enclosing function's name); `asm`, `_Pragma` and the
//!   attributes `alias`, `weakref`, `ifunc`, `symver` (names read out of strings); a
//!   preprocessor line with `#` or `##` after its introducer (a macro defined in the text
//!   that may stringify or paste what it is given: the simple sound rule is to rename
//!   nothing in such a kernel); and the macros from headers listed in
//!   [`Names::observers`] (default `assert`, which stringifies its argument and names the
//!   function). These are matched anywhere (literals and comments too, which only
//!   over-refuses): the built-in ones as substrings (`__PRETTY_FUNCTION__`, `__asm__`),
//!   the macros as whole identifiers, since only an identifier token spelled exactly like
//!   a macro invokes it (TVM's `__tvm_assert_parts` invokes no `assert`). A macro from a
//!   header that stringifies or expands to `__func__` must be listed there.
//! * **Allow, don't deny.** Compilers and headers define more names that observe a
//!   spelling or a position than any deny list holds (clang's `__builtin_COLUMN` and
//!   `__builtin_dump_struct`, glibc's `__STRING` and `__CONCAT`), and all of them live in
//!   the reserved namespace. An identifier spelled `__x` or `_X` outside comments and
//!   literals that is not on the allow list of known meaning
//!   ([`allow_lists::reserved_names`]: every `_Keyword` of C11 to C23 and GNU's
//!   alternate spellings, the attribute introducers and words, the feature tests gcc or
//!   clang define, the built-ins whose arguments are plain values, each a built-in of both
//!   compilers, and the reserved names the real corpus of tinygrad, TVM and OCANNL kernels
//!   uses) keys the kernel over its exact text with its whole own name
//!   ([`Refusal::UnknownReserved`]). Spelling and position built-ins
//!   (`__builtin_LINE`, `__builtin_offsetof`, `__builtin_has_attribute`) are not on it.
//! * **Attribute regions.** Inside `[[...]]`, `__attribute__((...))`,
//!   `__attribute((...))` and `__declspec(...)` a word is an attribute's name or
//!   argument: a bound name spelled like one (`always_inline`, `packed`) is never
//!   renamed there; a text where renaming would reach into one keys over its exact text
//!   ([`Refusal::NameInAttribute`]). Asm operands (`asm(... : "=r"(x))`) are never
//!   renamed either: any spelling of `asm` refuses (above).
//! * **Feature tests.** `__has_builtin(x)` and its kin (every `__has_*` and `__is_*`)
//!   answer for the *spelling* of their argument (`__has_builtin(abs)` is 1 for a local
//!   named `abs`, 0 for `n1`): their parentheses are regions like an attribute's
//!   ([`Refusal::NameInFeatureTest`]), and a `#define` naming one is an observer. A
//!   region starts at its introducer even when a directive line stands before the `(`
//!   (the preprocessor reads the line and goes on to the `(`).
//! * **Headers the text includes.** A header's function-like macro may paste its argument
//!   (`<stdint.h>`'s `INT64_C(x)` reads `xL`). Without the header's macro table, a text
//!   that includes a header keeps as spelled every name inside the arguments of a call
//!   such a macro could be: with only standard headers, their observing macros and the
//!   text's own; with any other header, every call but to a keyword, the kernel itself or
//!   a library function of an included standard header (C reserves those as macro names).
//!   A caller that learned the headers' macros (cc-backend) lists their observers and sets
//!   [`Names::included_macros_known`].
//!
//! * **Bounded lookups.** A lookup in the name table examines at most 256 slots; names
//!   made to collide in it (which no renderer's names do by chance) key the kernel over
//!   its exact text ([`Refusal::NameCollisions`]) instead of costing time quadratic in
//!   their number.
//!
//! * **Names from the text, by scope.** A name nobody listed is renamed only when the text
//!   binds it: it has a recognized declaration (a parameter of a function definition, a
//!   block-scope or `for`-init declaration, a label) and *every* occurrence of it lies in
//!   the scope of one of them, none `extern`, a member, an enumerator, at file scope, or
//!   in a statement the reading cannot tell from a declaration (`T x;` with `T` unknown);
//!   `{ float expf = 1; } y = expf(x);` keeps `expf`. A reading that may take an
//!   expression for a declaration would make a global look local, so only a type keyword,
//!   a qualifier or a type name the text itself `typedef`s at file scope starts one, and a
//!   text whose structure it cannot read (a conditional directive, a text macro holding a
//!   brace or `;`, a statement expression, a type name redeclared) gets no names from its
//!   text at all ([`TextNames::refused`]). Free and kept names are never read from the
//!   text. [`reference::text_bound`] reads the same the slow way, the property tests hold
//!   the two together, and the gcc oracle draws renderers that declare nothing.
//!
//! Hence two kernels with equal keys are equal up to a consistent renaming of the names
//! they own, which (the renderer guarantees these names are bound in the kernel, or the
//! text shows it) changes neither their meaning nor their machine code. Renaming less than allowed is always
//! sound: a refusal costs a cache miss, never a wrong hit.
//!
//! A key covers the kernel's text, not the compile's environment: what `__FILE__`,
//! `__DATE__`, `__TIME__` and `__TIMESTAMP__` expand to (the compile's file name and
//! time; `assert` messages name the file) is for the backend to fix, or two compiles of
//! one text differ whatever their keys. cc-backend compiles every kernel as `kernel.c`
//! in a directory of its own, dated 1970-01-01, with `SOURCE_DATE_EPOCH=0` and
//! `TZ=UTC0`; the gcc oracle test compiles the same way.
//!
//! # Performance
//!
//! Two criterion groups in `cargo bench -p canonical-text --bench canonical`, each
//! [`canonical_kernel`] and [`Canonical::key`] over a 1 MiB batch against plain SHA-256
//! of the same bytes (SHA-NI): `canonical_key_1mib` (1016 kernels of about 1 KiB with three
//! bound names each, OCANNL style; target 4x) and `canonical_key_bound200` (128 kernels of
//! about 8 KiB declaring about 200 names each, all bound, as tinygrad's C renderer
//! declares them). `cargo xtask bench --only canonical_key` reports both.
//!
//! Before the phases 1-2 gate and the spelling observers, `canonical_key_1mib` measured
//! 3.1x to 3.4x on this project's shared 2-core machine when idle. After them, the machine
//! was never idle (load average 12 to 15 on 2 cores): `cargo xtask bench --only
//! canonical_key` gave medians of 5.4x (rounds 5.3x-6.5x) and, quick, 6.2x (rounds
//! 2.4x-8.0x) for `canonical_key_1mib`, and 8.0x (5.5x-8.8x) and 10.0x (3.3x-16.0x) for
//! `canonical_key_bound200`; a busy machine slows the subject more than the baseline, so
//! these are upper bounds, not the idle figure. Load-independent: under callgrind,
//! [`canonical_kernel`] runs 28.9 million instructions per MiB of the 1 KiB kernels
//! (25.1 million before the gate: +15%, of which the observer search through
//! aho-corasick's packed Teddy searcher is about half, the whole-text phases 1-2 scans
//! and the directive checks the rest) and 42.5 million per MiB with 200 bound names.
//!
//! Measured again (sessions 4 and 5): 28.8 million instructions per MiB under callgrind
//! (and a seventh fewer simulated branch misses after session 5's block-mask look-back),
//! and `cargo xtask bench` medians from 3.98x (rounds 3.90x-4.60x) on a quiet host to 4.9x (4.4x-7.0x) when the
//! shared host is busy: a busy host slows the subject's branchy scalar code more than
//! the baseline's SHA-NI instructions. The 4x target is met on a quiet host only. Taking
//! the subject apart (each part removed in turn, subject and baseline alternated in one
//! process): [`canonical_kernel`] returning a copy of the exact text at once, then its
//! key, costs about 1.45x (a bare SHA-256 of each kernel with its hex digest: about
//! 1.15x); the phases 1-2 gate and the observer search add about 0.3x; the per-kernel
//! set-up (filters, name table, output) about 0.25x; the scan about 1.85x, of which the
//! 64-byte block classification is a fifth and the rest the ~60 candidate names per KiB,
//! each a few branches, a lookup and an emit. Since session 9 the scan's block masks also
//! tell whether a text holds any byte the phases 1-2 gate may refuse, and the gate's own
//! search runs only when one does (about 5% of the subject's time saved; the observer
//! search still runs on every text). Before that change, with the scan removed
//! altogether (a copy of the text instead), the subject measured 2.8x to 2.9x on the busy
//! shared machine (the key, the gates, the set-up): the 4x target left the scan about
//! 1.1x there, while it took about 4.6x (3.3 ms per MiB).
//!
//! How much of a reading is the host's state rather than the code: on 2026-12-03 (load
//! average about 2 on the shared 2-core host), the `canonical_key_1mib` criterion group of
//! commit b3cdc79 (the code that read 3.05x-3.41x on an idle host when the target was first
//! met) and of today's code, alternated six times in the same minutes, read medians of 6.7x
//! (4.8x-7.0x) and 7.5x (6.0x-8.3x). The same binary reads twice its idle figure here
//! now, and today's code costs about 1.15x that code's time (30.2 against 24.9 million
//! instructions per MiB under callgrind: the phases 1-2 gate and the spelling observers).
//! On the host as it was then, today's code would read about 3.5x-3.9x: the target holds
//! only on an idle host, and this host has not been idle since.
//!
//! On real text, `canonical_key_corpus` keys every kernel of the corpus beside the project
//! (`../shared/corpus`: tinygrad's 160 kernels with their ~200 declared names each as
//! bound, TVM's and OCANNL's files; about 2 MiB, most of it a few large tinygrad kernels)
//! against SHA-256 of the same bytes: 5.8x (rounds 4.6x-7.6x) on the shared machine while
//! busy. The corpus tests (`tests/corpus.rs`) hold the renamer to the lexer on all of it,
//! key every renamed twin alike, and compile the kernels and their twins (tinygrad's with
//! clang, OCANNL's with cc) to identical object code.
//!
//! Issue 27, part 2 (2026-12-04): the reserved-name gate and the attribute regions are
//! answered by the one block scan (the renamer meets every identifier starting with `_`);
//! before, `name_in_attribute` tokenized the whole text of every tinygrad kernel (their
//! `__attribute__` vector typedefs), 40% of the corpus time. [`NameScope`] keys a kernel
//! with its declared names without building a [`Names`] for it. Under callgrind,
//! [`canonical_kernel`] now runs 31.4 million instructions per MiB of the 1 KiB kernels
//! (35.1 before) and 41.1 million with 200 bound names (41.6). Before and after binaries
//! alternated five times on the shared host (load average 0.8-1.2, criterion medians of
//! subject over baseline): `canonical_key_1mib` 6.5x before, 5.5x after; `canonical_key_bound200`
//! 6.2x and 6.3x; `canonical_key_corpus` 15.8x and 6.5x; `canonical_key_corpus_names`
//! (each kernel's names handed over in the loop: a whole `Names` per kernel before, a
//! [`NameScope`] after) 21.6x and 6.1x. The host reads about half again its quiet figures
//! (the same 1 MiB code read 3.98x here when quiet), so the 4x, 4.5x and 5x targets are
//! not shown met. The spelling-observer search still runs over every text (aho-corasick's
//! packed searcher, about 2-4% of the time): folding it into the scan would add a pair
//! compare per byte to every block for less than that.
//!
//! Later the same day: a whole name's key is read from the name in overlapping loads (it
//! waited for the stores of a zero-padded copy), the renamer's set-up passes over the
//! bound names once rather than twice, and the block scan compares against up to eight
//! first bytes of names that need a look (was four; a tinygrad kernel's declared names
//! and its own name fit, so `float`, `int` and `for` are no longer met). Keys unchanged (a
//! dump of key, refusals, pinned names, count and token over the corpus and generated
//! kernels is byte-identical). Both versions linked into one process and timed in 300
//! interleaved samples: `canonical_key_bound200` 0.88 of its time before,
//! `canonical_key_corpus_names` 0.92, `canonical_key_1mib` 1.01 (unchanged). `cargo xtask
//! bench --rounds 7 --settle 60`, all 7 rounds at load 0.3-1.0: `canonical_key_1mib` 4.49x
//! (4.32x-4.81x), `canonical_key_bound200` 4.72x (4.27x-7.41x), `canonical_key_corpus`
//! 4.95x, `canonical_key_corpus_names` 4.95x (4.70x-5.42x): the 5x target is met, the 4x
//! and 4.5x are not.
//!
//! Then [`canonical_kernel`] read a [`Names`]' bound names twice per call: once to check
//! them for the bound-name refusal, once to enter them in the renamer's table. Without
//! derivations it now reads them once, in the renamer's set-up, which checks them as it
//! enters them (and starts the call again, refusal settled, when the check refuses).
//! Paired in one process (300 interleaved samples, median new/old):
//! `canonical_key_bound200` 0.97, `canonical_key_1mib` 1.01, `canonical_key_corpus_names`
//! 0.98-0.99 (its [`NameScope`] path reads them once already). Keys unchanged (the dump
//! above is byte-identical). `cargo xtask bench --rounds 7 --settle 60`, all 7 rounds at
//! load 0.9-1.0: `canonical_key_1mib` 4.73x (4.38x-5.08x), `canonical_key_bound200` 4.40x
//! (4.29x-4.85x), `canonical_key_corpus` 4.75x, `canonical_key_corpus_names` 4.83x
//! (4.64x-5.15x). The 4.5x and 5x targets are met in this run; the 4x is not (the same
//! code read 4.49x in the run above: the host, not the change, moved it).
//!
//! Then (stop 32) the scan runs compiled for AVX2 where the CPU has it (`pulp`'s safe
//! runtime dispatch: no `unsafe` here), comparing 32 bytes at a time, and the vector code
//! also drops the special bytes that start nothing by the byte after them (`[` not
//! before `[`, a lone `/`, `?` or `%`, `&`), which the scalar loop used to meet and pass
//! over; a key feeds its parts straight to `sha2`'s compression function from the state
//! after the domain block instead of cloning a hasher (590 to 546 ns for a 1 KiB kernel);
//! the scan's lookup tables are constants (a `static` of another codegen unit cost a
//! load through the GOT per lookup). Keys unchanged (the dump above is byte-identical).
//! Paired in one process against the previous code: `canonical_key_1mib` 0.95 for the
//! AVX2 scan, 0.97 more for the key. Three `cargo xtask bench --settle 60` runs, every
//! round quiet (load 1.0): `canonical_key_1mib` 4.00x (3.96x-4.07x, 7 rounds), 4.01x
//! (3.98x-4.17x, 9 rounds) and 3.996x (3.96x-4.11x, 7 rounds); in the two 7-round runs
//! `canonical_key_bound200` 4.10x and 4.07x, `canonical_key_corpus_names` 4.53x and
//! 4.57x, `canonical_key_corpus` 4.54x. The 4.5x and 5x targets are met with room; the
//! 4x one is met at its bound only (one run of three below it).
//!
//! Where the time goes (the group's `canonical_kernel_only` and `key_only` functions):
//! [`Canonical::key`] costs about 0.9x SHA-256 of the text (the encoding is a quarter
//! shorter, but each key also hashes its own final padded block); in [`canonical_kernel`]
//! the 64-byte block classification is now about a twentieth (AVX2 where the CPU has it,
//! SSE2 through `safe_arch` on other x86-64, portable code elsewhere), the candidate
//! names about half (one table lookup each, and for a renamed one a fixed-size copy of
//! the text before it and a two-byte tag: their cost is the lookups' latency and the
//! branches their outcomes take), the observer search about a twentieth, the rest
//! comments, directives and per-kernel set-up (the [`Names`] filters and the cache misses
//! of reading a [`Names`] built long before, the name table, three allocations).
//!
//! Then (stop 33) three changes, keys unchanged (the dump above is byte-identical):
//! the scan no longer meets a name starting with `i` or `v` that has no digit after that
//! byte, unless a listed name starts with it (only the minted shapes `i<digits>` and
//! `v<digits>_` need a look there, and the AVX2 classifier tells them by the next byte:
//! `int`, `void`, `if`, `volatile` cost nothing now); a renamed name of at most 16 bytes
//! is listed in one fixed-size copy instead of a `memcpy` call; and each thread keeps its
//! last name table, emptied, for its next call (at most 80 KiB per thread, a larger table
//! is freed; a one-line kernel's call went from 292-308 ns to 265-278 ns). Paired in one process against the code before: the first
//! `canonical_key_bound200` 0.94-0.96, `canonical_key_corpus_names` 0.95-0.96,
//! `canonical_key_1mib` 0.98-0.99; the second `canonical_key_bound200` 0.95-0.97,
//! `canonical_key_corpus_names` 0.98; the third is inside the layout noise of such pairs
//! (about 2%: two copies of one code differing in a comment read 1.02). `cargo xtask bench
//! --only canonical_key --rounds 7 --settle 60`, every round quiet (load 0.9-1.0):
//! `canonical_key_1mib` 3.82x (3.78x-3.87x), `canonical_key_bound200` 3.86x
//! (3.84x-3.93x), `canonical_key_corpus` 4.21x, `canonical_key_corpus_names` 4.23x
//! (4.14x-4.33x): the 4x, 4.5x and 5x targets are met in every round.
//!
//! Then (issue 36) the names the text binds itself are renamed by default
//! ([`Names::text_names`]): every call also reads the text's declarations from the
//! [`lexer`]'s tokens (a second pass over the text, `declared.rs`), and that pass is not
//! folded into the block scan. It costs: `cargo xtask bench --only canonical_key --rounds
//! 3` (load 2.4-2.9, no round quiet) read `canonical_key_1mib` 11.9x (9.9x-14.7x),
//! `canonical_key_bound200` 13.4x (13.2x-16.3x), `canonical_key_corpus` 23.4x and
//! `canonical_key_corpus_names` 24.8x (21.1x-25.1x), against 3.8x-4.2x before: none of
//! the 4x, 4.5x and 5x targets is met with the default names. Under callgrind, the 1 KiB
//! kernels' batch runs about 59 million more instructions per MiB (the lexer's pass about
//! half of it, interning and reading the declarations the rest). With
//! `Names::with_text_names(false)` a call is what it was. Folding the declaration reading
//! into the block scan (or a tokenizer held to the lexer that skips what the reading never
//! looks at) is the way back to the targets.
//!
//! Then (issue 36, own name by its role) the reading also notes the text's function
//! definitions and includes; not folded either. `cargo xtask bench --only
//! canonical_key_1mib,canonical_key_bound200,canonical_key_corpus_names --rounds 3`, twice
//! (load 5.5-6.7, then 7.6-8.6; no round quiet): `canonical_key_1mib` 11.2x (10.5x-11.8x)
//! and 12.0x (11.8x-13.0x), `canonical_key_bound200` 12.1x (12.0x-12.9x) and 15.5x
//! (15.5x-16.8x), `canonical_key_corpus_names` 23.2x (21.5x-26.1x) and 23.4x
//! (22.9x-27.7x). Under `perf` (the 1 KiB kernels' `canonical_kernel` alone), the
//! reading's tokenizing and interning (`Parser::new`, the lexer inlined) is 31% of the
//! samples, its hash table and name compares 9%, its declaration reading 9%, the block
//! scan 19%: the time is the lexer's per-token dispatch, spread thin, so no local change
//! to the reading reaches the targets; the fold is still the way. One such change: the
//! reading skips blanks between tokens without a whitespace token, 2.2% fewer instructions
//! per call under callgrind (keys unchanged: the corpus key dump is byte-identical).
//!
//! # Versions
//!
//! What a minor version may add: variants of the `#[non_exhaustive]` [`Refusal`] (a new
//! construct the renamer refuses; a `match` on it needs a `_` arm), new functions and new
//! fields behind builders. A rule that renames less, keys more or refuses may change the key
//! an existing text gets: that only costs a miss in a store that kept the old key. A change
//! that could give two texts of different meaning one key is never made.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod canonical;
mod declared;
mod encoding;
mod interner;
mod key;
pub mod lexer;
mod names;
mod phases;
pub mod reference;
mod refusal;
mod rename;
mod scan;
mod sha;

pub use canonical::canonical_kernel;
pub use declared::TextNames;
pub use key::{Canonical, ROLE_TOKEN};
pub use names::{Derivation, NameScope, Names, kernel_token, segment_kernel_name};
pub use refusal::Refusal;

/// The allow lists the key relies on, as data: tests hold them to the installed compilers
/// (every listed built-in is one, every listed header macro is what the compiler's macro
/// table says).
pub mod allow_lists {
    /// Every identifier of the implementation's reserved namespace (`__x`, `_X`) whose
    /// meaning is known not to depend on a spelling or a position: the C keywords spelled
    /// that way (every `_Keyword` of C11 to C23) and GNU's alternate spellings, the
    /// compilers' feature tests (their arguments are regions nothing is renamed in), the
    /// built-ins whose arguments are plain values (`__builtin_expect`, `__builtin_sqrtf`,
    /// ...), GNU attribute words spelled `__name__`, and what the real corpus uses
    /// besides. Any other reserved identifier in code or a directive keys the kernel over
    /// its exact text ([`Refusal::UnknownReserved`](crate::Refusal::UnknownReserved)).
    /// Besides these, the renderers' own families (`__tvm_*`, `__pool<N>`) are allowed.
    pub fn reserved_names() -> impl Iterator<Item = String> {
        crate::phases::reserved_allow_list()
    }

    /// The C standard headers a text may include without the include rule pinning the
    /// arguments of every call it does not own (see
    /// [`Names::included_macros_known`](crate::Names::included_macros_known)).
    pub const STANDARD_HEADERS: &[&str] = crate::phases::STANDARD_HEADERS;

    /// The macros of [`STANDARD_HEADERS`] outside the reserved namespace that observe a
    /// spelling (stringify or paste, directly or through another macro).
    pub const STANDARD_HEADER_OBSERVERS: &[&str] = crate::phases::STANDARD_HEADER_OBSERVERS;

    /// The library functions of some standard headers, per header (the math ones are
    /// [`MATH_FUNCTIONS`] with their `f` and `l` forms besides): C reserves each as a
    /// macro name where its header is included.
    pub const STANDARD_FUNCTIONS: &[(&str, &[&str])] = crate::phases::STANDARD_FUNCTIONS;

    /// The math functions whose `__builtin_` forms (and `f`, `l` forms) are value
    /// built-ins, and which `<math.h>` declares.
    pub const MATH_FUNCTIONS: &[&str] = crate::phases::LIBM_BUILTINS;
}

/// Where the token reading of [`lexer`] stops being exact for `src` under every dialect a
/// C compiler accepts, and what starts there: a line splice (a backslash, optional blanks,
/// then a line end or the end of the text), a trigraph, a carriage return not followed by
/// `\n`, a NUL byte, a `$` or a non-ASCII byte outside a literal, and the other
/// constructs canonical keys refuse for the same reason; `None` when [`lexer::tokenize`]
/// reads `src` exactly as the compiler's translation phases 1-3 do.
///
/// This is the gate every canonical key passes first; another crate that judges text by
/// its tokens (cc-backend's merged unit) asks it too, so both read text alike.
///
/// ```
/// assert_eq!(canonical_text::inexact_reading(b"int a = 1; // ok\n"), None);
/// assert!(canonical_text::inexact_reading(b"// hidden \\ \nint b;").is_some());
/// ```
pub fn inexact_reading(src: &[u8]) -> Option<(usize, &'static str)> {
    phases::untokenizable(src)
}

pub use kcache_digest::digest_of_parts;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_complete() {
        let bytes: Vec<u8> = (0..=255).chain(0..=7).collect();
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(crate::sha::hex_lower(&bytes), expected);
        assert_eq!(crate::sha::hex_lower(&[]), "");
    }

    #[test]
    fn segment_names_and_tokens() {
        assert_eq!(segment_kernel_name("step", 4), "step__seg4");
        assert_eq!(kernel_token("step__seg4"), "step__seg");
        assert_eq!(
            kernel_token(&segment_kernel_name("a__seg", 12)),
            "a__seg__seg"
        );
        assert_eq!(kernel_token("step__seg"), "step__seg");
        assert_eq!(kernel_token("step__segx"), "step__segx");
        assert_eq!(kernel_token("step__seg4a"), "step__seg4a");
        assert_eq!(kernel_token("step"), "step");
        assert_eq!(kernel_token(""), "");
        assert_eq!(kernel_token("é__seg0"), "é__seg");
    }
}
