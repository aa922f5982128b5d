-- MCP tool changes wait for an admin: what each linked tool's server sent
-- when its definition was last accepted (`accepted`, the `McpTool` as JSON; NULL for a
-- link written before this migration), and a changed definition a discover found and
-- holds back (`pending`, since `pending_at_ms`) until an admin accepts it. An entry may
-- opt into taking changes at once (`auto_accept`).
ALTER TABLE registry_mcp_servers
    ADD COLUMN auto_accept BIGINT NOT NULL DEFAULT 0 CHECK (auto_accept = 0 OR auto_accept = 1);
ALTER TABLE registry_mcp_server_tools
    ADD COLUMN accepted JSONB,
    ADD COLUMN pending JSONB,
    ADD COLUMN pending_at_ms BIGINT;
