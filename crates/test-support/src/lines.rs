//! [`Lines`]: a kernel-cache backend whose program is its kernels' texts, one per line;
//! [`misses`], the miss reasons among a kernel store's events; and [`censused`] /
//! [`recorded`], a resolve's answers beside its census (and events).

use std::sync::atomic::{AtomicU64, Ordering};

use kernel_cache::store::{MissReason, Outcome, StoreEvent};
use kernel_cache::{
    Backend, BatchKernel, Census, Compiled, Group, Resolution, SavedProgram, Units,
};

/// What a text that does not compile starts with.
const FAIL: &str = "fail:";

/// The reasons of the misses among `events` (as a resolve returns them, `Resolution::events`), in
/// order.
pub fn misses(events: &[StoreEvent]) -> Vec<MissReason> {
    events
        .iter()
        .filter_map(|e| match &e.outcome {
            Outcome::Miss(why) => Some(why.clone()),
            _ => None,
        })
        .collect()
}

/// A resolve's answers (or its error) beside its census (zero when the call failed).
pub fn censused<T, E>(resolution: Result<Resolution<T>, E>) -> (Result<Vec<T>, E>, Census) {
    match resolution {
        Ok(r) => (Ok(r.answers), r.census),
        Err(e) => (Err(e), Census::default()),
    }
}

/// [`censused`], and the resolve's store events (none when the call failed).
#[allow(clippy::type_complexity)]
pub fn recorded<T, E>(
    resolution: Result<Resolution<T>, E>,
) -> ((Result<Vec<T>, E>, Census), Vec<StoreEvent>) {
    match resolution {
        Ok(r) => ((Ok(r.answers), r.census), r.events),
        Err(e) => ((Err(e), Census::default()), Vec::new()),
    }
}

/// A backend whose program is its kernels' texts, one per line (its saved form is the program
/// itself); counts its compiles. A kernel whose text starts with `fail:` does not compile: a
/// strict compile fails its group, a per-kernel one (`compile_group_each`) fails it alone with
/// an error the backend calls the kernel's own (`Backend::remembered`: the text
/// after `fail:`).
#[derive(Debug, Default)]
pub struct Lines {
    /// Compiles so far.
    pub compiles: AtomicU64,
    /// The host part of every option list (`[host; 32]`: a machine whose code depends on it,
    /// as under cc-backend's `-march=native`); its programs start with a line naming it, and
    /// one compiled for another host is refused by `load` (and kept in the store).
    pub host: Option<u8>,
}

impl Lines {
    /// A backend on a machine whose host part is `[host; 32]` (`None`: none).
    pub fn on_host(host: Option<u8>) -> Lines {
        Lines {
            host,
            ..Lines::default()
        }
    }

    /// Compiles so far.
    pub fn compiles(&self) -> u64 {
        self.compiles.load(Ordering::SeqCst)
    }

    /// The line a program compiled on this machine starts with.
    fn host_line(&self) -> String {
        self.host.map(|h| format!("host {h}\n")).unwrap_or_default()
    }
}

impl Backend for Lines {
    type Source = String;
    type Program = SavedProgram;
    type Error = std::io::Error;
    fn compile_group(&self, g: &Group<'_, String>) -> std::io::Result<Compiled<SavedProgram>> {
        if let Some(k) = g.kernels.iter().find(|k| k.source.starts_with(FAIL)) {
            self.compiles.fetch_add(1, Ordering::SeqCst);
            return Err(std::io::Error::other(k.source.clone()));
        }
        self.compile_texts(
            g.kernels
                .iter()
                .map(|k| (k.source.as_str(), k.symbol.as_str())),
        )
    }

    fn compile_group_each(
        &self,
        g: &Group<'_, String>,
    ) -> std::io::Result<Units<SavedProgram, std::io::Error>> {
        let failed: Vec<(usize, std::io::Error)> = g
            .kernels
            .iter()
            .enumerate()
            .filter(|(_, k)| k.source.starts_with(FAIL))
            .map(|(i, k)| (i, std::io::Error::other(k.source.clone())))
            .collect();
        let held: Vec<(&str, &str)> = g
            .kernels
            .iter()
            .filter(|k| !k.source.starts_with(FAIL))
            .map(|k| (k.source.as_str(), k.symbol.as_str()))
            .collect();
        let program = if held.is_empty() {
            self.compiles.fetch_add(1, Ordering::SeqCst);
            None
        } else {
            Some(self.compile_texts(held.into_iter())?)
        };
        Ok(Units { program, failed })
    }

    fn identity(&self) -> Option<String> {
        Some("lines 1".into())
    }
    fn save(&self, p: &SavedProgram) -> Option<std::io::Result<SavedProgram>> {
        Some(Ok(p.clone()))
    }
    fn load(&self, saved: &SavedProgram) -> Option<std::io::Result<Compiled<SavedProgram>>> {
        let compiled_for = saved.bytes.starts_with(b"host ").then(|| {
            let end = saved.bytes.iter().position(|&b| b == b'\n');
            &saved.bytes[..end.map_or(saved.bytes.len(), |e| e + 1)]
        });
        if compiled_for.unwrap_or_default() != self.host_line().as_bytes() {
            return Some(Err(std::io::Error::other("compiled for another host")));
        }
        Some(Ok(Compiled {
            weight: saved.bytes.len() as u64,
            program: saved.clone(),
        }))
    }
    fn keeps_saved(&self, error: &std::io::Error) -> bool {
        error.to_string().contains("another host")
    }
    fn host_part(&self, _options: &[String]) -> std::io::Result<Option<[u8; 32]>> {
        Ok(self.host.map(|h| [h; 32]))
    }
    fn remembered(&self, kernel: &BatchKernel<String>, error: &std::io::Error) -> Option<String> {
        let _ = error;
        kernel.source.strip_prefix(FAIL).map(str::to_string)
    }
}

impl Lines {
    /// The program of `(text, symbol)`s: one compile.
    fn compile_texts<'a>(
        &self,
        kernels: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> std::io::Result<Compiled<SavedProgram>> {
        self.compiles.fetch_add(1, Ordering::SeqCst);
        let (text, symbols): (Vec<&str>, Vec<String>) =
            kernels.map(|(t, s)| (t, s.to_string())).unzip();
        let program = SavedProgram {
            bytes: format!("{}{}", self.host_line(), text.join("\n")).into_bytes(),
            symbols,
        };
        Ok(Compiled {
            weight: program.bytes.len() as u64,
            program,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernel_cache::BatchKernel;

    fn kernel(i: u32) -> BatchKernel<String> {
        BatchKernel {
            key: format!("key-{i}"),
            options: vec![],
            symbol: format!("k{i}"),
            source: format!("text {i}"),
        }
    }

    #[test]
    fn a_program_is_its_texts_and_loads_only_on_its_host() {
        let here = Lines::on_host(Some(1));
        let group = [kernel(0), kernel(1)];
        let compiled = here
            .compile_group(&Group {
                index: 0,
                n_groups: 1,
                options: &[],
                kernels: group.iter().collect(),
            })
            .expect("compile");
        assert_eq!(compiled.program.bytes, b"host 1\ntext 0\ntext 1");
        assert_eq!(here.compiles(), 1);
        assert!(here.load(&compiled.program).expect("loads").is_ok());
        let elsewhere = Lines::on_host(Some(2))
            .load(&compiled.program)
            .expect("loads");
        let e = elsewhere.expect_err("another host");
        assert!(Lines::default().keeps_saved(&e));
        assert!(
            Lines::default()
                .load(&compiled.program)
                .expect("loads")
                .is_err()
        );
    }
}
