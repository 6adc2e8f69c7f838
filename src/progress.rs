//! Progress display. The only module that uses indicatif: a bar on a TTY,
//! nothing otherwise (logs and CI stay clean).

use std::io::IsTerminal;

/// A progress counter that draws only when stderr is a terminal.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    /// `enabled` false never draws (e.g. `-o json`).
    pub fn new(len: u64, message: &str, enabled: bool) -> Progress {
        let bar = (enabled && std::io::stderr().is_terminal() && len > 0).then(|| {
            let bar = indicatif::ProgressBar::new(len);
            if let Ok(style) = indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {wide_msg:.dim}") {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(message.to_string());
            bar
        });
        Progress { bar }
    }

    pub fn inc(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
