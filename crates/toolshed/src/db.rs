//! The journal and runtime the commands share: opened from `--database-url` /
//! `TOOLSHED_DATABASE_URL`, `sqlite://toolshed.db` in the working folder by default.

use std::sync::Arc;

use anyhow::anyhow;
use futures_util::future::BoxFuture;
use toolshed_core::{
    CredentialError, CredentialProvider, ErrorCode, Pipeline, Secret, ToolSet, ToolSource,
};
use toolshed_journal::{Journal, JournalError};
use toolshed_runtime::{Runtime, RuntimeConfig, RuntimeError};

use crate::output::{EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_PARKED, EXIT_TOOL_ERROR, Failure};

/// The default journal.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://toolshed.db";

/// The journal's URL this command was given, for what is built far from `main`
/// (an agent's background runs record themselves in the journal's database).
static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Remember the journal's URL for [`remembered_url`] (the first call wins).
pub fn remember_url(url: &str) {
    let _ = URL.set(url.to_owned());
}

/// The journal's URL `main` remembered, else the default.
pub fn remembered_url() -> String {
    URL.get()
        .cloned()
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned())
}

/// Where the journal is, opened on first use.
pub struct Db {
    url: String,
}

impl Db {
    /// From the flag or env var, or the default.
    pub fn new(url: Option<String>) -> Self {
        Db {
            url: url
                .filter(|u| !u.trim().is_empty())
                .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned()),
        }
    }

    /// The database URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Open the journal.
    pub async fn journal(&self) -> Result<Arc<dyn Journal>, Failure> {
        toolshed_journal::open(&self.url)
            .await
            .map_err(journal_failure)
    }

    /// Open the journal and build the runtime over the CLI's tools.
    pub async fn runtime(&self) -> Result<Runtime, Failure> {
        self.runtime_with(toolset()?).await
    }

    /// Open the journal and build the runtime over a toolset the caller already built.
    pub async fn runtime_with(&self, set: ToolSet) -> Result<Runtime, Failure> {
        self.runtime_of(set, self.runtime_config().await?).await
    }

    /// The settings every runtime of the CLI shares: `read_attachment` reads what
    /// `toolshed attach` stored in the same database.
    pub async fn runtime_config(&self) -> Result<RuntimeConfig, Failure> {
        let attachments = toolshed_journal::Attachments::open(&self.url)
            .await
            .map_err(journal_failure)?;
        Ok(RuntimeConfig {
            attachments: Some(Arc::new(attachments)),
            ..RuntimeConfig::default()
        })
    }

    /// Open the journal and build the runtime over `set` with `config`.
    pub async fn runtime_of(
        &self,
        set: ToolSet,
        config: RuntimeConfig,
    ) -> Result<Runtime, Failure> {
        let journal = self.journal().await?;
        let pipeline = Pipeline::builder(set).build();
        Runtime::new(pipeline, journal, config).map_err(runtime_failure)
    }
}

/// The CLI's own environment, where a built-in run outside an agent project reads the
/// env it declares (`TAVILY_API_KEY`, `SQL_DATABASE_URL`, …): each built-in gets exactly
/// its own names, nothing else of the environment (`toolshed_stdlib::with_env_from`).
#[derive(Debug)]
struct CliEnv;

impl CredentialProvider for CliEnv {
    fn describe(&self) -> String {
        "the CLI's environment".into()
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        let result = match std::env::var(name) {
            Ok(v) if !v.trim().is_empty() => Ok(Secret::new(v)),
            Ok(_) | Err(std::env::VarError::NotPresent) => Err(CredentialError::new(
                ErrorCode::CredentialNotFound,
                format!(
                    "`{name}` is not set in toolshed's environment; set it there (e.g. `export {name}=…`), or run the tool from an agent project whose env has it"
                ),
            )),
            Err(std::env::VarError::NotUnicode(_)) => Err(CredentialError::new(
                ErrorCode::CredentialProviderError,
                format!("`{name}` in toolshed's environment is not valid UTF-8"),
            )),
        };
        Box::pin(std::future::ready(result))
    }
}

/// The tools this CLI knows, with where each comes from.
pub fn toolset() -> Result<ToolSet, Failure> {
    let mut b = ToolSet::builder();
    let env: Arc<dyn CredentialProvider> = Arc::new(CliEnv);
    let all = toolshed_stdlib::tools()
        .into_iter()
        .map(|t| {
            (
                ToolSource::Builtin,
                toolshed_stdlib::with_env_from(t, env.clone()),
            )
        })
        .chain(
            toolshed_examples::tools()
                .into_iter()
                .map(|t| (ToolSource::Skill("examples".into()), t)),
        );
    for (source, tool) in all {
        b.add(source, tool).map_err(|e| Failure::Error {
            code: EXIT_INTERNAL,
            error: e.into(),
        })?;
    }
    Ok(b.build())
}

/// The exit code for a journal error: the user's mistakes are bad input (2), an
/// unreachable or broken database is 3.
pub fn journal_failure(e: JournalError) -> Failure {
    let code = match e {
        JournalError::InvalidUrl { .. }
        | JournalError::NotAJournal { .. }
        | JournalError::NotFound { .. }
        | JournalError::Conflict(_) => EXIT_BAD_INPUT,
        _ => EXIT_INTERNAL,
    };
    Failure::Error {
        code,
        error: anyhow!("{} [{}]", e, e.code()),
    }
}

/// The exit code for a runtime error.
pub fn runtime_failure(e: RuntimeError) -> Failure {
    match e {
        RuntimeError::Journal(j) => journal_failure(j),
        // The run stays parked: it waits for a new decision, as a parked run does.
        RuntimeError::RevisionChanged { .. } => Failure::Error {
            code: EXIT_PARKED,
            error: anyhow!("{} [{}]", e, e.code()),
        },
        RuntimeError::InvalidAnswer { .. }
        | RuntimeError::RunFinished { .. }
        | RuntimeError::SelfApproval { .. } => Failure::Error {
            code: EXIT_BAD_INPUT,
            error: anyhow!("{} [{}]", e, e.code()),
        },
        RuntimeError::NonDeterminism { .. } | RuntimeError::BudgetExhausted { .. } => {
            Failure::Error {
                code: EXIT_TOOL_ERROR,
                error: anyhow!("{} [{}]", e, e.code()),
            }
        }
        other => Failure::Error {
            code: EXIT_INTERNAL,
            error: anyhow!("{} [{}]", other, other.code()),
        },
    }
}
