//! [`ApiCode`]: every error code the registry server answers, and its HTTP status.

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// A stable code the registry server answers in `{"error": {"code", …}}`. Scripts
    /// match on these; messages may change, codes may not. Each code has one HTTP status,
    /// except `REQUEST_REJECTED`, which keeps the status a layer answered. Every code is
    /// listed with what to do in docs/errors.md.
    ///
    /// Codes that a lower layer also uses (`NOT_FOUND`, `CONFLICT`, `UNAUTHENTICATED`, …)
    /// mean the same thing here; the server maps lower errors by their kind, never by
    /// their code text.
    #[derive(utoipa::ToSchema)]
    #[non_exhaustive]
    pub enum ApiCode {
        /// 400: the body is not JSON.
        InvalidJson,
        /// 400: a query parameter is wrong.
        InvalidQuery,
        /// 401: no token, or an invalid or expired one; or a wrong password at login.
        Unauthenticated,
        /// 403: the caller's role is too low.
        Forbidden,
        /// 404: no such tool, agent, user, run, call or route.
        NotFound,
        /// 405: the route exists but not with this method.
        MethodNotAllowed,
        /// 409: the change conflicts with the current state (a taken name, a stale
        /// revision, a call decided already).
        Conflict,
        /// 409: a stored tool definition this server refuses to execute.
        InvalidDefinition,
        /// 409: the run cannot be resumed by this server.
        NotResumable,
        /// 409: the run is completed, failed or cancelled.
        RunFinished,
        /// 409: a resumed run issued different calls than the journal recorded.
        NonDeterminism,
        /// 409: a run budget is spent; the run is failed.
        BudgetExhausted,
        /// 408: the request's body did not arrive within the server's body deadline, or
        /// arrived slower than its minimum rate; the connection is closed.
        BodyTimeout,
        /// 413: the body is larger than the server's limit.
        PayloadTooLarge,
        /// 415: the body is not sent as JSON.
        UnsupportedMediaType,
        /// 422: the body is JSON but a field is wrong (every field problem is listed).
        InvalidBody,
        /// 422: the args do not match the tool's input schema (every violation is listed).
        InvalidArgs,
        /// 422: not a role name.
        InvalidRole,
        /// 422: the password is too short.
        WeakPassword,
        /// 422: a human tool's answer does not match its schema.
        InvalidAnswer,
        /// 422: the tool's code cannot run in the sandbox (a `builtin:` or HTTP endpoint,
        /// or none).
        NotSandboxable,
        /// 500: a bug or a broken store; the server log has the details.
        Internal,
        /// 503: the journal's database is unavailable.
        JournalUnavailable,
        /// 503: the registry's database is unavailable.
        RegistryUnavailable,
        /// 503: the request took longer than the server allows.
        RequestTimeout,
        /// 503: this host cannot run untrusted code in the sandbox (the message names the
        /// mechanism and the fix), or the sandbox is at its capacity.
        SandboxUnavailable,
        /// Any other 4xx or 5xx a layer of the server answered without a code (its status
        /// is kept).
        RequestRejected,
        /// 403: the tool or agent belongs to another tenant (the message names it): only
        /// its tenant's users, or the organisation's owner, may change it.
        NotOwner,
        /// 422: a tool's dependencies (`implementation.dependencies`, `requirements.txt`,
        /// `package.json`) could not be installed; the message names the package and
        /// the installer's error.
        DependencyInstallFailed,
        /// 429: too many login attempts for this user or from this address, or every
        /// password check slot is busy; the `Retry-After` header says when to try again.
        TooManyAttempts,
        /// 429: the tenant executed faster than the server's `--execute-rate` allows; the
        /// `Retry-After` header says how many seconds to wait.
        RateLimited,
        /// 429: the tenant started its quota of runs for the period (`--run-quota`); the
        /// `Retry-After` header says how many seconds until one more may start.
        RunQuotaExceeded,
        /// 503: the server's disk has less free space than it keeps (`--min-free-disk-mb`):
        /// new runs are refused until space is freed; reads and decisions still work.
        StorageFull,
        /// 429: the client's address holds as many connections to the server as it may
        /// (`--max-connections-per-address`); the connection is closed.
        TooManyConnections,
        /// 422: a registered tool declares a credential outside the server's credentials
        /// policy for the caller's tenant, or a `TOOLSHED_*` name (never served).
        CredentialNotAllowed,
        /// 409: a resumed run holds an approved call whose tool changed since the
        /// approval; nothing ran, the run stays parked and the call waits for a new
        /// decision on the current revision (`details.changes` names each).
        RevisionChanged,
        /// 403: four-eyes: whoever asked for a call may not approve it; another user must.
        SelfApproval,
        /// 502: an MCP server could not be started or reached, or its handshake or
        /// `tools/list` failed (the message names the server and why).
        McpServerUnreachable,
        /// 409: the MCP server entry is disabled (entries from project-scoped config files
        /// are registered disabled): an admin enables it first.
        McpServerDisabled,
        /// 403: a changing request authenticated by the console's session cookie came
        /// without the session's CSRF token in `X-CSRF-Token`, with a wrong one, or from
        /// another origin (the message says which).
        CsrfRejected,
        /// 422: an attachment is not a kind toolshed reads (PDF, docx, xlsx, CSV, text,
        /// Markdown).
        AttachmentUnsupported,
        /// 422: an attachment is encrypted or password-protected.
        AttachmentEncrypted,
        /// 422: an attachment is damaged, or not what its name says.
        AttachmentCorrupt,
        /// 422: parsing an attachment passed a cap (pages, characters, rows, inflated
        /// bytes, XML nesting, time).
        AttachmentLimitExceeded,
    }
}

impl ApiCode {
    /// The HTTP status this code is answered with; `None` for
    /// [`RequestRejected`](ApiCode::RequestRejected), which keeps the layer's status.
    pub fn status(self) -> Option<u16> {
        Some(match self {
            ApiCode::InvalidJson | ApiCode::InvalidQuery => 400,
            ApiCode::Unauthenticated => 401,
            ApiCode::Forbidden
            | ApiCode::NotOwner
            | ApiCode::SelfApproval
            | ApiCode::CsrfRejected => 403,
            ApiCode::NotFound => 404,
            ApiCode::MethodNotAllowed => 405,
            ApiCode::Conflict
            | ApiCode::InvalidDefinition
            | ApiCode::NotResumable
            | ApiCode::RunFinished
            | ApiCode::NonDeterminism
            | ApiCode::BudgetExhausted
            | ApiCode::RevisionChanged
            | ApiCode::McpServerDisabled => 409,
            ApiCode::BodyTimeout => 408,
            ApiCode::PayloadTooLarge => 413,
            ApiCode::UnsupportedMediaType => 415,
            ApiCode::InvalidBody
            | ApiCode::InvalidArgs
            | ApiCode::InvalidRole
            | ApiCode::WeakPassword
            | ApiCode::InvalidAnswer
            | ApiCode::NotSandboxable
            | ApiCode::DependencyInstallFailed
            | ApiCode::CredentialNotAllowed
            | ApiCode::AttachmentUnsupported
            | ApiCode::AttachmentEncrypted
            | ApiCode::AttachmentCorrupt
            | ApiCode::AttachmentLimitExceeded => 422,
            ApiCode::RateLimited | ApiCode::RunQuotaExceeded | ApiCode::TooManyConnections => 429,
            ApiCode::Internal => 500,
            ApiCode::McpServerUnreachable => 502,
            ApiCode::JournalUnavailable
            | ApiCode::RegistryUnavailable
            | ApiCode::RequestTimeout
            | ApiCode::StorageFull
            | ApiCode::SandboxUnavailable => 503,
            ApiCode::TooManyAttempts => 429,
            ApiCode::RequestRejected => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use strum::IntoEnumIterator;

    use super::*;

    #[test]
    fn wire_text_and_display_are_one_name() {
        for code in ApiCode::iter() {
            let wire = serde_json::to_value(code).unwrap_or_default();
            assert_eq!(wire, code.as_str(), "{code:?}");
            assert_eq!(code.to_string(), code.as_str(), "{code:?}");
            let back: ApiCode = serde_json::from_value(wire).unwrap_or(ApiCode::Internal);
            assert_eq!(back, code);
        }
    }
}
