//! The fast renamer agrees with the lexer on every identifier it renames and every region
//! it skips (`canonical_text::reference::disagreement`), whatever the text.
#![no_main]

use canonical_text::Names;
use canonical_text::reference::disagreement;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let names = Names::new()
        .with_bound(["n_b", "n1_w", "alu0"])
        .with_derivation("", "_g");
    for own in [Some("k__seg1"), Some("x"), None] {
        if let Some(d) = disagreement(&text, own, &names) {
            panic!("{d} in {text:?}");
        }
    }
});
