//! The yes/no question before a step that changes or deletes a stack
//! (`update`, `destroy`): the one place that reads an answer from the terminal.

use std::io::IsTerminal;

pub use crate::ops::ConfirmError;

/// Asks a yes/no question on the terminal. Without a terminal and without
/// `--yes`, refuses (an unattended run must say --yes).
pub fn confirm(question: &str, yes: bool) -> Result<bool, ConfirmError> {
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        return Err(ConfirmError::NoTerminal);
    }
    eprint!("{question} [y/N] ");
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|source| ConfirmError::Read { source })?;
    Ok(matches!(line.trim().to_lowercase().as_str(), "y" | "yes"))
}
