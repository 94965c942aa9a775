//! `SavedSchedule::from_ron` never panics, whatever the text; what it parses prints.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reference_ir::schedule::SavedRefOp;
use schedule_cache::SavedSchedule;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(s) = SavedSchedule::<SavedRefOp>::from_ron(&text) {
        let _ = s.to_ron();
    }
});
