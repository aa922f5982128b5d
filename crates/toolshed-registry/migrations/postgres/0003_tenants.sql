-- Tenants own what they register: every tool (and each of its revisions) and every agent
-- gets the tenant of the user who first registered it. Rows registered before owners
-- existed belong to the default tenant (`DEFAULT_TENANT` of toolshed-server, `default`).
-- Reads stay organisation-wide, so no index leads with the tenant.
ALTER TABLE registry_tools ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
ALTER TABLE registry_tool_versions ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
ALTER TABLE registry_agents ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
-- Admins now manage their own tenant's users only; the account the server seeded on an
-- empty database (`admin`, default tenant) keeps managing every tenant as the
-- organisation's `owner`, as new databases seed it.
UPDATE registry_users SET role = 'owner'
    WHERE username = 'admin' AND role = 'admin' AND tenant = 'default';
