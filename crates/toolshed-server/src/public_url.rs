//! The URL people reach the server at from outside (`toolshed serve --public-url`,
//! `TOOLSHED_PUBLIC_URL`), when that is not what the server sees: behind a TLS proxy the
//! server hears plain HTTP on its own address. The console's cookie gets `Secure` when it
//! is `https://`, and a changing request from its origin passes the console's
//! same-origin check.

use std::fmt;
use std::str::FromStr;

/// A public URL, checked: absolute `http://` or `https://`, with a host, and nothing
/// else (no path beyond `/`, no credentials, query or fragment): an origin. Only
/// [`PublicUrl::parse`] makes one, so a held value is always valid.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// `scheme://host[:port]` as a browser sends it in `Origin` (lower-case host,
    /// default port left out).
    origin: String,
    /// The host alone (lower-case), for [`PublicUrl::is_downgrade_of`].
    host: String,
    https: bool,
}

/// Why a public URL was refused. The message names the problem and the fix; it never
/// repeats credentials found in the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{given} is not a usable public URL: {reason}; give the absolute http(s) URL people open the console at, such as https://tools.example.com"
)]
pub struct InvalidPublicUrl {
    /// The URL as given, quoted, or a placeholder when it carried credentials.
    given: String,
    /// What is wrong with it.
    reason: String,
}

impl PublicUrl {
    /// Check `text` and keep its origin.
    pub fn parse(text: &str) -> Result<PublicUrl, InvalidPublicUrl> {
        let shown = format!("`{text}`");
        let refuse = |reason: String| InvalidPublicUrl {
            given: shown.clone(),
            reason,
        };
        let url = url::Url::parse(text.trim())
            .map_err(|e| refuse(format!("it is not an absolute URL ({e})")))?;
        if !url.username().is_empty() || url.password().is_some() {
            // Never echo a password, not even in an error.
            return Err(InvalidPublicUrl {
                given: "the URL".into(),
                reason: "it carries credentials (`user:password@`): remove them".into(),
            });
        }
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            other => {
                return Err(refuse(format!(
                    "its scheme is `{other}`, not http or https"
                )));
            }
        };
        let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
            return Err(refuse("it has no host".into()));
        };
        let host = host.to_owned();
        if url.query().is_some() {
            return Err(refuse("it has a query string (`?…`): remove it".into()));
        }
        if url.fragment().is_some() {
            return Err(refuse("it has a fragment (`#…`): remove it".into()));
        }
        if url.path() != "/" {
            return Err(refuse(format!(
                "it has the path `{}`, and the console is served at the root of its host: remove the path",
                url.path()
            )));
        }
        Ok(PublicUrl {
            origin: url.origin().ascii_serialization(),
            host,
            https,
        })
    }

    /// `scheme://host[:port]`, as a browser sends it in `Origin`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Whether people reach the server over HTTPS.
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// Whether an `Origin` header's value is this URL's origin (compared as origins, so
    /// an upper-case host or an explicit default port still matches).
    pub fn is_origin(&self, origin: &str) -> bool {
        url::Url::parse(origin)
            .map(|u| u.origin().ascii_serialization() == self.origin)
            .unwrap_or(false)
    }

    /// Whether `origin` is this URL's host over plain HTTP (any port) while the public
    /// URL is HTTPS: a downgraded page the console never serves, refused even though
    /// the request's `Host` may name the same host.
    pub fn is_downgrade_of(&self, origin: &str) -> bool {
        self.https
            && url::Url::parse(origin)
                .is_ok_and(|u| u.scheme() == "http" && u.host_str() == Some(self.host.as_str()))
    }
}

impl FromStr for PublicUrl {
    type Err = InvalidPublicUrl;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PublicUrl::parse(s)
    }
}

impl fmt::Display for PublicUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)
    }
}

impl fmt::Debug for PublicUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicUrl({})", self.origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_kept_and_everything_else_refused() {
        for (given, origin, https) in [
            (
                "https://tools.example.com",
                "https://tools.example.com",
                true,
            ),
            (
                "https://Tools.Example.com/",
                "https://tools.example.com",
                true,
            ),
            (
                "https://tools.example.com:443",
                "https://tools.example.com",
                true,
            ),
            (
                "https://tools.example.com:8443/",
                "https://tools.example.com:8443",
                true,
            ),
            ("http://10.0.0.5:8000", "http://10.0.0.5:8000", false),
        ] {
            let url = PublicUrl::parse(given).unwrap_or_else(|e| panic!("{given}: {e}"));
            assert_eq!((url.origin(), url.is_https()), (origin, https), "{given}");
        }
        for (given, says) in [
            ("tools.example.com", "not an absolute URL"),
            ("/console", "not an absolute URL"),
            ("", "not an absolute URL"),
            ("ftp://tools.example.com", "scheme is `ftp`"),
            ("https://tools.example.com/console", "the path `/console`"),
            ("https://tools.example.com/?a=1", "query string"),
            ("https://tools.example.com/#top", "fragment"),
            ("file:///etc/passwd", "scheme is `file`"),
        ] {
            let e = PublicUrl::parse(given).expect_err(given).to_string();
            assert!(e.contains(says), "{given}: {e}");
            assert!(e.contains("https://tools.example.com"), "the fix: {e}");
        }
        let e = PublicUrl::parse("https://ann:hunter2@tools.example.com")
            .expect_err("credentials")
            .to_string();
        assert!(e.contains("credentials") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn origins_compare_as_origins() {
        let url = PublicUrl::parse("https://tools.example.com").expect("valid");
        assert!(url.is_origin("https://tools.example.com"));
        assert!(url.is_origin("https://TOOLS.example.com:443"));
        assert!(!url.is_origin("http://tools.example.com"));
        assert!(!url.is_origin("https://tools.example.com.evil.test"));
        assert!(!url.is_origin("https://evil.test"));
        assert!(!url.is_origin("null"));
        assert!(url.is_downgrade_of("http://tools.example.com"));
        assert!(url.is_downgrade_of("http://Tools.example.com:8080"));
        assert!(!url.is_downgrade_of("http://127.0.0.1:8000"));
        let plain = PublicUrl::parse("http://tools.example.com").expect("valid");
        assert!(!plain.is_downgrade_of("http://tools.example.com"));
    }
}
