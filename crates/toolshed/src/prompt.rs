//! Asking for a value the command line left out: on a terminal, a prompt on stderr
//! (without echo for passwords); otherwise one line read from stdin, so scripts can
//! pipe a password in.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, anyhow};

/// A line of text: prompted for on a terminal, else read from stdin.
pub fn line(prompt: &str) -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
    }
    let value = read_line()?;
    if value.is_empty() {
        return Err(anyhow!("{} is empty", prompt.trim_end_matches([':', ' '])));
    }
    Ok(value)
}

/// A password: asked for without echo on a terminal, else read from stdin.
pub fn password(prompt: &str) -> anyhow::Result<String> {
    if !std::io::stdin().is_terminal() {
        return read_line();
    }
    read_hidden(prompt)
}

/// A new password: asked for twice without echo on a terminal (both must match), else
/// read once from stdin.
pub fn new_password(prompt: &str) -> anyhow::Result<String> {
    if !std::io::stdin().is_terminal() {
        return read_line();
    }
    let first = read_hidden(prompt)?;
    let second = read_hidden("again: ")?;
    if first != second {
        return Err(anyhow!("the two passwords differ; nothing was changed"));
    }
    Ok(first)
}

/// One line of stdin without its line ending; end of input before any text is an
/// error.
fn read_line() -> anyhow::Result<String> {
    let mut buf = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut buf)
        .context("cannot read stdin")?;
    if n == 0 {
        return Err(anyhow!(
            "stdin ended before a value was given; pass it as a flag or pipe it in"
        ));
    }
    Ok(buf.trim_end_matches(['\n', '\r']).to_owned())
}

/// Turn off the terminal's echo, read a line, and turn it back on (also on error).
fn read_hidden(prompt: &str) -> anyhow::Result<String> {
    use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};

    /// Restores the terminal's settings when dropped.
    struct Restore(rustix::termios::Termios);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, &self.0);
        }
    }

    let stdin = std::io::stdin();
    let saved = tcgetattr(&stdin).context("cannot read the terminal's settings")?;
    let mut hidden = saved.clone();
    hidden.local_modes.remove(LocalModes::ECHO);
    hidden.local_modes.insert(LocalModes::ECHONL);
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    tcsetattr(&stdin, OptionalActions::Now, &hidden).context("cannot turn off echo")?;
    let restore = Restore(saved);
    let value = read_line();
    drop(restore);
    value
}
