//! The terminal side of an operation's [`Events`](crate::ops::Events): its
//! report on stdout, its notes on stderr, `--wait`'s progress view, and the
//! yes/no question (or `--yes`). The commands' one terminal room: the
//! question is `confirm.rs`, the view `progress_view.rs`.

mod confirm;
mod progress_view;

use crate::aws::lifecycle::deploy::ProgressSink;
use crate::ops::{ConfirmError, Events};
use confirm::confirm;
use progress_view::ProgressView;

/// What a deploy command shows on the terminal.
pub struct Terminal {
    yes: bool,
    view: ProgressView,
}

impl Terminal {
    /// `yes`: the answer to every question is yes (`--yes`).
    pub fn new(yes: bool) -> Terminal {
        Terminal {
            yes,
            view: ProgressView::for_stderr(),
        }
    }
}

impl Events for Terminal {
    fn say(&mut self, line: &str) {
        println!("{line}");
    }

    fn note(&mut self, line: &str) {
        eprintln!("{line}");
    }

    fn confirm(&mut self, question: &str) -> Result<bool, ConfirmError> {
        confirm(question, self.yes)
    }

    fn progress(&mut self) -> &mut dyn ProgressSink {
        &mut self.view
    }
}
