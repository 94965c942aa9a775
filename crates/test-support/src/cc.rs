//! A real compiler command that misbehaves on purpose: a shell script that runs a snippet on
//! each C file of its command line, then `exec cc` with the same arguments. Give it where a
//! compiler command is taken (`$CC`, `--cc`, `DemoOptions::compiler`).

use std::path::Path;

/// Writes `dir/<name>.sh`, which runs `per_c_file` (a shell snippet; the C file is `"$a"`) for
/// each argument ending in `.c`, then `exec cc "$@"`; returns the command `sh <script>`.
///
/// For example `sed -i 's/0\.5f/0.25f/g' "$a"` miscompiles every unit, and
/// `if rmdir TOKEN 2>/dev/null; then echo '#error refused' >> "$a"; fi` refuses one compile
/// (the first after `TOKEN`, a directory, was created).
pub fn wrapper(dir: &Path, name: &str, per_c_file: &str) -> String {
    let script = dir.join(format!("{name}.sh"));
    let text = format!(
        "for a in \"$@\"; do case \"$a\" in *.c) {per_c_file};; esac; done\nexec cc \"$@\"\n"
    );
    std::fs::write(&script, text).expect("write the compiler script");
    format!("sh {}", script.display())
}

/// [`wrapper`] whose first C compile after `token` (a directory) was created fails: an
/// `#error` is added to the unit and `token` removed.
pub fn refusing_once(dir: &Path, name: &str, token: &Path) -> String {
    let snippet = format!(
        "if rmdir {} 2>/dev/null; then echo '#error refused by the test' >> \"$a\"; fi",
        token.display()
    );
    wrapper(dir, name, &snippet)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// The script runs the snippet on each C file only, then the real compiler.
    #[test]
    fn the_script_edits_c_files_then_runs_cc() {
        let tmp = tempfile::tempdir().expect("tmp");
        let c = tmp.path().join("k.c");
        std::fs::write(&c, "int f(void) { return 1; }\n").expect("write");
        let token = tmp.path().join("token");
        std::fs::create_dir(&token).expect("token");
        let cc = refusing_once(tmp.path(), "refusing-cc", &token);
        let compile = || {
            let mut words = cc.split(' ');
            Command::new(words.next().expect("sh"))
                .args(words)
                .args(["-c", "-o"])
                .arg(tmp.path().join("k.o"))
                .arg(&c)
                .status()
                .expect("run the script")
        };
        assert!(!compile().success(), "the first compile is refused");
        assert!(!token.exists());
        std::fs::write(&c, "int f(void) { return 1; }\n").expect("rewrite");
        assert!(compile().success(), "later ones compile");
    }
}
