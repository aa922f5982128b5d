//! `toolshed serve`: run the registry server on the database named by `--database-url`,
//! until Ctrl-C or SIGTERM.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::anyhow;
use clap::Args;
use toolshed_journal::JournalError;
use toolshed_registry::RegistryError;
use toolshed_server::{Server, ServerConfig, ServerError};

use crate::output::{EXIT_BAD_INPUT, EXIT_INTERNAL, Failure};

/// The env var holding the token signing secret.
pub const JWT_SECRET_VAR: &str = "TOOLSHED_JWT_SECRET";
/// The env var holding the first admin's password.
pub const ADMIN_PASSWORD_VAR: &str = "TOOLSHED_ADMIN_PASSWORD";

/// Arguments of `toolshed serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen; port 0 picks a free one (the first line printed names it).
    #[arg(long, default_value = "127.0.0.1:8000", value_name = "HOST:PORT")]
    addr: SocketAddr,
    /// The largest request body in bytes (default 2 MiB).
    #[arg(long, value_name = "BYTES")]
    max_body_bytes: Option<usize>,
    /// How long one request may take, in seconds (default 600).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout_secs: Option<u64>,
    /// The sandbox's memory limit when a request sets none, in MB (default 256).
    #[arg(long, env = "TOOLSHED_SANDBOX_MEMORY_MB", value_name = "MB", value_parser = clap::value_parser!(u64).range(8..))]
    sandbox_memory_mb: Option<u64>,
    /// The most memory a sandboxed run may ask for, in MB (default 1024).
    #[arg(long, env = "TOOLSHED_SANDBOX_MAX_MEMORY_MB", value_name = "MB", value_parser = clap::value_parser!(u64).range(8..))]
    sandbox_max_memory_mb: Option<u64>,
    /// The sandbox's timeout when a request sets none, in seconds (default 30).
    #[arg(long, env = "TOOLSHED_SANDBOX_TIMEOUT_SECONDS", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    sandbox_timeout_seconds: Option<u64>,
    /// The longest timeout a sandboxed run may ask for, in seconds (default 300).
    #[arg(long, env = "TOOLSHED_SANDBOX_MAX_TIMEOUT_SECONDS", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    sandbox_max_timeout_seconds: Option<u64>,
    /// Never give a sandboxed run the network (a request for it is lowered to off and
    /// reported in `clamped`).
    #[arg(long, env = "TOOLSHED_SANDBOX_NO_NETWORK")]
    sandbox_no_network: bool,
    /// Sandboxes started ahead for runs of inline `code` (`POST
    /// /api/v1/tools/sandbox/execute`): each waits, locked down in its namespaces and
    /// cgroup, for the next run of its limits, which then pays for its exec only. Each
    /// holds a pool uid and a copy-on-write view of the server's memory while it waits;
    /// 0 starts every run's own (default 1, at most 64).
    #[arg(long, env = "TOOLSHED_SANDBOX_STARTED_AHEAD", value_name = "N", value_parser = clap::value_parser!(u64).range(0..=64))]
    sandbox_started_ahead: Option<u64>,
    /// Run subprocess tools (python:, node:, exec:) on the host, outside the sandbox.
    /// For trusted set-ups only: a tool then runs as the server's own user and can read
    /// what the server can. Named in the start-up log.
    #[arg(long, env = UNSANDBOXED_VAR, action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
    unsandboxed: bool,
    /// A folder under which an admin may register `python:`, `node:` or `exec:`
    /// endpoints naming a path on this server (repeatable; `TOOLSHED_TOOL_ROOTS` takes
    /// a `:`-separated list). Without one, no host path is accepted and tools upload
    /// their code.
    #[arg(
        long = "tool-root",
        value_name = "DIR",
        env = "TOOLSHED_TOOL_ROOTS",
        value_delimiter = ':'
    )]
    tool_roots: Vec<std::path::PathBuf>,
    /// The folder of uploaded code and installed dependencies (default: `code/` in the
    /// cache folder, `$TOOLSHED_CACHE_DIR` or `~/.cache/toolshed`).
    #[arg(long, env = "TOOLSHED_CODE_DIR", value_name = "DIR")]
    code_dir: Option<std::path::PathBuf>,
    /// How long an access token is valid, in seconds (default 900). A withdrawn token
    /// is refused within seconds whatever this says.
    #[arg(long, env = "TOOLSHED_TOKEN_TTL_SECONDS", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    token_ttl_seconds: Option<u64>,
    /// How long a refresh token is valid, in seconds (default 43200, 12 hours).
    #[arg(long, env = "TOOLSHED_REFRESH_TTL_SECONDS", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    refresh_ttl_seconds: Option<u64>,
    /// Where to write the first admin's generated password (a new file, mode 0600),
    /// when this start creates it. Without it the password is shown once on stderr if
    /// that is a terminal, and nowhere otherwise (set one with `toolshed user passwd`).
    /// Never written to the log.
    #[arg(long, env = "TOOLSHED_ADMIN_PASSWORD_FILE", value_name = "PATH")]
    admin_password_file: Option<std::path::PathBuf>,
    /// The connection caps, timeouts and minimum body rate, and the execute rate.
    #[command(flatten)]
    limits: crate::serve_limits::LimitArgs,
    /// An address or range (CIDR) of a reverse proxy in front of the server: from it,
    /// the client is the rightmost address of `Forwarded` or `X-Forwarded-For` that is
    /// not a trusted proxy, and the per-address connection cap does not apply.
    /// Repeatable; the variable takes a comma-separated list. Without one, the client is
    /// the connection's peer and those headers are ignored.
    #[arg(
        long = "trusted-proxy",
        env = "TOOLSHED_TRUSTED_PROXIES",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    trusted_proxies: Vec<toolshed_server::client_addr::TrustedProxy>,
    /// A host name or address range (CIDR) HTTP tools may reach although it is not
    /// public (loopback, private, link-local, metadata addresses are refused otherwise,
    /// after DNS resolution). Repeatable; the variable takes a comma-separated list.
    #[arg(
        long = "allow-http-host",
        env = "TOOLSHED_HTTP_ALLOW",
        value_name = "HOST|CIDR",
        value_delimiter = ','
    )]
    allow_http_host: Vec<toolshed_dispatch::HttpAllow>,
    /// The credentials policy (YAML or JSON): which credentials each tenant's tools may
    /// declare and where each value comes from,
    /// `{TENANT|"*": {NAME: {provider: env|vault, key: VARIABLE_OR_ENTRY}}}`. Without
    /// one, no tool gets a credential; `TOOLSHED_*` names are never served.
    #[arg(long, env = "TOOLSHED_CREDENTIALS_POLICY", value_name = "FILE")]
    credentials_policy: Option<std::path::PathBuf>,
    /// Keep finished runs this long, then remove them (units s, m, h, d, w; default
    /// `30d`), or `off` to keep every run: the server prunes at start-up and every
    /// `--prune-every`. Running and parked runs are always kept.
    #[arg(long, env = "TOOLSHED_RETAIN_RUNS", value_name = "AGE|off", value_parser = parse_retention)]
    retain_runs: Option<RetainRuns>,
    /// How often to prune finished runs (default 5m).
    #[arg(long, value_name = "AGE", value_parser = crate::retention::parse_age)]
    prune_every: Option<Duration>,
    /// Four-eyes for every gated call: whoever asked for a call may not approve it
    /// (403 `SELF_APPROVAL`); another user must. Without it only tools declaring
    /// `approval: {four_eyes: true}` ask for it.
    #[arg(long, env = "TOOLSHED_FOUR_EYES", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
    four_eyes: bool,
    /// Origins allowed to call `/mcp` besides the loopback ones (comma-separated, e.g.
    /// `https://tools.example.com`); each one's host is also an allowed `Host`. Any other
    /// `Origin` or `Host` is a 403 (DNS-rebinding protection).
    #[arg(
        long,
        env = "TOOLSHED_MCP_ALLOWED_ORIGINS",
        value_name = "ORIGIN",
        value_delimiter = ','
    )]
    mcp_allowed_origins: Vec<String>,
    /// The URL people open the console at, when a proxy stands in front of the server
    /// (e.g. `https://tools.example.com`): an `https://` one makes the console's
    /// cookies `Secure`, and its origin passes the console's same-origin check. An
    /// absolute http(s) URL with no path beyond `/`, no credentials, query or fragment.
    /// (Checked when the server starts, not by the parser, which would echo a password
    /// in the URL.)
    #[arg(long, env = "TOOLSHED_PUBLIC_URL", value_name = "URL")]
    public_url: Option<String>,
    /// The prompts and resources `/mcp` offers beside the tools: a YAML file with
    /// `prompts:`, `resources:` and `templates:` (docs/design/mcp.md, "Server").
    #[arg(long, env = "TOOLSHED_MCP_CATALOG", value_name = "FILE")]
    mcp_catalog: Option<std::path::PathBuf>,
    /// Close an MCP session's POST stream that is still open after this many seconds
    /// (a long call: an approval, a person answering, a slow tool); the client resumes
    /// it with `Last-Event-ID` and gets the answer (SEP-1699 polling). For proxies
    /// that drop long-held connections; every 2025-11-25 SDK client resumes. Off by
    /// default.
    #[arg(long, env = "TOOLSHED_MCP_SSE_CLOSE_AFTER", value_name = "SECS",
        value_parser = clap::value_parser!(u64).range(1..=86_400))]
    mcp_sse_close_after: Option<u64>,
}

/// The env var that runs tools unsandboxed (`1`, `true`, `yes`, `on`).
pub const UNSANDBOXED_VAR: &str = "TOOLSHED_UNSANDBOXED";

/// Open, seed and run the server. The first line on stdout is always
/// `toolshed registry listening on http://ADDR`.
pub async fn run(args: ServeArgs, database_url: &str) -> Result<(), Failure> {
    let mut config = ServerConfig::new(database_url);
    config.addr = args.addr;
    if let Some(b) = args.max_body_bytes {
        config.max_body_bytes = b;
    }
    if let Some(s) = args.request_timeout_secs {
        config.request_timeout = Duration::from_secs(s);
    }
    if let Some(s) = args.token_ttl_seconds {
        config.token_ttl = Duration::from_secs(s);
    }
    if let Some(s) = args.refresh_ttl_seconds {
        config.refresh_ttl = Duration::from_secs(s);
    }
    sandbox_settings(&args, &mut config.sandbox)?;
    config.code.tool_roots = args.tool_roots.clone();
    config.code.dir = args.code_dir.clone();
    args.limits.apply(&mut config.limits);
    args.limits.apply_storage(&mut config.storage);
    config.trusted_proxies = args.trusted_proxies.clone();
    if args.unsandboxed {
        config.dispatcher.isolation = toolshed_dispatch::Isolation::Unsandboxed;
    }
    config.dispatcher.http.allow = args.allow_http_host.clone();
    if let Some(path) = &args.credentials_policy {
        config.credentials = toolshed_server::credentials::CredentialsPolicy::load(path)
            .map_err(|e| Failure::bad_input(anyhow!("{e} [CREDENTIALS_POLICY]")))?;
    }
    match args.retain_runs {
        Some(RetainRuns::For(age)) => {
            config.retain_runs = Some(toolshed_server::Retention::new(age));
        }
        Some(RetainRuns::Off) => config.retain_runs = None,
        None => {}
    }
    if let Some(every) = args.prune_every {
        if every.is_zero() {
            return Err(Failure::bad_input(anyhow!(
                "--prune-every 0s would prune without pause: give an interval such as 5m"
            )));
        }
        match &mut config.retain_runs {
            Some(retention) => retention.interval = every,
            None => {
                return Err(Failure::bad_input(anyhow!(
                    "--prune-every needs retention: --retain-runs off keeps every run"
                )));
            }
        }
    }
    config.four_eyes = args.four_eyes;
    config.public_url = args.public_url.as_deref().map(public_url).transpose()?;
    config.mcp_gateway.allowed_origins = args.mcp_allowed_origins.clone();
    config.mcp_gateway.sse_close_after = args.mcp_sse_close_after.map(Duration::from_secs);
    if let Some(path) = &args.mcp_catalog {
        config.mcp_gateway.catalog = toolshed_mcp::server::Catalog::load(path)
            .map_err(|e| Failure::bad_input(anyhow!("{e}")))?;
    }
    config.jwt_secret = secret_var(JWT_SECRET_VAR);
    config.admin_password = secret_var(ADMIN_PASSWORD_VAR);
    let shutdown = shutdown_signal()?;
    let server = Server::open(config).await.map_err(server_failure)?;
    let addr = server.local_addr();
    announce(&server, addr, args.admin_password_file.as_deref());
    tracing::info!(%addr, database = %toolshed_store::mask_password(database_url), "registry server started");
    server.run(shutdown).await.map_err(server_failure)?;
    tracing::info!("registry server stopped");
    Ok(())
}

/// The sandbox's limits from the flags, and the operator's opt-ins from the environment
/// (`TOOLSHED_SANDBOX_ALLOW_WEAKER`, `TOOLSHED_SANDBOX_LANDLOCK_MIN_ABI`), checked now: a
/// default above its ceiling is bad input, not a server without a sandbox.
fn sandbox_settings(
    args: &ServeArgs,
    settings: &mut toolshed_server::sandbox::SandboxSettings,
) -> Result<(), Failure> {
    const MIB: u64 = 1024 * 1024;
    let c = &mut settings.config;
    if let Some(m) = args.sandbox_memory_mb {
        c.defaults.memory_bytes = m.saturating_mul(MIB);
    }
    if let Some(m) = args.sandbox_max_memory_mb {
        c.ceilings.memory_bytes = m.saturating_mul(MIB);
    }
    if let Some(s) = args.sandbox_timeout_seconds {
        c.defaults.timeout_ms = s.saturating_mul(1000);
        c.defaults.cpu_time_ms = c.defaults.cpu_time_ms.max(c.defaults.timeout_ms);
    }
    if let Some(s) = args.sandbox_max_timeout_seconds {
        c.ceilings.timeout_ms = s.saturating_mul(1000);
        c.ceilings.cpu_time_ms = c.ceilings.timeout_ms;
        c.defaults.cpu_time_ms = c.defaults.cpu_time_ms.min(c.ceilings.cpu_time_ms);
    }
    if args.sandbox_no_network {
        c.network_allowed = false;
    }
    if let Some(n) = args.sandbox_started_ahead {
        c.started_ahead = usize::try_from(n).unwrap_or(usize::MAX);
    }
    let c = &settings.config;
    if c.defaults.memory_bytes > c.ceilings.memory_bytes {
        return Err(Failure::bad_input(anyhow!(
            "the default memory of a sandboxed run ({} MB) is above its ceiling ({} MB): lower --sandbox-memory-mb or raise --sandbox-max-memory-mb (TOOLSHED_SANDBOX_MEMORY_MB, TOOLSHED_SANDBOX_MAX_MEMORY_MB)",
            c.defaults.memory_bytes / MIB,
            c.ceilings.memory_bytes / MIB
        )));
    }
    if c.defaults.timeout_ms > c.ceilings.timeout_ms {
        return Err(Failure::bad_input(anyhow!(
            "the default timeout of a sandboxed run ({} s) is above its ceiling ({} s): lower --sandbox-timeout-seconds or raise --sandbox-max-timeout-seconds (TOOLSHED_SANDBOX_TIMEOUT_SECONDS, TOOLSHED_SANDBOX_MAX_TIMEOUT_SECONDS)",
            c.defaults.timeout_ms / 1000,
            c.ceilings.timeout_ms / 1000
        )));
    }
    settings.config = crate::sandbox::operator_config(settings.config.clone())?;
    settings
        .config
        .validate()
        .map_err(|e| Failure::bad_input(anyhow!("{e} [{}]", e.code())))?;
    Ok(())
}

/// The checked `--public-url`, or bad input naming the flag (the message never repeats
/// credentials found in the URL).
fn public_url(text: &str) -> Result<toolshed_server::public_url::PublicUrl, Failure> {
    toolshed_server::public_url::PublicUrl::parse(text)
        .map_err(|e| Failure::bad_input(anyhow!("--public-url (TOOLSHED_PUBLIC_URL): {e}")))
}

/// A secret from the environment; empty counts as unset.
fn secret_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// What an operator needs to start using the server, on stdout. A generated admin
/// password is never written there (stdout is often a log): it goes to the file the
/// operator named, or to stderr when that is a terminal, once.
fn announce(server: &Server, addr: SocketAddr, password_file: Option<&std::path::Path>) {
    use std::io::IsTerminal;

    let url = format!("http://{addr}");
    let mut out = std::io::stdout().lock();
    // The first line alone, flushed: scripts and tests read the port from it.
    let _ = writeln!(out, "toolshed registry listening on {url}");
    let _ = out.flush();
    let seeded = server.seeded();
    let mut text = String::new();
    if let Some((user, password)) = &seeded.admin {
        let how_to_log_in = format!(
            "  log in with:\n    export TOOLSHED_URL={url}\n    toolshed login --username {user}\n"
        );
        if std::env::var(ADMIN_PASSWORD_VAR).is_ok_and(|v| !v.is_empty()) {
            text.push_str(&format!(
                "created the first admin: user {user}, password the one in {ADMIN_PASSWORD_VAR}\n{how_to_log_in}"
            ));
        } else if let Some(path) = password_file {
            match write_secret_file(path, password) {
                Ok(()) => text.push_str(&format!(
                    "created the first admin: user {user}, password written to {} (mode 0600)\n{how_to_log_in}",
                    path.display()
                )),
                Err(e) => text.push_str(&format!(
                    "created the first admin: user {user}, but its password could not be written to {} ({e}); set one with `toolshed user passwd {user}`\n",
                    path.display()
                )),
            }
        } else if std::io::stderr().is_terminal() {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "the first admin's password (shown once, never logged): {password}\n  keep it, or set another with `toolshed user passwd {user}`"
            );
            let _ = err.flush();
            text.push_str(&format!(
                "created the first admin: user {user}, password shown on the terminal\n{how_to_log_in}"
            ));
        } else {
            text.push_str(&format!(
                "created the first admin: user {user}; its generated password is not shown (stderr is not a terminal and no --admin-password-file was given): set one with `toolshed user passwd {user}`\n"
            ));
        }
    }
    if seeded.tools > 0 {
        text.push_str(&format!(
            "registered {} standard-library tool{} (`toolshed registry tool list`)\n",
            seeded.tools,
            if seeded.tools == 1 { "" } else { "s" }
        ));
    }
    if !text.is_empty() {
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

/// Write a secret to a new file only its owner can read; an existing file is not
/// replaced.
fn write_secret_file(path: &std::path::Path, secret: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;

    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(secret.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()
}

/// A future completing on Ctrl-C (SIGINT) or SIGTERM. The handlers are installed here,
/// before the server announces itself, so a signal sent right after the first line is
/// never the default "die at once".
fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static, Failure> {
    use tokio::signal::unix::{SignalKind, signal};
    let install = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|e| Failure::Error {
            code: EXIT_INTERNAL,
            error: anyhow!("cannot handle {name}: {e}"),
        })
    };
    let mut interrupt = install(SignalKind::interrupt(), "Ctrl-C")?;
    let mut terminate = install(SignalKind::terminate(), "SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("interrupted; finishing requests in flight"),
            _ = terminate.recv() => tracing::info!("terminated; finishing requests in flight"),
        }
    })
}

/// The exit code for a server error: settings the operator got wrong are bad input
/// (2); a database or address that cannot be used is 3.
fn server_failure(e: ServerError) -> Failure {
    let code = match &e {
        ServerError::Auth(_)
        | ServerError::SandboxSettings(_)
        | ServerError::CodeSettings(_)
        | ServerError::Credentials(_) => EXIT_BAD_INPUT,
        ServerError::Journal(JournalError::InvalidUrl { .. }) => EXIT_BAD_INPUT,
        ServerError::Registry(RegistryError::InvalidUrl { .. }) => EXIT_BAD_INPUT,
        _ => EXIT_INTERNAL,
    };
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    Failure::Error {
        code,
        error: anyhow!("{text} [{}]", e.code()),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::ServeArgs;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn tools_run_sandboxed_unless_the_operator_says_unsandboxed() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .map(|c| c.serve.unsandboxed)
        };
        if std::env::var_os(super::UNSANDBOXED_VAR).is_none() {
            assert!(!parse(&[]).unwrap_or(true), "sandboxed by default");
        }
        assert!(parse(&["--unsandboxed"]).unwrap_or(false));
    }

    #[test]
    fn sandboxes_started_ahead_are_set_by_flag_and_capped() {
        let settings = |args: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .map_err(|e| e.to_string())?;
            let mut settings = toolshed_server::sandbox::SandboxSettings::default();
            super::sandbox_settings(&cli.serve, &mut settings).map_err(|e| format!("{e:?}"))?;
            Ok::<_, String>(settings.config.started_ahead)
        };
        if std::env::var_os("TOOLSHED_SANDBOX_STARTED_AHEAD").is_none() {
            assert_eq!(settings(&[]), Ok(1), "one by default");
        }
        assert_eq!(settings(&["--sandbox-started-ahead", "0"]), Ok(0));
        assert_eq!(settings(&["--sandbox-started-ahead", "4"]), Ok(4));
        let err = settings(&["--sandbox-started-ahead", "65"]).unwrap_err();
        assert!(err.contains("65") && err.contains("0..=64"), "{err}");
    }

    #[test]
    fn tool_roots_repeat_and_none_is_the_default() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .map(|c| c.serve.tool_roots)
                .unwrap_or_default()
        };
        if std::env::var_os("TOOLSHED_TOOL_ROOTS").is_none() {
            assert!(parse(&[]).is_empty(), "no host path by default");
        }
        assert_eq!(
            parse(&["--tool-root", "/srv/a", "--tool-root", "/srv/b"]),
            [std::path::PathBuf::from("/srv/a"), "/srv/b".into()]
        );
        assert_eq!(
            parse(&["--tool-root", "/srv/a:/srv/b"]),
            [std::path::PathBuf::from("/srv/a"), "/srv/b".into()]
        );
    }

    #[test]
    fn allow_http_host_takes_hosts_and_ranges_and_refuses_anything_else() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .map(|c| c.serve.allow_http_host)
        };
        let allowed = parse(&[
            "--allow-http-host",
            "10.0.0.0/8",
            "--allow-http-host",
            "api.internal,127.0.0.1",
        ])
        .unwrap_or_default();
        let shown: Vec<String> = allowed.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.0.0.0/8", "api.internal", "127.0.0.1/32"]);
        let err = parse(&["--allow-http-host", "10.0.0.0/40"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("10.0.0.0/40") && err.contains("prefix"),
            "{err}"
        );
    }

    #[test]
    fn public_url_takes_an_origin_and_names_itself_when_refused() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .ok()
                .and_then(|c| c.serve.public_url)
                .map(|u| super::public_url(&u))
        };
        if std::env::var_os("TOOLSHED_PUBLIC_URL").is_none() {
            assert!(parse(&[]).is_none(), "none by default");
        }
        let url = parse(&["--public-url", "https://Tools.example.com/"])
            .and_then(Result::ok)
            .map(|u| (u.origin().to_owned(), u.is_https()));
        assert_eq!(url, Some(("https://tools.example.com".to_owned(), true)));
        for (bad, says) in [
            ("tools.example.com", "not an absolute URL"),
            ("https://tools.example.com/console", "path"),
            ("https://tools.example.com/?x=1", "query"),
            ("ftp://tools.example.com", "scheme"),
            ("https://ann:secret@tools.example.com", "credentials"),
        ] {
            let err = match parse(&["--public-url", bad]) {
                Some(Err(crate::output::Failure::Error { code, error })) => {
                    assert_eq!(code, crate::output::EXIT_BAD_INPUT, "{bad}");
                    format!("{error:#}")
                }
                other => panic!(
                    "{bad}: expected bad input, got {:?}",
                    other.map(|r| r.is_ok())
                ),
            };
            assert!(
                err.contains("--public-url") && err.contains(says) && !err.contains("secret"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn trusted_proxies_repeat_take_ranges_and_refuse_anything_else() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .map(|c| c.serve.trusted_proxies)
        };
        if std::env::var_os("TOOLSHED_TRUSTED_PROXIES").is_none() {
            assert!(parse(&[]).unwrap_or_default().is_empty(), "none by default");
        }
        let shown: Vec<String> = parse(&[
            "--trusted-proxy",
            "10.0.0.0/8",
            "--trusted-proxy",
            "192.0.2.7,fd00::/8",
        ])
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(shown, ["10.0.0.0/8", "192.0.2.7/32", "fd00::/8"]);
        let err = parse(&["--trusted-proxy", "proxy.internal"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("proxy.internal") && err.contains("CIDR"),
            "{err}"
        );
    }

    #[test]
    fn connection_and_body_limits_are_set_by_flag_with_their_defaults() {
        let limits = |args: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .map_err(|e| e.to_string())?;
            let mut limits = toolshed_server::limits::Limits::default();
            cli.serve.limits.apply(&mut limits);
            Ok::<_, String>(limits.connections)
        };
        let set = [
            "TOOLSHED_MAX_CONNECTIONS",
            "TOOLSHED_MAX_CONNECTIONS_PER_ADDRESS",
            "TOOLSHED_BODY_TIMEOUT_SECONDS",
            "TOOLSHED_MIN_BODY_BYTES_PER_SECOND",
        ];
        if set.iter().all(|v| std::env::var_os(v).is_none()) {
            let c = limits(&[]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                (c.max_connections, c.max_connections_per_address),
                (1024, 128)
            );
            assert_eq!(c.body_timeout, std::time::Duration::from_secs(300));
            assert_eq!(c.min_body_rate, 1024);
            // One address never holds more than all of them.
            let c = limits(&["--max-connections", "50"]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(c.max_connections_per_address, 50);
        }
        let c = limits(&[
            "--max-connections-per-address",
            "16",
            "--body-timeout-seconds",
            "30",
            "--min-body-bytes-per-second",
            "0",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.max_connections_per_address, 16);
        assert_eq!(c.body_timeout, std::time::Duration::from_secs(30));
        assert_eq!(c.min_body_rate, 0);
        for bad in [
            ["--max-connections-per-address", "0"],
            ["--body-timeout-seconds", "0"],
            ["--min-body-bytes-per-second", "-1"],
        ] {
            assert!(limits(&bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn four_eyes_is_off_unless_the_operator_turns_it_on() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .map(|c| c.serve.four_eyes)
        };
        if std::env::var_os("TOOLSHED_FOUR_EYES").is_none() {
            assert!(!parse(&[]).unwrap_or(true), "off by default");
        }
        assert!(parse(&["--four-eyes"]).unwrap_or(false));
    }
}

/// `--retain-runs`: how long finished runs are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RetainRuns {
    /// This long.
    For(Duration),
    /// Forever.
    Off,
}

/// `--retain-runs`: an age, or `off`.
fn parse_retention(text: &str) -> Result<RetainRuns, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(RetainRuns::Off);
    }
    let age = crate::retention::parse_age(text)?;
    if age.is_zero() {
        return Err(format!(
            "`{text}` would remove every finished run at once: give an age such as 30d, or `off` to keep every run"
        ));
    }
    Ok(RetainRuns::For(age))
}
