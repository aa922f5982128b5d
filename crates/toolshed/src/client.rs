//! The registry server's HTTP client: where the server is (`TOOLSHED_URL`), which token
//! to send (`TOOLSHED_API_TOKEN`, else the one `toolshed login` saved), the `{"data": …}`
//! and `{"error": …}` envelopes, and how their failures become exit codes. Also
//! `toolshed login`, and the registry step of the agent resolver chain over HTTP.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use async_trait::async_trait;
use clap::Args;
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use toolshed_agent::{RegistryLookup, RegistryLookupError, RegistryTool};
use toolshed_api::requests::{LoginBody, RefreshBody};
use toolshed_api::views::{CodeDownload, CodeView, LoggedOut, TokenView, ToolDetail};
use toolshed_api::{ApiCode, Data, ErrorDetails, ErrorEnvelope};
use toolshed_core::file::ToolFile;
use toolshed_mcp::{HttpLaunch, Launch, McpServerSpec, StdioLaunch};

use crate::output::{EXIT_BAD_INPUT, EXIT_INTERNAL, Failure, print, print_json};
use crate::prompt;

/// The server the CLI talks to when `TOOLSHED_URL` is not set.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8000";

/// The env var naming the server.
pub const URL_VAR: &str = "TOOLSHED_URL";
/// The env var holding a bearer token (wins over the saved one).
pub const TOKEN_VAR: &str = "TOOLSHED_API_TOKEN";
/// The env var naming the folder of the saved token.
pub const CONFIG_DIR_VAR: &str = "TOOLSHED_CONFIG_DIR";

/// Where a token came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `TOOLSHED_API_TOKEN`.
    Env,
    /// The file `toolshed login` wrote.
    File(PathBuf),
}

/// A client of one registry server. `Debug` prints the token as `***`.
#[derive(Clone)]
pub struct Client {
    base: Url,
    /// Replaced when a saved access token ran out and the saved refresh token bought a
    /// new one.
    token: Arc<Mutex<Option<(String, TokenSource)>>>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = self
            .token
            .lock()
            .ok()
            .and_then(|t| t.as_ref().map(|(_, source)| format!("{source:?}")));
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("token", &source.map(|source| ("***", source)))
            .finish_non_exhaustive()
    }
}

/// A successful answer: its envelope (`Data<…>` or `Paged<…>` of `toolshed_api`) as
/// read, and the JSON as sent, which `--json` prints.
#[derive(Debug, Clone)]
pub struct Answer<T> {
    /// The answer, typed.
    pub body: T,
    json: Value,
}

impl<T> Answer<T> {
    /// The whole answer as sent (`{"data": …}`, with `meta` for listings).
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// Its `data` as sent.
    pub fn data_json(&self) -> &Value {
        &self.json["data"]
    }
}

/// Why a request failed.
#[derive(Debug)]
pub enum ClientError {
    /// The server answered with an error envelope.
    Api {
        /// The HTTP status.
        status: StatusCode,
        /// The stable code (`NOT_FOUND`, `CONFLICT`, `INVALID_ARGS`, …).
        code: ApiCode,
        /// The server's message.
        message: String,
        /// The field problems or schema violations, if any.
        details: Option<ErrorDetails>,
        /// Whether a token was sent, for the 401 hint.
        token: Option<TokenSource>,
    },
    /// The server answered an error status without the API's error envelope (a proxy, a
    /// server of another version).
    Status {
        /// The HTTP status.
        status: StatusCode,
        /// What it said.
        message: String,
    },
    /// The server could not be reached.
    Unreachable {
        /// The server's base URL.
        url: String,
        /// What the HTTP library said.
        reason: String,
    },
    /// The answer was not the API's JSON.
    Protocol {
        /// The server's base URL.
        url: String,
        /// What was wrong.
        reason: String,
    },
}

impl ClientError {
    /// The API error code, if the server answered with one.
    pub fn code(&self) -> Option<ApiCode> {
        match self {
            ClientError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The HTTP status, if the server answered.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Api { status, .. } | ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The exit code: 2 for the caller's mistakes (4xx), 3 for a broken or unreachable
    /// server.
    pub fn exit_code(&self) -> u8 {
        match self.status() {
            Some(status) if status.is_client_error() => EXIT_BAD_INPUT,
            _ => EXIT_INTERNAL,
        }
    }

    /// The text printed after `error: `: the message and code, the details the message
    /// does not already say, and a hint for what to do.
    pub fn describe(&self) -> String {
        match self {
            ClientError::Api {
                status,
                code,
                message,
                details,
                token,
            } => {
                let mut text = format!("{message} [{code}]");
                let lines = details
                    .as_ref()
                    .map(ErrorDetails::lines)
                    .unwrap_or_default();
                for line in lines {
                    if !message.contains(&line) {
                        text.push_str("\n  - ");
                        text.push_str(&line);
                    }
                }
                if *status == StatusCode::UNAUTHORIZED {
                    text.push_str(&match token {
                        None => format!(
                            "\nhint: you are not logged in: run `toolshed login` (or set {TOKEN_VAR})"
                        ),
                        Some(TokenSource::Env) => format!(
                            "\nhint: the token in {TOKEN_VAR} was refused: set a fresh one, or unset it and run `toolshed login`"
                        ),
                        Some(TokenSource::File(path)) => format!(
                            "\nhint: the token saved in {} was refused: run `toolshed login` again",
                            path.display()
                        ),
                    });
                }
                text
            }
            ClientError::Status { status, message } => {
                format!("{message} [HTTP {}]", status.as_u16())
            }
            ClientError::Unreachable { url, reason } => format!(
                "cannot reach the toolshed registry at {url} ({reason}); start it with `toolshed serve`, or set {URL_VAR} to where it runs"
            ),
            ClientError::Protocol { url, reason } => {
                format!("the server at {url} did not answer as a toolshed registry: {reason}")
            }
        }
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Error {
            code: e.exit_code(),
            error: anyhow!("{}", e.describe()),
        }
    }
}

impl Client {
    /// The client the environment configures: `TOOLSHED_URL` (default
    /// `http://127.0.0.1:8000`) and the token of [`find_token`].
    pub fn from_env() -> Result<Client, Failure> {
        let raw = std::env::var(URL_VAR)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        let base = parse_base(&raw).map_err(Failure::bad_input)?;
        let token = find_token().map_err(Failure::bad_input)?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("toolshed-cli/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| Failure::Error {
                code: EXIT_INTERNAL,
                error: anyhow!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Client {
            base,
            token: Arc::new(Mutex::new(token)),
            http,
        })
    }

    /// Whether the user pointed the CLI at a server: `TOOLSHED_URL` is set or a token is
    /// available. `agent validate` asks the registry only then.
    pub fn configured() -> bool {
        std::env::var(URL_VAR).is_ok_and(|u| !u.trim().is_empty())
            || find_token().is_ok_and(|t| t.is_some())
    }

    /// The server's base URL, as shown to people.
    pub fn base(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// The URL of an API path given as segments (each percent-encoded), with a query.
    pub fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
        }
        url
    }

    /// `GET` an API path; the answer read as `T`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
    ) -> Result<Answer<T>, ClientError> {
        self.send(Method::GET, self.url(segments, &[]), None::<&Value>)
            .await
    }

    /// `POST` a JSON body to an API path; the answer read as `T`.
    pub async fn post<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: &(impl Serialize + ?Sized),
    ) -> Result<Answer<T>, ClientError> {
        self.send(Method::POST, self.url(segments, &[]), Some(body))
            .await
    }

    /// Send one request with the bearer token and read the envelope: a success as `T`
    /// (a field the server did not send is an error naming it, never a silent default),
    /// an error as the API's error envelope.
    pub async fn send<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<Answer<T>, ClientError> {
        let path = url.path().to_owned();
        let (status, bytes) = self.exchange(&method, url.clone(), body).await?;
        // A saved access token lives minutes; the refresh token saved beside it buys
        // the next one, once per request.
        if status == StatusCode::UNAUTHORIZED && self.refresh().await {
            let (status, bytes) = self.exchange(&method, url, body).await?;
            return self.read(&method, &path, status, &bytes);
        }
        self.read(&method, &path, status, &bytes)
    }

    fn token(&self) -> Option<(String, TokenSource)> {
        self.token.lock().ok().and_then(|t| t.clone())
    }

    async fn exchange<B: Serialize + ?Sized>(
        &self,
        method: &Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<(StatusCode, Vec<u8>), ClientError> {
        let mut request = self.http.request(method.clone(), url);
        if let Some((token, _)) = self.token() {
            request = request.bearer_auth(token);
        }
        if let Some(b) = body {
            request = request.json(b);
        }
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.unreachable(&e))?;
        Ok((status, bytes.to_vec()))
    }

    /// After the saved token was refused: exchange the saved refresh token for new
    /// tokens and save them. Whether the request is worth sending again (a token from
    /// `TOOLSHED_API_TOKEN` is never replaced).
    async fn refresh(&self) -> bool {
        if !matches!(self.token(), Some((_, TokenSource::File(_)))) {
            return false;
        }
        let Some(refresh_token) = refresh_token_path()
            .ok()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
        else {
            return false;
        };
        let url = self.url(&["api", "v1", "auth", "refresh"], &[]);
        let Ok(response) = self
            .http
            .post(url)
            .json(&RefreshBody { refresh_token })
            .send()
            .await
        else {
            return false;
        };
        if !response.status().is_success() {
            return false;
        }
        let Ok(answer) = response.json::<Data<TokenView>>().await else {
            return false;
        };
        let t = answer.data;
        let Ok(path) = save_tokens(&t.token, &t.refresh_token) else {
            return false;
        };
        if let Ok(mut slot) = self.token.lock() {
            *slot = Some((t.token, TokenSource::File(path)));
        }
        true
    }

    /// Read an answer: a success as `T`, an error as the API's error envelope (or, when
    /// the body is not one, the status and what the body says).
    fn read<T: DeserializeOwned>(
        &self,
        method: &Method,
        path: &str,
        status: StatusCode,
        bytes: &[u8],
    ) -> Result<Answer<T>, ClientError> {
        if status.is_success() {
            let json: Value = serde_json::from_slice(bytes).map_err(|e| {
                self.protocol(format!(
                    "its {status} answer to {method} {path} is not JSON ({e})"
                ))
            })?;
            let body = serde_path_to_error::deserialize(&json).map_err(|e| {
                let at = e.path().to_string();
                self.protocol(format!(
                    "its answer to {method} {path} is not one this CLI reads: `{at}`: {} (are the CLI and the server the same version?)",
                    e.into_inner()
                ))
            })?;
            return Ok(Answer { body, json });
        }
        match serde_json::from_slice::<ErrorEnvelope>(bytes) {
            Ok(envelope) => Err(ClientError::Api {
                status,
                code: envelope.error.code,
                message: envelope.error.message,
                details: envelope.error.details,
                token: self.token().map(|(_, s)| s),
            }),
            Err(_) => {
                let text = String::from_utf8_lossy(bytes);
                let text = text.trim();
                let message = if text.is_empty() {
                    format!(
                        "the server answered {status} without a message ({})",
                        self.base()
                    )
                } else {
                    format!(
                        "the server answered {status}: {}",
                        text.chars().take(200).collect::<String>()
                    )
                };
                Err(ClientError::Status { status, message })
            }
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        let reason = if e.is_connect() {
            "connection refused or host unreachable".to_owned()
        } else if e.is_timeout() {
            "timed out".to_owned()
        } else {
            // The chain's innermost cause is the informative part.
            let mut source: &dyn std::error::Error = e;
            while let Some(s) = source.source() {
                source = s;
            }
            source.to_string()
        };
        ClientError::Unreachable {
            url: self.base().to_owned(),
            reason,
        }
    }

    fn protocol(&self, reason: String) -> ClientError {
        ClientError::Protocol {
            url: self.base().to_owned(),
            reason,
        }
    }
}

fn parse_base(raw: &str) -> anyhow::Result<Url> {
    let url = Url::parse(raw.trim())
        .map_err(|e| anyhow!("{URL_VAR}=`{raw}` is not a URL ({e}); e.g. {DEFAULT_URL}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(anyhow!(
            "{URL_VAR}=`{raw}` must be an http:// or https:// URL with a host, e.g. {DEFAULT_URL}"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(anyhow!(
            "{URL_VAR}=`{raw}` must not have a query or a fragment"
        ));
    }
    Ok(url)
}

/// The folder of the saved token: `$TOOLSHED_CONFIG_DIR`, else
/// `$XDG_CONFIG_HOME/toolshed`, else `~/.config/toolshed`.
pub fn config_dir() -> anyhow::Result<PathBuf> {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(dir) = non_empty(CONFIG_DIR_VAR) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = non_empty("XDG_CONFIG_HOME") {
        return Ok(PathBuf::from(dir).join("toolshed"));
    }
    if let Some(home) = non_empty("HOME") {
        return Ok(PathBuf::from(home).join(".config").join("toolshed"));
    }
    Err(anyhow!(
        "cannot tell where to keep the login token: set {CONFIG_DIR_VAR} (or HOME)"
    ))
}

/// The saved token's file.
pub fn token_path() -> anyhow::Result<PathBuf> {
    Ok(config_dir()?.join("token"))
}

/// The token to send: `TOOLSHED_API_TOKEN`, else the saved one, else none.
pub fn find_token() -> anyhow::Result<Option<(String, TokenSource)>> {
    if let Ok(t) = std::env::var(TOKEN_VAR) {
        let t = t.trim();
        if !t.is_empty() {
            return Ok(Some((t.to_owned(), TokenSource::Env)));
        }
    }
    let Ok(path) = token_path() else {
        return Ok(None);
    };
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => {
            Ok(Some((text.trim().to_owned(), TokenSource::File(path))))
        }
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow!(
            "cannot read the saved token {}: {e}",
            path.display()
        )),
    }
}

/// The saved refresh token's file, beside the access token's.
pub fn refresh_token_path() -> anyhow::Result<PathBuf> {
    Ok(config_dir()?.join("refresh_token"))
}

/// Save a login's access and refresh tokens; the access token's file is returned.
pub fn save_tokens(token: &str, refresh_token: &str) -> anyhow::Result<PathBuf> {
    let path = save_token_to(token_path()?, token)?;
    save_token_to(refresh_token_path()?, refresh_token)?;
    Ok(path)
}

/// Save a token for later commands: the folder is created (mode 0700), the file is
/// written whole with mode 0600 and then moved into place.
fn save_token_to(path: PathBuf, token: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};

    let dir = path
        .parent()
        .ok_or_else(|| anyhow!("{} has no folder", path.display()))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| anyhow!("cannot create {}: {e}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.{}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(token.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow!("cannot save the token to {}: {e}", path.display())
    })?;
    Ok(path)
}

/// Arguments of `toolshed login`. `Debug` prints the password as `***`.
#[derive(Args)]
pub struct LoginArgs {
    /// The user name (asked for when left out).
    #[arg(long, short = 'u')]
    username: Option<String>,
    /// The password (asked for without echo when left out; a flag is visible to other
    /// users of this machine, so prefer the prompt or stdin).
    #[arg(long)]
    password: Option<String>,
    /// Print the answer as JSON (`token` left out).
    #[arg(long)]
    json: bool,
}

impl std::fmt::Debug for LoginArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginArgs")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("json", &self.json)
            .finish()
    }
}

/// `toolshed login`: exchange a user name and password for a token and save it.
pub async fn login(args: LoginArgs) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let username = match args.username {
        Some(u) => u,
        None => prompt::line("user name: ").map_err(Failure::bad_input)?,
    };
    let password = match args.password {
        Some(p) => p,
        None => {
            prompt::password(&format!("password for {username}: ")).map_err(Failure::bad_input)?
        }
    };
    let answer: Answer<Data<TokenView>> = client
        .post(
            &["api", "v1", "auth", "login"],
            &LoginBody {
                username: Some(username.clone()),
                email: None,
                password,
            },
        )
        .await?;
    let TokenView {
        token,
        expires_in,
        role,
        refresh_token,
        ..
    } = answer.body.data;
    let path = save_tokens(&token, &refresh_token).map_err(|error| Failure::Error {
        code: EXIT_INTERNAL,
        error,
    })?;
    if args.json {
        print_json(&json!({
            "url": client.base(),
            "username": username,
            "role": role,
            "expires_in": expires_in,
            "token_file": path.display().to_string(),
        }));
    } else {
        print(&format!(
            "logged in to {} as {username} (role {role}); token saved to {} (valid for {})",
            client.base(),
            path.display(),
            human_duration(expires_in),
        ));
    }
    if std::env::var(TOKEN_VAR).is_ok_and(|t| !t.trim().is_empty()) {
        eprintln!(
            "warning: {TOKEN_VAR} is set and is sent instead of the saved token; unset it to use this login"
        );
    }
    Ok(())
}

/// Arguments of `toolshed logout`.
#[derive(Debug, Args)]
pub struct LogoutArgs {
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

/// `toolshed logout`: end the login's session on the server (its access and refresh
/// tokens, and those of every refresh since, are refused from then on; the user's other
/// sessions go on), then delete the saved tokens. When the server cannot be reached the
/// saved tokens are kept, so the logout can be tried again: deleting them alone would
/// leave the session usable by anyone who copied them.
pub async fn logout(args: LogoutArgs) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let ended = match client
        .post::<Data<LoggedOut>>(&["api", "v1", "auth", "logout"], &json!({}))
        .await
    {
        Ok(answer) => answer.body.data.session_ended,
        // No valid token was sent (none saved, or it and its refresh ran out): no
        // session is left to end.
        Err(e) if e.status() == Some(StatusCode::UNAUTHORIZED) => false,
        Err(e) => return Err(e.into()),
    };
    let mut deleted = Vec::new();
    for path in [token_path(), refresh_token_path()] {
        let path = path.map_err(|error| Failure::Error {
            code: EXIT_INTERNAL,
            error,
        })?;
        match std::fs::remove_file(&path) {
            Ok(()) => deleted.push(path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Failure::Error {
                    code: EXIT_INTERNAL,
                    error: anyhow!("cannot delete the saved token {}: {e}", path.display()),
                });
            }
        }
    }
    if args.json {
        print_json(&json!({
            "url": client.base(),
            "session_ended": ended,
            "deleted": deleted,
        }));
    } else if ended {
        print(&format!(
            "logged out of {}: the session's tokens are refused from now on{}",
            client.base(),
            if deleted.is_empty() {
                String::new()
            } else {
                format!("; deleted {}", deleted.join(" and "))
            }
        ));
    } else {
        print(&format!(
            "no session to end at {} (no valid token was saved){}",
            client.base(),
            if deleted.is_empty() {
                String::new()
            } else {
                format!("; deleted {}", deleted.join(" and "))
            }
        ));
    }
    if std::env::var(TOKEN_VAR).is_ok_and(|t| !t.trim().is_empty()) {
        eprintln!("note: {TOKEN_VAR} is set, so its token was the one logged out; unset it too");
    }
    Ok(())
}

fn human_duration(secs: u64) -> String {
    if secs >= 3600 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs >= 60 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// The registry step of the agent resolver chain, over HTTP:
/// `GET /api/v1/registry/tools/{name}`, and the MCP server entries of
/// `GET /api/v1/mcp-servers` for `ref: mcp-servers/NAME`.
#[derive(Debug, Clone)]
pub struct HttpRegistry {
    client: Client,
}

impl HttpRegistry {
    /// Ask this server.
    pub fn new(client: Client) -> Self {
        HttpRegistry { client }
    }
}

#[async_trait]
impl RegistryLookup for HttpRegistry {
    async fn find_tool(&self, name: &str) -> Result<Option<RegistryTool>, RegistryLookupError> {
        let answer: Answer<Data<ToolDetail>> = match self
            .client
            .get(&["api", "v1", "registry", "tools", name])
            .await
        {
            Ok(a) => a,
            Err(e) if e.status() == Some(StatusCode::NOT_FOUND) => return Ok(None),
            Err(e) => {
                return Err(RegistryLookupError::Unavailable(match e {
                    ClientError::Api { .. } | ClientError::Status { .. } => {
                        format!("{} (registry {})", e.describe(), self.client.base())
                    }
                    other => other.describe(),
                }));
            }
        };
        let tool = answer.body.data;
        let definition: ToolFile = serde_json::from_value(tool.definition).map_err(|e| {
            RegistryLookupError::InvalidAnswer(format!(
                "the registry's definition of `{name}` is not a tool.yaml this CLI reads: {e}"
            ))
        })?;
        let endpoint = tool
            .summary
            .endpoint
            .or_else(|| definition.endpoint.clone())
            .ok_or_else(|| RegistryLookupError::NoEndpoint {
                name: name.to_owned(),
            })?;
        let endpoint = match &tool.code {
            Some(code) => self.local_code(name, code, &endpoint).await?,
            None => endpoint,
        };
        Ok(Some(RegistryTool {
            definition,
            endpoint,
        }))
    }

    /// The tenant's MCP server entry named `name`, from the pages of
    /// `GET /api/v1/mcp-servers` (entries are addressed by id; the listing is by name).
    /// A server without MCP server entries (404 on the route) has none.
    async fn find_mcp_server(
        &self,
        name: &str,
    ) -> Result<Option<McpServerSpec>, RegistryLookupError> {
        for page in 1..=MCP_LIST_PAGES {
            let answer: Answer<toolshed_api::Paged<toolshed_api::views::McpServerView>> = match self
                .client
                .send(
                    Method::GET,
                    self.client.url(
                        &["api", "v1", "mcp-servers"],
                        &[("page", page.to_string()), ("per_page", "100".into())],
                    ),
                    None::<&Value>,
                )
                .await
            {
                Ok(a) => a,
                Err(e) if e.status() == Some(StatusCode::NOT_FOUND) => return Ok(None),
                Err(e) => {
                    return Err(RegistryLookupError::Unavailable(format!(
                        "{} (registry {})",
                        e.describe(),
                        self.client.base()
                    )));
                }
            };
            let listing = answer.body;
            if let Some(entry) = listing.data.into_iter().find(|s| s.name == name) {
                return mcp_spec_of(entry).map(Some);
            }
            if u64::from(page) >= listing.meta.pages() {
                break;
            }
        }
        Ok(None)
    }
}

/// How many pages of MCP server entries a lookup reads at most (100 each).
const MCP_LIST_PAGES: u32 = 50;

/// How to reach the server a registry entry describes (the registry's own view, so a
/// field it adds is read here without a second copy of the shape).
fn mcp_spec_of(
    view: toolshed_api::views::McpServerView,
) -> Result<McpServerSpec, RegistryLookupError> {
    if !view.enabled {
        // Entries from project-scoped config files wait for an admin.
        return Err(RegistryLookupError::InvalidAnswer(format!(
            "the MCP server `{}` is registered disabled; an admin enables it (PUT /api/v1/mcp-servers/{{id}} with `enabled: true`) before agents use it",
            view.name
        )));
    }
    let launch = match view.transport.as_str() {
        "stdio" => Launch::Stdio(StdioLaunch {
            command: view.command.ok_or_else(|| {
                RegistryLookupError::InvalidAnswer(format!(
                    "the registry's stdio MCP server `{}` has no command",
                    view.name
                ))
            })?,
            args: view.args,
            env: view.env,
            network: view.network,
        }),
        // The registry serves `sse` entries over Streamable HTTP too.
        "streamable_http" | "http" | "sse" => Launch::Http(HttpLaunch {
            url: view
                .url
                .or(Some(view.endpoint).filter(|e| !e.is_empty()))
                .ok_or_else(|| {
                    RegistryLookupError::InvalidAnswer(format!(
                        "the registry's HTTP MCP server `{}` has no url",
                        view.name
                    ))
                })?,
            headers: view.headers,
        }),
        other => {
            return Err(RegistryLookupError::InvalidAnswer(format!(
                "the registry's MCP server `{}` has the transport `{other}`, which this CLI does not speak",
                view.name
            )));
        }
    };
    Ok(McpServerSpec {
        name: view.name,
        launch,
        timeout: Duration::from_secs(view.timeout_seconds),
        credentials: view.credentials,
    })
}

impl HttpRegistry {
    /// A registry tool's uploaded code in this machine's cache (fetched once per hash,
    /// checked like an upload), and its endpoint made absolute there: an agent here runs
    /// exactly the registered code. Its dependencies are not installed here.
    async fn local_code(
        &self,
        name: &str,
        code: &CodeView,
        endpoint: &str,
    ) -> Result<String, RegistryLookupError> {
        let dir = toolshed_dispatch::DispatcherConfig::default()
            .cache_dir
            .join("registry-code")
            .join(&code.sha256);
        if !dir.is_dir() {
            let answer: Answer<Data<CodeDownload>> = self
                .client
                .get(&["api", "v1", "registry", "tools", name, "code"])
                .await
                .map_err(|e| RegistryLookupError::Unavailable(e.describe()))?;
            let bad = |why: String| {
                RegistryLookupError::InvalidAnswer(format!("the code of `{name}` {why}"))
            };
            let data = answer.body.data;
            let archive = toolshed_api::code::decode_base64(&data.archive_base64, u64::MAX / 2)
                .map_err(|e| bad(e.to_string()))?;
            toolshed_api::code::check_sha256(&code.sha256, &archive)
                .map_err(|_| bad("does not match its hash".into()))?;
            let limits = toolshed_api::code::CodeLimits {
                max_archive_bytes: u64::MAX,
                max_file_bytes: u64::MAX,
                max_files: usize::MAX,
                max_path_bytes: 4096,
            };
            let files = toolshed_api::code::check_archive(&archive, &limits)
                .map_err(|e| bad(e.to_string()))?;
            write_code(&dir, &files)
                .map_err(|e| bad(format!("cannot be written to {} ({e})", dir.display())))?;
        }
        for prefix in ["python:", "node:", "exec:"] {
            if let Some(rest) = endpoint.strip_prefix(prefix) {
                return Ok(format!("{prefix}{}", dir.join(rest).display()));
            }
        }
        Ok(endpoint.to_owned())
    }
}

/// Write checked files under a temporary folder beside `dir`, then rename it into place
/// (a folder that exists is complete).
fn write_code(
    dir: &std::path::Path,
    files: &[toolshed_api::code::CodeFile],
) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let parent = dir.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(".tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp)?;
    for f in files {
        let path = tmp.join(&f.path);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)?;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if f.executable { 0o755 } else { 0o644 })
            .open(&path)?;
        out.write_all(&f.content)?;
    }
    match std::fs::rename(&tmp, dir) {
        Ok(()) => Ok(()),
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_a_base_path_and_encode_segments() {
        let client = Client {
            base: parse_base("http://example.invalid:8000/prefix/").unwrap_or_else(|e| {
                panic!("{e}");
            }),
            token: Default::default(),
            http: reqwest::Client::new(),
        };
        let url = client.url(
            &["api", "v1", "registry", "tools", "a b/c"],
            &[("page", "2".into())],
        );
        assert_eq!(
            url.as_str(),
            "http://example.invalid:8000/prefix/api/v1/registry/tools/a%20b%2Fc?page=2"
        );
    }

    #[test]
    fn bad_base_urls_are_refused() {
        for bad in ["localhost:8000", "ftp://x", "http://x/?a=1"] {
            assert!(parse_base(bad).is_err(), "{bad}");
        }
    }

    fn client() -> Client {
        Client {
            base: parse_base("http://example.invalid:8000").unwrap(),
            token: Default::default(),
            http: reqwest::Client::new(),
        }
    }

    #[test]
    fn a_field_the_server_did_not_send_is_named() {
        let body = br#"{"data": [{"agent_id": "a1", "agent_name": "support"}]}"#;
        let e = client()
            .read::<Data<Vec<toolshed_api::views::UsageView>>>(
                &Method::GET,
                "/api/v1/registry/tools/x/usage",
                StatusCode::OK,
                body,
            )
            .unwrap_err();
        let text = e.describe();
        assert!(text.contains("`data[0]`"), "{text}");
        assert!(text.contains("missing field `agent_status`"), "{text}");
        assert!(
            text.contains("GET /api/v1/registry/tools/x/usage"),
            "{text}"
        );
        assert_eq!(e.exit_code(), EXIT_INTERNAL);
    }

    #[test]
    fn typed_answers_keep_the_json_as_sent() {
        let body = br#"{"data": {"status": "ok", "version": "9", "extra": 1}}"#;
        let a = client()
            .read::<Data<toolshed_api::views::Health>>(
                &Method::GET,
                "/healthz",
                StatusCode::OK,
                body,
            )
            .unwrap();
        assert_eq!(a.body.data.version, "9");
        assert_eq!(a.data_json()["extra"], 1);
    }

    #[test]
    fn an_error_without_the_envelope_keeps_its_status() {
        let e = client()
            .read::<Data<Value>>(
                &Method::GET,
                "/x",
                StatusCode::BAD_GATEWAY,
                b"<html>bad gateway</html>",
            )
            .unwrap_err();
        assert_eq!(e.status(), Some(StatusCode::BAD_GATEWAY));
        assert_eq!(e.code(), None);
        assert!(e.describe().contains("bad gateway"), "{}", e.describe());
        assert_eq!(e.exit_code(), EXIT_INTERNAL);
        let e = client()
            .read::<Data<Value>>(
                &Method::GET,
                "/x",
                StatusCode::NOT_FOUND,
                br#"{"error": {"code": "NOT_FOUND", "message": "no tool `x`", "details": null}}"#,
            )
            .unwrap_err();
        assert_eq!(e.code(), Some(ApiCode::NotFound));
        assert_eq!(e.describe(), "no tool `x` [NOT_FOUND]");
        assert_eq!(e.exit_code(), EXIT_BAD_INPUT);
    }

    #[test]
    fn details_already_in_the_message_are_not_repeated() {
        let e = ClientError::Api {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: ApiCode::InvalidBody,
            message: "field `name`: too long".into(),
            details: Some(ErrorDetails::Fields(vec![
                toolshed_api::FieldProblem::new("name", "too long"),
                toolshed_api::FieldProblem::new("x", "bad"),
            ])),
            token: None,
        };
        assert_eq!(
            e.describe(),
            "field `name`: too long [INVALID_BODY]\n  - field `x`: bad"
        );
        assert_eq!(e.exit_code(), EXIT_BAD_INPUT);
    }
}
