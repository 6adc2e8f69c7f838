//! Drawing the wait's progress (`aws::deploy::ProgressSink`): on a terminal,
//! an indicatif multi-progress with one line per stack, addon and node;
//! elsewhere, one plain line each time a line's status changes.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::aws::lifecycle::deploy::ProgressSink;
use crate::aws::wait::{ProgressLine, StackProgress, WaitingOn};

/// Draws successive progress models.
pub enum ProgressView {
    Tty {
        multi: MultiProgress,
        bars: BTreeMap<String, ProgressBar>,
    },
    Plain {
        last: BTreeMap<String, String>,
        out: Box<dyn Write + Send>,
    },
}

impl ProgressView {
    /// A multi-progress on stderr when it is a terminal, plain lines on stderr otherwise.
    pub fn for_stderr() -> ProgressView {
        if console::Term::stderr().is_term() {
            ProgressView::Tty {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                bars: BTreeMap::new(),
            }
        } else {
            ProgressView::plain(Box::new(std::io::stderr()))
        }
    }

    pub fn plain(out: Box<dyn Write + Send>) -> ProgressView {
        ProgressView::Plain {
            last: BTreeMap::new(),
            out,
        }
    }
}

/// The "waiting on" line: the wait conditions CloudFormation is waiting on,
/// each with its timeout and the time it gives up (stable between polls).
fn waiting_line(p: &StackProgress) -> Option<ProgressLine> {
    if p.waiting.is_empty() {
        return None;
    }
    let names: Vec<String> = p.waiting.iter().map(WaitingOn::describe).collect();
    Some(ProgressLine {
        name: "waiting on".into(),
        status: names.join("; "),
        detail: String::new(),
        finished: false,
        failed: false,
    })
}

impl ProgressSink for ProgressView {
    fn draw(&mut self, p: &StackProgress) {
        let waiting = waiting_line(p);
        let lines = p
            .stacks
            .iter()
            .map(|l| (format!("stack {}", l.name), l))
            .chain(p.addons.iter().map(|l| (format!("addon {}", l.name), l)))
            .chain(p.nodes.iter().map(|l| (format!("node {}", l.name), l)))
            .chain(waiting.iter().map(|l| (l.name.clone(), l)));
        match self {
            ProgressView::Tty { multi, bars } => {
                for (label, line) in lines {
                    let bar = bars.entry(label.clone()).or_insert_with(|| {
                        let b = multi.add(ProgressBar::new_spinner());
                        b.set_style(
                            ProgressStyle::with_template("{spinner} {prefix:<28} {msg}")
                                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                        );
                        b.set_prefix(label.clone());
                        b.enable_steady_tick(Duration::from_millis(120));
                        b
                    });
                    bar.set_message(message(line));
                    if line.finished && !bar.is_finished() {
                        bar.finish_with_message(message(line));
                    }
                }
                if waiting.is_none() {
                    if let Some(b) = bars.get("waiting on") {
                        b.set_message("no wait condition is running");
                    }
                }
            }
            ProgressView::Plain { last, out } => {
                for (label, line) in lines {
                    let text = message(line);
                    if last.get(&label) != Some(&text) {
                        let _ = writeln!(out, "{label}: {text}");
                        last.insert(label, text);
                    }
                }
                let _ = out.flush();
            }
        }
    }

    /// Stops the spinners, leaving the last lines on screen.
    fn finish(&mut self) {
        if let ProgressView::Tty { bars, .. } = self {
            for b in bars.values() {
                if !b.is_finished() {
                    b.abandon();
                }
            }
        }
    }
}

fn message(l: &ProgressLine) -> String {
    let status = if l.failed {
        console::style(&l.status).red().to_string()
    } else if l.finished {
        console::style(&l.status).green().to_string()
    } else {
        l.status.clone()
    };
    if l.detail.is_empty() {
        status
    } else {
        format!("{status}  {}", l.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::wait::WaitingOn;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plain_output_names_the_wait_condition_awaited_once_per_change() {
        let out = Shared::default();
        let mut view = ProgressView::plain(Box::new(out.clone()));
        let dex = WaitingOn {
            release: "dex".into(),
            wait_condition: "AddonDex0123456789".into(),
            timeout_secs: 7560,
            since_ms: 1_700_000_000_000,
        };
        let mut p = StackProgress {
            waiting: vec![dex.clone()],
            ..Default::default()
        };
        // The same state polled three times prints one line.
        for _ in 0..3 {
            view.draw(&p);
        }
        p.waiting.clear();
        view.draw(&p);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text, "waiting on: dex: at most 2h6m, until 00:19:20 UTC\n");
    }
}
