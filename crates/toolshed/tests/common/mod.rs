//! What several CLI test files share: a `toolshed serve` on a free port over a new
//! SQLite database, its admin's password known.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The admin password of a [`serve_with`] server.
pub const ADMIN_PASSWORD: &str = "admin-password-1";

/// A running `toolshed serve`, killed when dropped.
pub struct Served {
    child: Child,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `toolshed serve` with `args`, and wait for the line naming its address.
pub fn serve_with(args: &[&str]) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("server.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir.path())
        .env("TOOLSHED_CACHE_DIR", dir.path().join("cache"))
        .env("TOOLSHED_DATABASE_URL", &db)
        .env("TOOLSHED_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env_remove("TOOLSHED_JWT_SECRET")
        .env_remove("TOOLSHED_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .trim()
        .strip_prefix("toolshed registry listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_owned();
    Served {
        child,
        url,
        _dir: dir,
    }
}
