//! `cargo xtask <command> --help` in a real process: the usage on stdout, status 0, nothing
//! run (`bench --help` was an error; `test --help` would have run every test).

use std::process::Command;

#[test]
fn help_prints_each_commands_usage_and_runs_nothing() {
    for (args, flag) in [
        (&["bench", "--help"][..], "--rounds"),
        (&["bench", "--quick", "-h"][..], "--settle"),
        (&["soundness", "--help"][..], "--cases"),
        (&["fuzz", "-h"][..], "--seconds"),
        (&["test", "--help"][..], "no flags"),
        (&["ci", "-h"][..], "no flags"),
        (&["tidy", "--help"][..], "no flags"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(args)
            .output()
            .expect("run xtask");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{args:?}: {o:?}");
        assert!(
            out.starts_with(&format!("usage: cargo xtask {}", args[0])),
            "{args:?}: {out}"
        );
        assert!(out.contains(flag), "{args:?}: no {flag} in {out}");
        // Nothing ran: no cargo command echoed.
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("$ cargo"),
            "{o:?}"
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["tidy", "--fix"])
        .output()
        .expect("run xtask");
    assert!(!o.status.success(), "an argument to tidy is refused: {o:?}");
}
