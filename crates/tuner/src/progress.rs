//! Progress a person can watch: a bar on a terminal, plain lines otherwise, nothing when
//! asked for quiet.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// How a tuner shows its progress (on standard error).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProgressMode {
    /// A progress bar when standard error is a terminal, plain lines otherwise.
    #[default]
    Auto,
    /// Plain lines, one per event, whatever standard error is.
    Lines,
    /// Nothing.
    Quiet,
}

/// One search's progress display.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    label: String,
}

impl Progress {
    /// A display for a search of `label` over `len` trials (no bar for none: a replay
    /// says its lines plainly).
    pub(crate) fn start(mode: ProgressMode, label: &str, len: usize) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let (bar, lines) = match mode {
            ProgressMode::Quiet => (None, false),
            ProgressMode::Lines => (None, true),
            ProgressMode::Auto if terminal && len > 0 => {
                let bar = ProgressBar::new(len as u64);
                let style =
                    ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} trials {msg}")
                        .map(|s| s.progress_chars("=> "))
                        .unwrap_or_else(|_| ProgressStyle::default_bar());
                bar.set_style(style);
                bar.set_prefix(label.to_string());
                (Some(bar), false)
            }
            ProgressMode::Auto => (None, true),
        };
        Progress {
            bar,
            lines,
            label: label.to_string(),
        }
    }

    /// Says `line` (above the bar, or as a plain line).
    pub(crate) fn say(&self, line: &str) {
        if let Some(bar) = &self.bar {
            bar.println(format!("{}: {line}", self.label));
        } else if self.lines {
            eprintln!("[tuner] {}: {line}", self.label);
        }
    }

    /// Advances by `n` trials and shows the best time so far.
    pub(crate) fn advance(&self, n: usize, best: Option<f64>) {
        if let Some(bar) = &self.bar {
            bar.inc(n as u64);
            if let Some(b) = best {
                bar.set_message(format!("best {:.4} ms", b * 1e3));
            }
        }
    }

    /// Clears the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
