//! The key dump: one line per corpus kernel, read three ways (with its renderer's names,
//! with no names, and its renamed twin), holding its key, refusals, pinned names, renamed
//! count and kernel token. Written to `$KCACHE_KEY_DUMP` when that is set (else skipped),
//! so a change meant to leave keys alone can be compared before and after:
//! `KCACHE_KEY_DUMP=/tmp/before.txt cargo test -p canonical-text --test key_dump`.

#[path = "support/corpus.rs"]
mod corpus;

use std::fmt::Write as _;

use canonical_text::{Names, canonical_kernel};

#[test]
fn dump_corpus_keys() {
    let Some(path) = std::env::var_os("KCACHE_KEY_DUMP") else {
        eprintln!("SKIPPED: KCACHE_KEY_DUMP is not set");
        return;
    };
    let Some(dir) = corpus::dir() else {
        eprintln!("SKIPPED: the kernel corpus is not at ../shared/corpus (nor $KCACHE_CORPUS)");
        return;
    };
    let mut out = String::new();
    for k in corpus::load(&dir) {
        let twin = corpus::renamed_twin(&k);
        let plain = Names::new();
        for (how, text, names) in [
            ("names", &k.text, &k.names),
            ("plain", &k.text, &plain),
            ("twin", &twin.text, &twin.names),
        ] {
            let c = canonical_kernel(text, k.name.as_deref(), names);
            writeln!(
                out,
                "{} [{how}] {} refusals={:?} pinned={:?} renamed={} token={:?}",
                k.label,
                c.key(&[b"-O2"]),
                c.refusals(),
                c.pinned(),
                c.renamed_count(),
                c.kernel_token()
            )
            .expect("a String takes any write");
        }
    }
    std::fs::write(&path, out).expect("the dump is written");
}
