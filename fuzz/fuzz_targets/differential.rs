//! The fast renamer agrees with the lexer on every identifier it renames and every region
//! it skips (`canonical_text::reference::disagreement`), whatever the text: with a
//! derivation (the bound names checked before the scan) and without (the bound names
//! left to the renamer's set-up, which checks them as it enters them); with the names
//! the text binds itself renamed (the default: each one the slow reading of the text's
//! declarations, `reference::text_bound`, finds) and with only listed names.
#![no_main]

use canonical_text::Names;
use canonical_text::reference::disagreement;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let plain = Names::new().with_bound(["n_b", "n1_w", "alu0"]);
    let derived = plain.clone().with_derivation("", "_g");
    let listed_only = plain.clone().with_text_names(false);
    let nothing_listed = Names::new().with_free(["expf"]);
    for names in [&derived, &plain, &listed_only, &nothing_listed] {
        // Own names keyed by their role (`k__seg1`, `E_4n1`) and as spelled (`x`).
        for own in [Some("k__seg1"), Some("E_4n1"), Some("x"), None] {
            if let Some(d) = disagreement(&text, own, names) {
                panic!("{d} in {text:?}");
            }
        }
    }
});
