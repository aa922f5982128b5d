-- Version 2: what a call's execution left besides its result (stdout, stderr, exit code,
-- limits hit), as the JSON of `toolshed_core::Diagnostics`; NULL when there is nothing.
ALTER TABLE calls ADD COLUMN diagnostics TEXT;
