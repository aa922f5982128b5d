//! The console's files, embedded in the binary at build time (`include_bytes!` of
//! `crates/toolshed-server/console/`): plain ES modules and CSS, served as they are,
//! so a plain `cargo build` needs no Node and the console needs no network.

use std::collections::HashMap;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// One embedded file.
pub struct Asset {
    /// Its path under `/assets/`.
    pub path: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub bytes: &'static [u8],
}

impl Asset {
    const fn new(path: &'static str, content_type: &'static str, bytes: &'static [u8]) -> Self {
        Asset {
            path,
            content_type,
            bytes,
        }
    }

    /// Its strong ETag: the quoted start of the SHA-256 of its bytes.
    pub fn etag(&self) -> &'static str {
        // Hashed once per process, on first use: the files never change while it runs.
        static ETAGS: OnceLock<HashMap<&'static str, String>> = OnceLock::new();
        let tags = ETAGS.get_or_init(|| {
            ASSETS
                .iter()
                .chain(std::iter::once(&INDEX))
                .map(|a| {
                    let hash = Sha256::digest(a.bytes);
                    (a.path, format!("\"{}\"", &hex::encode(hash)[..32]))
                })
                .collect()
        });
        tags.get(self.path).map(String::as_str).unwrap_or("\"\"")
    }
}

macro_rules! assets {
    ($($path:literal => $type:literal),* $(,)?) => {
        /// Every file under `/assets/`.
        pub static ASSETS: &[Asset] = &[
            $(Asset::new($path, $type, include_bytes!(concat!("../../console/", $path))),)*
        ];
    };
}

assets! {
    "console.css" => "text/css; charset=utf-8",
    "js/app.js" => "text/javascript; charset=utf-8",
    "js/api.js" => "text/javascript; charset=utf-8",
    "js/ui.js" => "text/javascript; charset=utf-8",
    "js/hidden.js" => "text/javascript; charset=utf-8",
    "js/form.js" => "text/javascript; charset=utf-8",
    "js/schema.js" => "text/javascript; charset=utf-8",
    "js/pages/tools.js" => "text/javascript; charset=utf-8",
    "js/pages/runs.js" => "text/javascript; charset=utf-8",
    "js/pages/other.js" => "text/javascript; charset=utf-8",
    "js/pages/mcp.js" => "text/javascript; charset=utf-8",
    "favicon.svg" => "image/svg+xml",
}

/// The app's page, answered for every client-side route.
pub static INDEX: Asset = Asset::new(
    "index.html",
    "text/html; charset=utf-8",
    include_bytes!("../../console/index.html"),
);

/// The file at `path` under `/assets/`, if the console has one.
pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// The total size in bytes of everything the console ships to the browser.
pub fn total_bytes() -> usize {
    INDEX.bytes.len() + ASSETS.iter().map(|a| a.bytes.len()).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_found_and_typed() {
        for a in ASSETS {
            assert!(find(a.path).is_some(), "{}", a.path);
            assert!(!a.bytes.is_empty(), "{}", a.path);
        }
        assert!(find("../Cargo.toml").is_none());
        assert!(find("").is_none());
    }

    #[test]
    fn the_page_has_no_inline_script() {
        let page = std::str::from_utf8(INDEX.bytes).unwrap_or_default();
        // Every <script> has a src: the CSP forbids inline script.
        for part in page.split("<script").skip(1) {
            let tag = part.split('>').next().unwrap_or_default();
            assert!(tag.contains("src="), "inline script in index.html: {tag}");
        }
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "no CDN"
        );
    }
}
