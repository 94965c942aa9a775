//! `canonical_kernel` and everything a `Canonical` offers never panic, whatever the text
//! and names.
#![no_main]

use canonical_text::{Names, canonical_kernel};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first line names things: bound, free, kept names and a derivation; the rest
    // is the kernel.
    let text = String::from_utf8_lossy(data);
    let (head, body) = text.split_once('\n').unwrap_or(("", &text));
    let words: Vec<&str> = head.split(' ').filter(|w| !w.is_empty()).collect();
    let mut names = Names::new();
    for (i, w) in words.iter().enumerate() {
        names = match i % 4 {
            0 => names.with_bound([*w]),
            1 => names.with_free([*w]),
            2 => names.with_keep([*w]),
            _ => names.with_derivation(*w, "_g"),
        };
    }
    let own = words.first().copied();
    let c = canonical_kernel(body, own, &names);
    let _ = c.key(&[data]);
    let _ = c.text().len();
    let _ = c.renamed().count();
    for r in c.refusals() {
        let _ = r.to_string();
    }
    let _ = c.pinned().len();
    let _ = c.kernel_token();
});
